//! Typed errors. Every error names the offending value; no public function panics on bad input.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum NormError {
    #[error("{what}: expected length {expected}, got {got}")]
    Length { what: &'static str, expected: usize, got: usize },
    #[error("{what} must not be empty (got {value})")]
    Empty { what: &'static str, value: usize },
    #[error("top-k: k = {k} is out of range for a reduction over n = {n} elements (need 1 <= k <= n)")]
    InvalidK { k: usize, n: usize },
    #[error("eps must be finite and >= 0, got {eps}")]
    InvalidEps { eps: f64 },
    #[error("{what} must be in {range}, got {value}")]
    OutOfRange { what: &'static str, range: &'static str, value: f64 },
    #[error("unknown {what} '{value}'")]
    UnknownName { what: &'static str, value: String },
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("{what} is not supported: {why}")]
    Unsupported { what: String, why: String },
}

pub type Result<T, E = NormError> = std::result::Result<T, E>;
