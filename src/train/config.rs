//! What a training run is: an experiment TOML (`experiments/NAME.toml`) has a `[model]`
//! table ([`ModelConfig`]), a `[train]` table ([`TrainConfig`]) and a `[data]` table
//! ([`DataConfig`]); every field has a default.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::ModelConfig;

/// Precision modes (issue 5): where the weights live and what the math runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// f32 weights, f32 math.
    F32,
    /// f32 master weights, bf16 compute (no loss scaling).
    Bf16Mixed,
    /// f32 master weights, f16 compute, dynamic loss scaling.
    F16Mixed,
    /// bf16 weights, bf16 compute, bf16 optimizer state; norms accumulate in bf16.
    PureBf16,
    /// f16 weights, f16 compute, f16 optimizer state; norms accumulate in f16 ("Norm matters").
    PureF16,
}

impl Precision {
    pub const ALL: [Precision; 5] =
        [Precision::F32, Precision::Bf16Mixed, Precision::F16Mixed, Precision::PureBf16, Precision::PureF16];
    /// The name used in configs, file names and reports.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16Mixed => "bf16_mixed",
            Precision::F16Mixed => "f16_mixed",
            Precision::PureBf16 => "pure_bf16",
            Precision::PureF16 => "pure_f16",
        }
    }
}

/// Where Adam's moments `m` and `v` are stored.
///
/// The pure modes have no master copy of the weights, but the moments are optimizer state, not
/// a copy of the weights. Stored in f16, `v = (1 - beta2) g^2` underflows to 0 for every
/// |g| below about 1e-3 (beta2 = 0.95). At the next step, a weight whose gradient is zero or
/// tiny (the embedding row of a byte absent from the batch) while `m` still remembers an
/// earlier gradient gets the update `lr * m_hat / eps`, thousands of times `lr`: pure-f16 runs
/// then diverge within a few steps whatever their norm (measured: GPT+ with L1 and with L2 on
/// the quick preset, NaN by step 5), which hides the effect the comparison measures (which
/// norm survives half precision; "Norm matters" trained with SGD, which has no second
/// moment). So the default keeps the moments in f32; `storage` reproduces the naive
/// implementation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerState {
    /// f32 moments in every mode.
    #[default]
    F32,
    /// Moments in the parameters' storage dtype (f16/bf16 in the pure modes).
    Storage,
}

/// The optimizer, schedule, precision and bookkeeping of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub steps: u64,
    pub batch_size: usize,
    pub seq_len: usize,
    /// Peak learning rate.
    pub lr: f64,
    pub min_lr: f64,
    pub warmup_steps: u64,
    /// AdamW decoupled weight decay on matrices (0 for nGPT/anGPT, as in the papers).
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub adam_eps: f64,
    /// Global gradient-norm clip (0 = off).
    pub grad_clip: f64,
    pub precision: Precision,
    /// Where Adam's moments live (see [`OptimizerState`]; matters only in the pure modes).
    pub optimizer_state: OptimizerState,
    /// Store every norm site's input and output as fp8 E4M3 (per-tensor power-of-two scale
    /// from the amax, straight-through backward; see `model::norm_site`). Works with every
    /// precision mode; the counters appear as `counters.fp8` in the step records and summary.
    pub fp8_norm_io: bool,
    /// f16 mixed: initial dynamic loss scale and the clean steps before it doubles.
    pub loss_scale_init: f64,
    pub loss_scale_growth_interval: u64,
    pub eval_every: u64,
    /// Validation batches per evaluation (fixed windows, same for every run).
    pub eval_batches: usize,
    pub log_every: u64,
    /// 0 = only at the end.
    pub checkpoint_every: u64,
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            steps: 300,
            batch_size: 16,
            seq_len: 64,
            lr: 3e-3,
            min_lr: 0.0,
            warmup_steps: 0,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.95,
            adam_eps: 1e-8,
            grad_clip: 1.0,
            precision: Precision::F32,
            optimizer_state: OptimizerState::F32,
            fp8_norm_io: false,
            loss_scale_init: 65536.0,
            loss_scale_growth_interval: 200,
            eval_every: 50,
            eval_batches: 8,
            log_every: 1,
            checkpoint_every: 0,
            seed: 1234,
        }
    }
}

/// The corpus and its split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// `None` = the bundled corpus (`experiments/corpus/`).
    pub corpus: Option<PathBuf>,
    pub val_fraction: f64,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig { corpus: None, val_fraction: 0.1 }
    }
}

/// One run: model, training and data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExperimentConfig {
    pub model: ModelConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
}
