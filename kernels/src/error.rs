//! Typed errors of kernel planning and launching. Every error names the offending value.

use normlab_norms::{DType, NormError};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum KernelError {
    #[error(transparent)]
    Norm(#[from] NormError),
    #[error("the kernels store fp16 or bf16 only, got {0}")]
    UnsupportedDType(DType),
    #[error("top-k: k = {k} exceeds the kernels' register top-k limit of {max} (use the CPU path)")]
    TopKTooLarge { k: usize, max: usize },
    #[error("a row of n = {n} elements needs {needed} bytes of shared memory per block, above the device limit of {limit}")]
    RowTooWide { n: usize, needed: usize, limit: usize },
    #[error("{what} = {value} does not fit the kernels' {bits}-bit parameter")]
    TooLarge { what: &'static str, value: usize, bits: u32 },
    #[error("eps = {eps} is not representable in fp32")]
    EpsNotF32 { eps: f64 },
    #[error("fp8 output scale = {scale} must be finite and positive")]
    InvalidScale { scale: f32 },
    #[error("unknown kernel '{0}'")]
    UnknownKernel(String),
}

pub type Result<T, E = KernelError> = std::result::Result<T, E>;
