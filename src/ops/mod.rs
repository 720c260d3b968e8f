//! The norms of `normlab-norms` as candle ops with autograd.
//!
//! - [`norm`]: the function form, `y = norm(x) * w + b` over the last dimension, any rank,
//!   any layout, f32/f16/bf16 (and f64, for gradient checks).
//! - [`RmsNorm`], [`LayerNorm`], [`UnitNorm`], [`L1Norm`], [`LInfNorm`], [`TopKNorm`] and the
//!   generic [`Norm`]: `candle_core::Module`s in the style of candle-nn.
//! - [`Telemetry`]: non-finite and overflow counters of every call, for a training loop.
//! - [`OpPath`], [`norm_on`]: where the op cannot run (CUDA with f32 storage, any device
//!   without a `cuda_fwd`), the norm is composed from candle primitives (`composed.rs`;
//!   the rule: [`path::norm_route`]).
//! - [`fp8_e4m3_store`]: a tensor stored as fp8 E4M3 (per-tensor power-of-two scale) and read
//!   back, with a straight-through gradient (the training option `fp8_norm_io`).
//!
//! The forward is a candle custom op calling `normlab_norms::row::forward` (statistics in the
//! chosen accumulator, f32 by default; one rounding into the output dtype), and saves its
//! per-row statistics in the op. Its `bwd` runs `normlab_norms::row::backward` with those
//! statistics as a second custom op, so candle's autograd gets dx, dweight and dbias from one
//! pass — unlike candle-nn's fused `rms_norm`/`layer_norm`, which are applied without backward
//! and silently stop gradients.

mod backward;
mod composed;
pub(crate) mod error;
mod forward;
mod fp8;
mod functional;
mod module;
pub mod path;
pub(crate) mod storage;
mod telemetry;

pub use error::OpsError;
pub use fp8::{check_fp8_device, e4m3_round, e4m3_scale, fp8_e4m3_store, Fp8Counters, E4M3_MAX, E4M3_MIN_NORMAL};
pub use functional::{norm, norm_on};
pub use path::{device_name, norm_route, NormRoute, OpPath};
pub use module::{L1Norm, LInfNorm, LayerNorm, Norm, RmsNorm, TopKNorm, UnitNorm};
pub use telemetry::{Telemetry, TelemetrySnapshot};
