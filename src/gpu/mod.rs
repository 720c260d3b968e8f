//! The GPU runtime (feature `cuda`): normlab-kernels' CUDA sources compiled by NVRTC at first use
//! for the device found, cached in memory and on disk, and launched through cudarc with the
//! driver and NVRTC loaded at run time, so that the crate builds without any CUDA toolkit and a
//! machine without a GPU gets a typed error ([`GpuError`]), never a panic.
//!
//! - [`error`]: [`GpuError`] (no driver, no device, NVRTC or headers missing, compile log, ...).
//! - [`cache`]: the image caches (memory; disk at `~/.cache/normlab/ptx`, keyed by source hash,
//!   options, architecture and NVRTC version, written atomically).
//! - [`ulp`]: errors in ulps of the storage type against the f64 reference.
//! - with `cuda`: [`nvrtc`] (library, headers, target, compilation), [`device`] (driver checks,
//!   device properties), [`module`] (compile + load through the cache; the loaded module and
//!   per-context cache that the kernel families share), [`args`] (parameter structs),
//!   [`rows`] (launch wrappers of the row kernels), [`updates`] (launch wrappers of the fused
//!   nGPT/anGPT residual updates), [`batch`] (the batch-norm launch sequences), [`project`]
//!   (the fused nGPT/anGPT weight projection: every matrix in one launch), [`copy`] (copy
//!   kernel), [`check`], [`check_updates`], [`check_batch`] and [`check_project`]
//!   (`normlab gpu-check`); with `candle-cuda`: [`candle_ops`] (the candle ops' `cuda_fwd`; the
//!   models' post-step projection calls [`project`] from `crate::model::project`).
//!
//! Without the `cuda` feature only the pieces that need no driver exist, and the commands that
//! need a GPU return [`GpuError::NotBuilt`].

pub mod cache;
pub mod error;
pub mod ulp;

#[cfg(feature = "cuda")]
pub mod args;
#[cfg(feature = "cuda")]
pub mod batch;
#[cfg(feature = "candle-cuda")]
pub mod candle_ops;
#[cfg(feature = "cuda")]
pub mod check;
#[cfg(feature = "cuda")]
pub mod check_batch;
#[cfg(feature = "cuda")]
pub mod check_project;
#[cfg(feature = "cuda")]
pub mod check_updates;
#[cfg(feature = "cuda")]
pub mod copy;
#[cfg(feature = "cuda")]
pub mod device;
#[cfg(feature = "cuda")]
pub mod module;
#[cfg(feature = "cuda")]
pub mod nvrtc;
#[cfg(feature = "cuda")]
pub mod project;
#[cfg(feature = "cuda")]
pub mod rows;
#[cfg(feature = "cuda")]
pub mod updates;

pub use error::{GpuError, PlanError};
