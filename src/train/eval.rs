//! Validation: the mean next-token loss over the first `eval_batches` batches of the fixed
//! consecutive validation windows ([`EvalWindows`]), the same for every step and every run,
//! and the per-layer norms the model probes on the same forwards (averaged over batches).

use candle_core::{DType, Device};

use super::error::TrainError;
use super::loss::cross_entropy;
use super::record::LayerNorms;
use crate::data::{EvalWindows, Part, Split};
use crate::model::{ForwardCtx, LanguageModel};

/// The validation set of a run.
#[derive(Clone, Debug)]
pub struct Evaluator {
    windows: EvalWindows,
    batches: usize,
}

/// What one evaluation measured.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalResult {
    /// Mean over every target token of the evaluated batches.
    pub val_loss: f64,
    pub layers: Vec<LayerNorms>,
}

impl Evaluator {
    pub fn new(split: &Split, batch: usize, seq: usize, eval_batches: usize) -> Result<Self, TrainError> {
        let windows = EvalWindows::new(split, Part::Val, batch, seq)?;
        let batches = eval_batches.min(windows.num_batches()).max(1);
        Ok(Evaluator { windows, batches })
    }

    /// Batches evaluated each time.
    pub fn batches(&self) -> usize {
        self.batches
    }

    /// Loss and probes of `model` in the precision of `ctx` (probes switched on here). The
    /// norms' counters of these forwards are drained and dropped: they are not training steps.
    pub fn evaluate(&self, model: &dyn LanguageModel, ctx: ForwardCtx, device: &Device) -> Result<EvalResult, TrainError> {
        let ctx = ForwardCtx { probes: true, ..ctx };
        let mut loss_sum = 0.0f64;
        let mut tokens = 0usize;
        let mut layers: Vec<LayerNorms> = Vec::new();
        let mut probed = 0usize;
        for i in 0..self.batches {
            let Some(batch) = self.windows.batch(i, device)? else { break };
            let out = model.forward(&batch.inputs, &ctx)?;
            let n = batch.targets.elem_count();
            let loss = cross_entropy(&out.logits, &batch.targets)?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            loss_sum += loss * n as f64;
            tokens += n;
            if !out.probes.is_empty() {
                if layers.is_empty() {
                    layers = (0..out.probes.len())
                        .map(|layer| LayerNorms { layer, residual_norm: 0.0, attn_out_norm: 0.0, mlp_out_norm: 0.0 })
                        .collect();
                }
                for (acc, p) in layers.iter_mut().zip(&out.probes) {
                    acc.residual_norm += p.residual_norm;
                    acc.attn_out_norm += p.attn_out_norm;
                    acc.mlp_out_norm += p.mlp_out_norm;
                }
                probed += 1;
            }
        }
        if probed > 0 {
            for l in &mut layers {
                l.residual_norm /= probed as f64;
                l.attn_out_norm /= probed as f64;
                l.mlp_out_norm /= probed as f64;
            }
        }
        model.telemetry().take();
        Ok(EvalResult { val_loss: loss_sum / tokens.max(1) as f64, layers })
    }
}
