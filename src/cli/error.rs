//! Errors of the command line. Each names the value that was refused.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CliError {
    #[error("invalid value '{value}' for {flag}: {why}")]
    InvalidArg { flag: &'static str, value: String, why: String },
    #[error(transparent)]
    Norm(#[from] normlab_norms::NormError),
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    #[error(transparent)]
    Compare(#[from] crate::compare::CompareError),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(transparent)]
    Train(#[from] crate::train::TrainError),
    #[error("could not encode JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Writing to stdout failed (a closed pipe is not reported: see `cli::main`).
    #[error("could not write output: {0}")]
    Output(#[from] std::io::Error),
}
