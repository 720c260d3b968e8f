//! One training step: forward, loss, backward, gradients to f32 (unscaled), global norm,
//! overflow check, clipping, AdamW, the model's post-step projection.
//!
//! A step whose gradient is not finite is skipped (no update, no projection): under f16 mixed
//! precision this is dynamic loss scaling's overflow step (the scale halves); in the other
//! modes it is recorded the same way (`skipped`), and a non-finite *loss* is the caller's
//! divergence signal (no backward is run for it).

use candle_core::Result;

use super::config::TrainConfig;
use super::grad;
use super::loss::cross_entropy;
use super::loss_scale::{LossScaler, ScaleEvent};
use super::optim::{AdamW, AdamWConfig};
use super::record::NormCounters;
use super::totals::counters_of;
use crate::data::Batch;
use crate::model::{ForwardCtx, LanguageModel, OpPath};

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// Unscaled mean loss of the batch (f32 computed).
    pub loss: f64,
    /// Global gradient norm before clipping, unscaled (non-finite on overflow; NaN when the
    /// loss was not finite and no backward ran).
    pub grad_norm: f64,
    /// The loss scale used (f16 mixed only).
    pub loss_scale: Option<f64>,
    pub skipped: bool,
    pub scale_event: ScaleEvent,
    /// The norms' counters of this step's forward and backward.
    pub counters: NormCounters,
}

/// Optimizer, loss scaler and precision of a run; the model is passed to each step.
#[derive(Clone, Debug)]
pub struct Trainer {
    ctx: ForwardCtx,
    optimizer: AdamW,
    scaler: Option<LossScaler>,
    grad_clip: f64,
}

impl Trainer {
    /// A trainer for `model` (its parameters must already be in the mode's storage dtype).
    pub fn new(model: &dyn LanguageModel, train: &TrainConfig) -> Result<Self> {
        let p = train.precision;
        let cfg = AdamWConfig { beta1: train.beta1, beta2: train.beta2, eps: train.adam_eps, weight_decay: train.weight_decay };
        let optimizer = AdamW::new(model.params(), cfg, p.optimizer_state_dtype(train.optimizer_state))?;
        let scaler = p
            .uses_loss_scaling()
            .then(|| LossScaler::new(train.loss_scale_init, train.loss_scale_growth_interval));
        Ok(Trainer { ctx: Self::ctx_for(train), optimizer, scaler, grad_clip: train.grad_clip })
    }

    /// The forward context of a run of `train`: the precision mode's compute dtype and
    /// accumulator, `fp8_norm_io`, `OpPath::Auto` (what `crate::model::check_device` checks).
    pub fn ctx_for(train: &TrainConfig) -> ForwardCtx {
        let p = train.precision;
        ForwardCtx { fp8_norm_io: train.fp8_norm_io, ..ForwardCtx::new(p.compute_dtype(), p.accum()) }
    }

    /// The same trainer on the op path `ops` (`OpPath::Composed` trains through the composed
    /// candle ops on the CPU: the tests compare it with the fused path).
    pub fn with_ops(mut self, ops: OpPath) -> Self {
        self.ctx.ops = ops;
        self
    }

    pub fn ctx(&self) -> ForwardCtx {
        self.ctx
    }

    pub fn optimizer(&self) -> &AdamW {
        &self.optimizer
    }

    pub fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.optimizer
    }

    pub fn scaler(&self) -> Option<LossScaler> {
        self.scaler
    }

    pub fn set_scaler(&mut self, scaler: Option<LossScaler>) {
        self.scaler = scaler;
    }

    /// One step on `batch` at learning rate `lr`.
    pub fn step(&mut self, model: &dyn LanguageModel, batch: &Batch, lr: f64) -> Result<StepStats> {
        let out = model.forward(&batch.inputs, &self.ctx)?;
        let loss = cross_entropy(&out.logits, &batch.targets)?;
        let loss_val = f64::from(loss.to_scalar::<f32>()?);
        let loss_scale = self.scaler.map(|s| s.scale);
        if !loss_val.is_finite() {
            let counters = counters_of(&model.telemetry().take());
            return Ok(StepStats {
                loss: loss_val,
                grad_norm: f64::NAN,
                loss_scale,
                skipped: true,
                scale_event: ScaleEvent::None,
                counters,
            });
        }
        let scale = loss_scale.unwrap_or(1.0);
        let scaled = if scale == 1.0 { loss } else { loss.affine(scale, 0.0)? };
        let grads = scaled.backward()?;
        let store = model.params();
        let grads = grad::collect_f32(store, &grads, 1.0 / scale)?;
        let grad_norm = grad::global_norm(&grads)?;
        let finite = grad_norm.is_finite();
        let scale_event = match self.scaler.as_mut() {
            Some(s) => s.update(finite),
            None => ScaleEvent::None,
        };
        if finite {
            let grads = grad::scale(grads, grad::clip_factor(grad_norm, self.grad_clip))?;
            self.optimizer.step(store, &grads, lr)?;
            model.project()?;
        }
        let counters = counters_of(&model.telemetry().take());
        Ok(StepStats { loss: loss_val, grad_norm, loss_scale, skipped: !finite, scale_event, counters })
    }
}
