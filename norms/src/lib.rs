//! # normlab-norms
//!
//! Every normalization of normlab as exact CPU math with analytic gradients: the reference the
//! candle ops and the CUDA kernels are tested against.
//!
//! - [`spec`]: what a norm is (kind, centring, eps, scale constant), with the formulas.
//! - [`row`]: row forms over the last axis, forward and backward.
//! - [`batch`]: per-channel forms over NC and NCHW layouts, with running statistics.
//! - [`residual`]: the fused residual updates of nGPT (`Norm(h + a (Norm(b) - h))`) and anGPT
//!   (`nu(a) (h + a (b - h))`), forward and analytic backward (the CUDA kernels' reference).
//! - [`constants`]: `C_L1`, exact `C_inf(n)` and `C_topk(n, k)`, the authors' `c(n)`.
//! - [`element`] and [`accum`]: storage types (f64, f32, f16, bf16, fp8) and the explicit
//!   accumulator (f32, f64, pure f16, pure bf16).
//!
//! The f64 accumulator over f64 storage is the reference path.

pub mod accum;
pub mod batch;
#[doc(hidden)]
pub mod compiled;
pub mod constants;
pub mod convert;
pub mod counters;
pub mod element;
pub mod error;
pub(crate) mod lanes;
pub mod nu;
pub mod quadrature;
pub mod residual;
pub mod row;
pub mod spec;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod unit_tests;
pub mod weight;

pub use accum::{Accum, PureBf16, PureF16, Real};
pub use counters::Counters;
pub use element::{DType, Element};
pub use error::{NormError, Result};
pub use row::RowStats;
pub use spec::{ConstMode, NormKind, NormSpec};

pub use float8::{F8E4M3, F8E5M2};
pub use half::{bf16, f16};
