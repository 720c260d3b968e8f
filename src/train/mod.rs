//! Training: optimizer, schedule, precision modes, checkpoints and telemetry.
//!
//! - [`config`]: the experiment TOML (`[model]`, `[train]`, `[data]`); [`load`] reads it with
//!   `--set` overrides and checks the values.
//! - [`record`]: what a run writes (`metrics.jsonl`, `summary.json`): the contract with the
//!   comparison report.
//! - [`precision`]: storage, compute, accumulator and optimizer-state dtypes of each mode.
//! - [`optim`] (AdamW), [`schedule`] (warmup + cosine), [`grad`] (global norm, clipping),
//!   [`loss_scale`] (dynamic loss scaling for f16 mixed).
//! - [`step`]: one step (forward, backward, optimizer, projection); [`eval`]: validation.
//! - [`checkpoint`], [`metrics`], [`totals`], [`files`]: what is written, atomically.
//! - [`runner`]: the loop.
//! - [`malloc`]: allocator settings the CLI applies at start-up (candle allocates per op).

pub mod checkpoint;
pub mod config;
pub mod error;
pub mod eval;
pub mod files;
pub mod grad;
pub mod load;
pub mod loss;
pub mod loss_scale;
pub mod malloc;
pub mod metrics;
pub mod optim;
pub mod precision;
pub mod progress;
pub mod record;
pub mod runner;
pub mod schedule;
pub mod step;
pub mod totals;

pub use config::{DataConfig, ExperimentConfig, OptimizerState, Precision, TrainConfig};
pub use error::TrainError;
pub use load::{load_experiment, parse_experiment};
pub use record::{EvalRecord, LayerNorms, NormCounters, Record, RunSummary, StepRecord};
pub use runner::{metrics_path, run_model, run_segment, summary_path, Segment};

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

/// Train one configuration, writing `out/metrics.jsonl`, checkpoints under `out/checkpoint/`
/// and, at the end, `out/summary.json` (the presence of which marks the run finished).
///
/// The model is `model::build(&cfg.model, precision storage dtype, cfg.train.seed, device)`.
/// Without `opts.resume`, an `out` that already holds a run is refused
/// ([`TrainError::OutDirInUse`]); with it, the run continues from the checkpoint (or starts
/// fresh when there is none) and ends exactly as an uninterrupted run would on the CPU.
pub fn run(cfg: &ExperimentConfig, name: &str, out: &Path, opts: &RunOptions) -> Result<RunSummary, TrainError> {
    load::validate(cfg)?;
    check_device(&cfg.model, &cfg.train, &opts.device)?;
    // A missing corpus is reported before the (possibly slow) model build.
    if let Some(p) = cfg.data.corpus.as_ref().filter(|p| !p.exists()) {
        return Err(crate::data::DataError::NotFound { path: p.clone() }.into());
    }
    let model = crate::model::build(&cfg.model, cfg.train.precision.storage_dtype(), cfg.train.seed, &opts.device)?;
    run_model(model.as_ref(), cfg, name, out, opts)
}

/// Whether a model of `model` can train with `train` on `device`:
/// [`crate::model::check_device`] with the run's forward context ([`step::Trainer::ctx_for`]).
/// Off the CPU the pure f16/bf16 precision modes (their pure accumulators) and
/// `train.fp8_norm_io` are refused here, before the model is built or a step runs
/// (`TrainError::Model(ModelError::Ops(OpsError::DeviceUnsupported { .. }))`).
pub fn check_device(model: &crate::model::ModelConfig, train: &TrainConfig, device: &Device) -> Result<(), TrainError> {
    let ctx = step::Trainer::ctx_for(train);
    crate::model::check_device(model, &ctx, &device.location())?;
    Ok(())
}

/// The default name of a run: `arch-norm-precision-sSEED` (`arch-norm-precision-fp8-sSEED` with
/// `train.fp8_norm_io`).
pub fn default_run_name(cfg: &ExperimentConfig) -> String {
    let fp8 = if cfg.train.fp8_norm_io { "-fp8" } else { "" };
    format!("{}-{}-{}{fp8}-s{}", cfg.model.arch.name(), cfg.model.norm.name(), cfg.train.precision.name(), cfg.train.seed)
}
