//! The language models: GPT+, nGPT and anGPT on candle, with the norm inside them a choice.
//!
//! Contract with the training loop (`crate::train`):
//! - [`build`] creates a model with its parameters in a [`ParamStore`] (candle `Var`s in the
//!   storage dtype the precision mode asks for: f32 for f32 and mixed modes, f16/bf16 for the
//!   pure modes), initialised from a seed, already projected (nGPT/anGPT constraints hold).
//! - [`LanguageModel::forward`] runs in `ctx.compute` (parameters are cast at use, which is
//!   differentiable, so mixed precision gets f32 gradients on f32 masters) and returns f32
//!   logits `[B, T, vocab]`, plus per-layer norms when `ctx.probes`.
//! - [`LanguageModel::project`] applies the post-optimizer-step constraints in place on the
//!   `Var`s the optimizer owns (nGPT unit norm, anGPT `||w|| <= 1`; GPT+: nothing).
//! - The norms' counters accumulate in [`LanguageModel::telemetry`].

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use normlab_norms::Accum;

use crate::ops::Telemetry;

pub mod config;
pub mod params;

pub use config::{Arch, ModelConfig, NormChoice};
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
    /// `[B, T, vocab]`, f32.
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
    // Contract placeholder: the model issue replaces this body with the three architectures.
    let _ = (storage, seed, device);
    Err(ModelError::NotBuilt(cfg.arch.name()))
}

/// Why a model could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("architecture {0} is not built yet")]
    NotBuilt(&'static str),
    #[error(transparent)]
    Params(#[from] ParamError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
