//! Next-token cross-entropy of `[B, T, V]` logits against `[B, T]` targets, mean over tokens, f32.

use candle_core::{DType, Result, Tensor};

/// Mean cross-entropy (nats per token).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let (b, t, v) = logits.dims3()?;
    let logits = logits.to_dtype(DType::F32)?.reshape((b * t, v))?;
    let targets = targets.reshape(b * t)?;
    candle_nn::loss::cross_entropy(&logits, &targets)
}
