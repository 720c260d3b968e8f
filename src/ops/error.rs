//! Typed errors of the candle ops. Each names the offending value; they reach callers as
//! `candle_core::Error` (the `Module` trait fixes the error type) with this message.

use candle_core::DType;
use normlab_norms::NormError;
use thiserror::Error;

/// What can be wrong with the arguments of a norm op.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OpsError {
    #[error("{what}: dtype {got:?} does not match the input's dtype {expected:?}")]
    DTypeMismatch { what: &'static str, expected: DType, got: DType },
    #[error("{what}: expected shape [{expected}] (the size of the input's last dimension), got {got:?}")]
    ShapeMismatch { what: &'static str, expected: usize, got: Vec<usize> },
    #[error("input: the last dimension has size {got}, but the module normalizes over {expected}")]
    WidthMismatch { expected: usize, got: usize },
    #[error("dtype {dtype:?} is not supported by the normlab ops (f64, f32, f16 and bf16 are)")]
    UnsupportedDType { dtype: DType },
    #[error("input: a norm over the last dimension needs a tensor of rank >= 1, got a scalar")]
    Scalar,
    #[error("{what}: invalid layout (offset {offset} outside a storage of {len} elements)")]
    Layout { what: &'static str, offset: usize, len: usize },
    /// What a device cannot run: no kernel exists for it and the composed candle path
    /// (`crate::ops::composed`, `crate::model::composed`) has no form of it. `device` is the
    /// device's description (`cpu`, `cuda:0`).
    #[error("{what} is not supported on {device}: {why}")]
    DeviceUnsupported { what: String, device: String, why: String },
    #[error(transparent)]
    Norm(#[from] NormError),
}

impl From<OpsError> for candle_core::Error {
    fn from(e: OpsError) -> Self {
        candle_core::Error::wrap(e)
    }
}

/// A `NormError` from the core crate as a candle error.
pub(crate) fn norm_err(e: NormError) -> candle_core::Error {
    OpsError::Norm(e).into()
}
