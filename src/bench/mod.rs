//! Speed measurements of the row norms, shared by `normlab bench norms` and the criterion
//! benchmarks in `benches/norms.rs`.
//!
//! What is measured, and why it is counted this way:
//!
//! - **Copy bandwidth** ([`bandwidth`]): a parallel `memcpy` of a buffer much larger than the
//!   last-level cache, counted as bytes read + bytes written. A row norm streams its input and
//!   output once, so this is the speed limit it is compared against.
//! - **Compulsory bytes** ([`cases::Direction::compulsory_bytes`]): forward reads `x` and writes
//!   `y` (2 tensors), backward reads `x` and `dy` and writes `dx` (3 tensors). Weights, bias and
//!   per-row statistics are O(n + rows) and ignored.
//! - **Time** ([`timing`]): the median of R timed runs after a warm-up run, so one slow run
//!   (page faults, another process) does not move the result.
//! - **Baselines** ([`candle_ref`]): `candle_nn::ops::rms_norm` and `candle_nn::ops::layer_norm`
//!   on the same shape and dtype, measured in the same run. candle allocates its output on
//!   every call; ours writes into a preallocated buffer: each is measured as its API is used.
//!
//! [`run::run`] drives a whole benchmark and returns a [`report::Report`] (the JSON schema).

pub mod bandwidth;
pub mod candle_ref;
pub mod cases;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod cuda_cli;
pub mod data;
pub mod error;
pub mod machine;
pub mod report;
pub mod run;
pub mod timing;
pub mod train_step;
pub mod workload;

pub use error::BenchError;
