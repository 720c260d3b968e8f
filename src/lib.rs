//! # normlab
//!
//! Low-precision, alternative-norm training experiments.
//!
//! - [`norms`] (the crate `normlab-norms`): every normalization as exact CPU math, the reference.
//! - [`ops`]: the norms as candle ops with autograd.
//! - [`model`]: GPT+, nGPT and anGPT with a pluggable norm.
//! - [`train`]: the training loop, precision modes, checkpoints, telemetry.
//! - [`cli`]: the `normlab` command line.
//!
//! Data flows one way: norms, then ops and kernels, then models, then training, then experiments.

pub use normlab_norms as norms;

pub mod bench;
pub mod cli;
pub mod compare;
pub mod data;
pub mod gpu;
pub mod model;
pub mod ops;
pub mod train;
