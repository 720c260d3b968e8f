//! Errors of the benchmark driver. Each names the value that was refused.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    #[error("invalid {what} '{value}': {why}")]
    InvalidArg { what: &'static str, value: String, why: String },
    #[error(transparent)]
    Norm(#[from] normlab_norms::NormError),
    #[error("candle-nn baseline failed: {0}")]
    Candle(#[from] candle_core::Error),
}

impl BenchError {
    pub fn invalid(what: &'static str, value: impl ToString, why: impl ToString) -> Self {
        BenchError::InvalidArg { what, value: value.to_string(), why: why.to_string() }
    }
}
