//! What a training run writes: one JSON object per line in `RUN_DIR/metrics.jsonl`, and
//! `RUN_DIR/summary.json` at the end. This is the contract between the training loop and the
//! comparison report; change it only together with `SCHEMA`.
//!
//! Every line carries `"kind"`: `"step"` ([`StepRecord`], every logged step), `"eval"`
//! ([`EvalRecord`], every `eval_every` steps and at the end) or `"diverged"`
//! ([`DivergedRecord`], once, at the first non-finite loss).

use serde::{Deserialize, Serialize};

/// Schema tag of `summary.json`.
pub const SCHEMA: &str = "normlab.run/1";

/// The norms' counters over a period (forward and backward summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NormCounters {
    pub nonfinite_in: u64,
    pub acc_overflow: u64,
    pub nonfinite_out: u64,
}

/// One optimizer step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    pub loss: f64,
    pub lr: f64,
    /// Global L2 norm of the gradient before clipping (unscaled).
    pub grad_norm: f64,
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    /// Wall time since the run (or its first segment) started, resumed segments included.
    pub wall_s: f64,
    pub counters: NormCounters,
    /// f16 mixed precision: the loss scale used at this step.
    pub loss_scale: Option<f64>,
    /// The step was skipped (non-finite gradient under dynamic loss scaling).
    pub skipped: bool,
}

/// Per-layer norms at an evaluation point (the anGPT paper's "curse of depth" plot).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerNorms {
    pub layer: usize,
    /// Mean over tokens of ||h|| of the residual stream after the layer.
    pub residual_norm: f64,
    /// Mean over tokens of the attention block's output norm (before it joins the stream).
    pub attn_out_norm: f64,
    /// Mean over tokens of the MLP block's output norm.
    pub mlp_out_norm: f64,
}

/// An evaluation point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    pub step: u64,
    pub val_loss: f64,
    pub wall_s: f64,
    pub layers: Vec<LayerNorms>,
    /// Variance of Adam's first moment per parameter group (group name -> variance).
    pub adam_m_var: std::collections::BTreeMap<String, f64>,
}

/// The first non-finite loss.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivergedRecord {
    pub step: u64,
    pub loss: f64,
}

/// One line of `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Step(StepRecord),
    Eval(EvalRecord),
    Diverged(DivergedRecord),
}

/// `summary.json`: what the comparison needs of a finished run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub schema: String,
    /// The run's name (`arch-norm-precision-sSEED`).
    pub name: String,
    pub arch: String,
    pub norm: String,
    pub precision: String,
    pub seed: u64,
    pub steps: u64,
    pub tokens: u64,
    pub final_val_loss: Option<f64>,
    pub best_val_loss: Option<f64>,
    pub diverged_at: Option<u64>,
    pub counters: NormCounters,
    pub median_step_time_s: f64,
    pub tokens_per_s: f64,
    pub wall_s: f64,
    /// Overflow-skipped steps under dynamic loss scaling.
    pub skipped_steps: u64,
    /// sha256 of the canonical JSON of the run's config.
    pub config_hash: String,
}
