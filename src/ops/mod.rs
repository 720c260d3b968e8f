//! The norms of `normlab-norms` as candle ops with autograd.
//!
//! - [`norm`]: the function form, `y = norm(x) * w + b` over the last dimension, any rank,
//!   any layout, f32/f16/bf16 (and f64, for gradient checks).
//! - [`RmsNorm`], [`LayerNorm`], [`UnitNorm`], [`L1Norm`], [`LInfNorm`], [`TopKNorm`] and the
//!   generic [`Norm`]: `candle_core::Module`s in the style of candle-nn.
//! - [`Telemetry`]: non-finite and overflow counters of every call, for a training loop.
//!
//! The forward is a candle custom op calling `normlab_norms::row::forward` (statistics in the
//! chosen accumulator, f32 by default; one rounding into the output dtype), and saves its
//! per-row statistics in the op. Its `bwd` runs `normlab_norms::row::backward` with those
//! statistics as a second custom op, so candle's autograd gets dx, dweight and dbias from one
//! pass — unlike candle-nn's fused `rms_norm`/`layer_norm`, which are applied without backward
//! and silently stop gradients.

mod backward;
mod error;
mod forward;
mod functional;
mod module;
mod storage;
mod telemetry;

pub use error::OpsError;
pub use functional::norm;
pub use module::{L1Norm, LInfNorm, LayerNorm, Norm, RmsNorm, TopKNorm, UnitNorm};
pub use telemetry::{Telemetry, TelemetrySnapshot};
