//! Training: optimizer, schedule, precision modes, checkpoints and telemetry.
//!
//! - [`config`]: the experiment TOML (`[model]`, `[train]`, `[data]`).
//! - [`record`]: what a run writes (`metrics.jsonl`, `summary.json`): the contract with the
//!   comparison report.

pub mod config;
pub mod record;

pub use config::{DataConfig, ExperimentConfig, Precision, TrainConfig};
pub use record::{EvalRecord, LayerNorms, NormCounters, Record, RunSummary, StepRecord};
