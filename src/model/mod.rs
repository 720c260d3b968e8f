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
//! - Devices: the fused custom ops (causal softmax, scale, LERP, SwiGLU) and the norm ops run on
//!   the CPU; on another device the same functions run composed from candle primitives
//!   (`composed.rs`, `crate::ops::composed`), as [`ForwardCtx::ops`] ([`OpPath`]) chooses.
//!   [`check_device`] refuses, before a run, what no path runs there (docs/models.md, "Devices").

use std::sync::Arc;

use candle_core::{DType, Device, DeviceLocation, Tensor};
use normlab_norms::Accum;

use crate::ops::{check_fp8_device, device_name, norm_route, OpsError, Telemetry};
pub use crate::ops::OpPath;

mod angpt;
mod attention;
mod composed;
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
    /// straight-through backward; `norm_site.rs` and `crate::ops::fp8_e4m3_store`). CPU only.
    pub fp8_norm_io: bool,
    /// Which implementation runs the fused ops and the norms: `Auto` (the custom ops on a CPU
    /// device, the composed candle path elsewhere), or `Fused` / `Composed` everywhere.
    pub ops: OpPath,
}

impl ForwardCtx {
    /// `compute` and `accum`, no probes, no fp8 storage, `OpPath::Auto`.
    pub const fn new(compute: DType, accum: Accum) -> Self {
        ForwardCtx { compute, accum, probes: false, fp8_norm_io: false, ops: OpPath::Auto }
    }

    /// The same context on the op path `ops`.
    pub const fn with_ops(self, ops: OpPath) -> Self {
        ForwardCtx { ops, ..self }
    }
}

/// Whether a forward of a model of `cfg` under `ctx` can run on `device`, checked before any
/// work (the training loop calls it before building the model), or the typed reason:
///
/// - `ctx.fp8_norm_io` off the CPU (the fp8 store is a CPU op): `OpsError::DeviceUnsupported`;
/// - `OpPath::Fused` off the CPU (the fused custom ops have only a `cpu_fwd`): same;
/// - every norm site's route ([`crate::ops::norm_route`], the rule the forward itself applies):
///   a pure f16/bf16 accumulator off the CPU op, a composed top-k too wide for CUDA's sort.
///
/// The norm sites see `ctx.compute` (f32 under `fp8_norm_io`, the dtype the norm runs in between
/// the fp8 stores; f64 on the f64 path). Errors are `ModelError::Ops`.
pub fn check_device(cfg: &ModelConfig, ctx: &ForwardCtx, device: &DeviceLocation) -> Result<(), ModelError> {
    cfg.validate()?;
    if ctx.fp8_norm_io {
        check_fp8_device(device)?;
    }
    if ctx.ops == OpPath::Fused && !matches!(device, DeviceLocation::Cpu) {
        return Err(OpsError::DeviceUnsupported {
            what: "OpPath::Fused (the causal softmax, scale, LERP and SwiGLU custom ops)".into(),
            device: device_name(device),
            why: "they have only a CPU implementation; use OpPath::Auto (composed on this device)".into(),
        }
        .into());
    }
    let norm_dtype = match (ctx.fp8_norm_io, ctx.compute) {
        (_, DType::F64) => DType::F64,
        (true, _) => DType::F32,
        (false, dt) => dt,
    };
    // Every site uses the configured norm (the exact L2 where `Nu` replaces some), at width d
    // or d_h; the site's target does not change the route.
    let choice = if cfg.norm == NormChoice::Nu { NormChoice::L2 } else { cfg.norm };
    for n in [cfg.d_model, cfg.head_dim()] {
        let site = norm_site::NormSite::new(choice, n, norm_site::Target::Unit, cfg)?;
        norm_route(ctx.ops, device, norm_dtype, ctx.accum, site.spec(), n)?;
    }
    Ok(())
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
    /// What the device cannot run (`check_device`).
    #[error(transparent)]
    Ops(#[from] OpsError),
    #[error(transparent)]
    Params(#[from] ParamError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
