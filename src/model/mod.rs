//! The language models: GPT+, nGPT and anGPT on candle, with the norm inside them a choice.
//!
//! Contract with the training loop (`crate::train`):
//! - [`build`] creates a model with its parameters in a [`ParamStore`] (candle `Var`s in the
//!   storage dtype the precision mode asks for: f32 for f32 and mixed modes, f16/bf16 for the
//!   pure modes), initialised from a seed, already projected (nGPT/anGPT constraints hold).
//! - [`LanguageModel::forward`] runs in `ctx.compute` (parameters are cast at use, which is
//!   differentiable, so mixed precision gets f32 gradients on f32 masters) and returns f32
//!   logits `[B, T, vocab]` (f64 on the f64 reference path), plus per-layer norms when `ctx.probes`.
//! - [`LanguageModel::project`] applies the post-optimizer-step constraints in place on the
//!   `Var`s the optimizer owns (nGPT unit norm, anGPT `||w|| <= 1`; GPT+: nothing).
//! - The norms' counters accumulate in [`LanguageModel::telemetry`].

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use normlab_norms::Accum;

use crate::ops::Telemetry;

mod angpt;
mod attention;
pub mod config;
pub mod factors;
mod fused;
mod gpt_plus;
mod init;
mod layers;
mod ngpt;
mod norm_site;
pub mod params;
mod project;
mod rope;

pub use config::{Arch, ModelConfig, NormChoice};
pub use factors::AngptFactors;
pub use params::{Param, ParamError, ParamGroup, ParamStore};

/// How one forward pass runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForwardCtx {
    /// The dtype of the activations and matmuls (parameters are cast to it at use).
    pub compute: DType,
    /// The accumulator of the norms' statistics (f32, or pure f16/bf16 in the pure modes).
    pub accum: Accum,
    /// Measure per-layer norms (costs a few reductions; only at evaluation points).
    pub probes: bool,
    /// Store every norm site's input and output as fp8 E4M3 (per-tensor power-of-two scale,
    /// straight-through backward; `norm_site.rs` and `crate::ops::fp8_e4m3_store`).
    pub fp8_norm_io: bool,
}

impl ForwardCtx {
    /// `compute` and `accum`, no probes, no fp8 storage.
    pub fn new(compute: DType, accum: Accum) -> Self {
        ForwardCtx { compute, accum, probes: false, fp8_norm_io: false }
    }
}

/// Per-layer norms of one forward pass (means over tokens).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerProbe {
    pub residual_norm: f64,
    pub attn_out_norm: f64,
    pub mlp_out_norm: f64,
}

/// What a forward pass returns.
#[derive(Clone, Debug)]
pub struct ForwardOut {
    /// `[B, T, vocab]`, f32 (f64 when `ForwardCtx::compute` is f64: the reference path of the
    /// gradient checks).
    pub logits: Tensor,
    /// One per layer when `ForwardCtx::probes`, else empty.
    pub probes: Vec<LayerProbe>,
}

/// A trainable language model over token ids `[B, T]` (u32).
pub trait LanguageModel: Send + Sync {
    fn config(&self) -> &ModelConfig;
    fn params(&self) -> &ParamStore;
    fn forward(&self, tokens: &Tensor, ctx: &ForwardCtx) -> candle_core::Result<ForwardOut>;
    /// Post-optimizer-step constraints, in place on the parameters (no-op for GPT+).
    fn project(&self) -> candle_core::Result<()>;
    fn telemetry(&self) -> &Arc<Telemetry>;
}

/// Build a model with parameters stored in `storage`, initialised from `seed`.
pub fn build(
    cfg: &ModelConfig,
    storage: DType,
    seed: u64,
    device: &Device,
) -> Result<Box<dyn LanguageModel>, ModelError> {
    cfg.validate()?;
    Ok(match cfg.arch {
        Arch::GptPlus => Box::new(gpt_plus::GptPlus::build(cfg, storage, seed, device)?),
        Arch::NGpt => Box::new(ngpt::NGpt::build(cfg, storage, seed, device)?),
        Arch::AnGpt => Box::new(angpt::AnGpt::build(cfg, storage, seed, device)?),
    })
}

/// `[B, T]` u32 token ids below `vocab`, or an error naming what is wrong.
pub(crate) fn check_tokens(tokens: &Tensor, vocab: usize) -> candle_core::Result<(usize, usize)> {
    if tokens.dtype() != DType::U32 {
        return Err(candle_core::Error::wrap(ModelError::Tokens(format!("dtype {:?} (u32 expected)", tokens.dtype()))));
    }
    let (b, t) = tokens.dims2().map_err(|_| candle_core::Error::wrap(ModelError::Tokens(format!("shape {:?} ([batch, time] expected)", tokens.dims()))))?;
    if b == 0 || t == 0 {
        return Err(candle_core::Error::wrap(ModelError::Tokens(format!("empty shape {:?}", tokens.dims()))));
    }
    let max = tokens.max_all()?.to_scalar::<u32>()?;
    if max as usize >= vocab {
        return Err(candle_core::Error::wrap(ModelError::Tokens(format!("id {max} is outside the vocabulary of {vocab}"))));
    }
    Ok((b, t))
}

/// Why a model could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("architecture {0} is not built yet")]
    NotBuilt(&'static str),
    #[error("model config: {field} = {value}: {why}")]
    InvalidConfig { field: &'static str, value: String, why: &'static str },
    #[error("model config: arch {arch} with norm {norm} is not supported: {why}")]
    Unsupported { arch: &'static str, norm: String, why: String },
    #[error("unknown norm {0:?} (expected l2, rms, l1, linf, topkK with K >= 1, or nu)")]
    UnknownNorm(String),
    #[error("unknown architecture {0:?} (expected gpt_plus, ngpt or angpt)")]
    UnknownArch(String),
    #[error("parameter storage dtype {0:?} is not supported (f32, f16, bf16, or f64 for checks)")]
    StorageDType(DType),
    #[error("token ids: {0}")]
    Tokens(String),
    #[error("anGPT factors: {0}")]
    Nu(normlab_norms::NormError),
    #[error(transparent)]
    Params(#[from] ParamError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
