//! # weight: the weight constraints of nGPT, anGPT and "Norm matters" (CPU)
//!
//! All act on `(out, in)` row-major matrices in f32 math (norms accumulated in f64) on the
//! parameter itself, for f32, f16 and bf16 storage (any [`crate::Element`]), rounding once into
//! storage:
//!
//! - [`project`]: nGPT's unit-norm projection along a chosen axis and anGPT's ball projection
//!   `w_i <- w_i / max(1, ||w_i||)` (or a Frobenius-ball switch), in place, idempotent.
//! - [`lp`]: the L1, L2 and L-inf norms of a line and their (sub)gradients.
//! - [`bounded`]: bounded weight normalisation `w_c = rho v_c / ||v_c||_p` with `rho` fixed at
//!   initialisation (and the gain-pinned variant), with analytic gradients.
//!
//! Which axis is which (algorithms.md 1.4): [`Axis::Rows`] normalises every row, i.e. over the
//! input dimension (nGPT's q, k, v, MLP up projection, embeddings, LM head; anGPT's bound for every
//! matrix); [`Axis::Cols`] normalises every column, i.e. over the output dimension (nGPT's two
//! output projections, which have d_model as their output axis).
//!
//! CUDA projection kernels are not part of this module.

pub mod bounded;
pub mod lines;
pub mod lp;
pub mod project;

pub use bounded::{BoundedWeightNorm, GainPinnedWeightNorm, RhoInit};
pub use lines::{Axis, MatShape};
pub use lp::LpNorm;
pub use project::{project_ball, project_unit, unit_tolerance, Bound, LineOutcome, ProjectReport};
