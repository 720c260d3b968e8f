//! Training: optimizer, schedule, precision modes, checkpoints and telemetry.
//!
//! - [`config`]: the experiment TOML (`[model]`, `[train]`, `[data]`).
//! - [`record`]: what a run writes (`metrics.jsonl`, `summary.json`): the contract with the
//!   comparison report.

pub mod config;
pub mod record;

pub use config::{DataConfig, ExperimentConfig, Precision, TrainConfig};
pub use record::{EvalRecord, LayerNorms, NormCounters, Record, RunSummary, StepRecord};

use std::path::Path;

use candle_core::Device;

/// How [`run`] behaves around the run itself.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub device: Device,
    /// Continue from `out/checkpoint` if it exists (else start fresh).
    pub resume: bool,
    /// Show a progress bar (loss, tokens/s) on stderr.
    pub progress: bool,
}

/// Why a run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("training is not built yet")]
    NotBuilt,
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Train one configuration, writing `out/metrics.jsonl`, checkpoints under `out/checkpoint/`
/// and, at the end, `out/summary.json` (the presence of which marks the run finished).
pub fn run(cfg: &ExperimentConfig, name: &str, out: &Path, opts: &RunOptions) -> Result<RunSummary, TrainError> {
    // Contract placeholder: the training issue replaces this body.
    let _ = (cfg, name, out, opts);
    Err(TrainError::NotBuilt)
}
