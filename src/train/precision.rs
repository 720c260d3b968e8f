//! What each precision mode means for storage, compute, statistics and optimizer state.
//!
//! | mode        | `Var` storage | compute | norm accumulator | Adam m, v | loss scaling |
//! |-------------|---------------|---------|------------------|-----------|--------------|
//! | f32         | f32           | f32     | f32              | f32       | no           |
//! | bf16_mixed  | f32 (master)  | bf16    | f32              | f32       | no           |
//! | f16_mixed   | f32 (master)  | f16     | f32              | f32       | dynamic      |
//! | pure_bf16   | bf16          | bf16    | pure bf16        | f32 [1]   | no           |
//! | pure_f16    | f16           | f16     | pure f16         | f32 [1]   | no           |
//!
//! In every mode the gradients are brought to f32 before clipping, and the Adam update is
//! computed in f32 and rounded once into the storage dtype. The pure modes have no master copy
//! and no loss scaling, as in the "Norm matters" half-precision runs (algorithms.md 3.3).
//!
//! [1] `train.optimizer_state = "storage"` stores them in the storage dtype instead; see
//! [`OptimizerState`] for why f32 is the default.

use candle_core::DType;
use normlab_norms::Accum;

use super::config::{OptimizerState, Precision};

impl Precision {
    /// The dtype of the parameters' `Var`s (what `model::build` is asked for).
    pub fn storage_dtype(self) -> DType {
        match self {
            Precision::F32 | Precision::Bf16Mixed | Precision::F16Mixed => DType::F32,
            Precision::PureBf16 => DType::BF16,
            Precision::PureF16 => DType::F16,
        }
    }

    /// The dtype of activations and matmuls (`ForwardCtx::compute`).
    pub fn compute_dtype(self) -> DType {
        match self {
            Precision::F32 => DType::F32,
            Precision::Bf16Mixed | Precision::PureBf16 => DType::BF16,
            Precision::F16Mixed | Precision::PureF16 => DType::F16,
        }
    }

    /// The accumulator of the norms' statistics (`ForwardCtx::accum`).
    pub fn accum(self) -> Accum {
        match self {
            Precision::PureBf16 => Accum::PureBf16,
            Precision::PureF16 => Accum::PureF16,
            _ => Accum::F32,
        }
    }

    /// The dtype Adam's moments are stored in.
    pub fn optimizer_state_dtype(self, state: OptimizerState) -> DType {
        match state {
            OptimizerState::F32 => DType::F32,
            OptimizerState::Storage => self.storage_dtype(),
        }
    }

    /// Whether the loss is scaled dynamically (f16 mixed only).
    pub fn uses_loss_scaling(self) -> bool {
        matches!(self, Precision::F16Mixed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pure_modes_have_no_master_copy_and_half_accumulators() {
        assert_eq!(Precision::PureF16.storage_dtype(), DType::F16);
        assert_eq!(Precision::PureF16.accum(), Accum::PureF16);
        assert_eq!(Precision::PureBf16.optimizer_state_dtype(OptimizerState::Storage), DType::BF16);
        assert_eq!(Precision::PureF16.optimizer_state_dtype(OptimizerState::F32), DType::F32);
        assert_eq!(Precision::F16Mixed.storage_dtype(), DType::F32);
        assert_eq!(Precision::F16Mixed.compute_dtype(), DType::F16);
        assert!(Precision::F16Mixed.uses_loss_scaling());
        assert!(!Precision::PureF16.uses_loss_scaling());
        assert_eq!(Precision::Bf16Mixed.accum(), Accum::F32);
    }
}
