//! # nu: anGPT's normalisation factors by Monte Carlo, with error bars
//!
//! anGPT replaces exact normalisation by constant factors `nu = 1/sqrt(E||g(x)||^2)`, `x` uniform
//! on the unit sphere (concentration of measure: `||g(x)||` is then close to its mean). This
//! module estimates `E||g||^2` and `E||g||` for a composable pipeline `g` (random linear maps
//! with unit or bounded rows, residual LERP, activations, SwiGLU, dense softmax attention,
//! products, scales), returns `nu_rms = 1/sqrt(E||g||^2)` and `nu_mean = 1/E||g||` with
//! confidence intervals, and compares with closed forms where they exist.
//!
//! - [`pipeline`]: the graph and what is estimated (over inputs *and* weights: fresh random rows
//!   per sample).
//! - [`sample`]: exact samplers (a random unit-row map applied to `x` needs `r` draws, not `r d`).
//! - [`run`]: the chunked, seeded, parallel driver ([`rng`]: its per-chunk xoshiro256++ streams); [`stats`]: moments, intervals, delta method.
//! - [`closed`]: closed forms (linear `r/d`, LERP `1 - 2a + 2a^2`, activation moments by quadrature).
//! - [`angpt`]: the anGPT factor table for a model configuration.

pub mod activation;
pub mod angpt;
pub mod closed;
pub(crate) mod eval;
pub mod pipeline;
pub mod rng;
pub mod run;
pub mod sample;
pub mod stats;

pub use activation::Activation;
pub use closed::CoordDist;
pub use pipeline::{Alpha, AttentionSpec, Node, NodeId, Pipeline, RowDist};
pub use run::{estimate, estimate_to_precision, Comparison, Estimate, McConfig, Progress};
pub use stats::Interval;
