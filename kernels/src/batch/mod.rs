//! Batch (per-channel) forms of the norms as CUDA kernels (`src/cuda/batchnorm.cu`): BatchNorm
//! (variance), RMS, unit L2, L1, L-inf, Top-k (k <= 32) and mean-only BN over the channels of an
//! `[N, C]` or `[N, C, H, W]` tensor, fp16 and bf16 storage, train (batch statistics, running
//! update) and eval (running statistics), forward and backward. The reference is
//! normlab-norms' `batch` module with f64 storage and `Accum::F64`.
//!
//! - [`params`]: the `#[repr(C)]` kernel parameters and what the forward saves ([`Saved`]).
//! - [`plan`]: validation (typed errors), kernel names of every step, chunking, grids.
//! - [`cpu`]: the launch sequences on the SIMT emulator (the same sequences a GPU runtime runs).

pub mod cpu;
pub mod params;
pub mod plan;

pub use params::{Aux, Geo, Saved};
pub use plan::{batch_names, plan_batch, BatchNorm, BatchPlan, BatchTuning};
