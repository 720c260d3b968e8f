//! Elementwise activations of the Monte Carlo pipelines.
//!
//! - `SiLU(z) = z * sigma(z) = z / (1 + e^-z)` (the gate of SwiGLU),
//! - `GELU(z) = z * Phi(z) = z/2 * (1 + erf(z/sqrt 2))` (exact erf form, not the tanh approximation),
//! - `ReLU(z) = max(z, 0)`.
//!
//! SwiGLU `u * SiLU(s * z)` is not an activation of one vector: the pipeline builds it from a
//! scale, a SiLU and an elementwise product (`Pipeline::swiglu`).

use crate::error::{NormError, Result};

/// An elementwise activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    Silu,
    Gelu,
    Relu,
}

impl Activation {
    /// Applies the activation to one value (f64 math).
    #[inline]
    pub fn apply(self, z: f64) -> f64 {
        match self {
            Activation::Silu => z / (1.0 + (-z).exp()),
            Activation::Gelu => 0.5 * z * libm::erfc(-z * std::f64::consts::FRAC_1_SQRT_2),
            Activation::Relu => z.max(0.0),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Activation::Silu => "silu",
            Activation::Gelu => "gelu",
            Activation::Relu => "relu",
        }
    }

    /// Parses `silu`, `gelu` or `relu` (case-insensitive).
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "silu" | "swish" => Ok(Activation::Silu),
            "gelu" => Ok(Activation::Gelu),
            "relu" => Ok(Activation::Relu),
            _ => Err(NormError::UnknownName { what: "activation", value: s.to_string() }),
        }
    }
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn known_values() {
        assert_eq!(Activation::Silu.apply(0.0), 0.0);
        assert!((Activation::Silu.apply(1.0) - 0.731_058_578_630_004_9).abs() < 1e-15);
        assert!((Activation::Gelu.apply(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert_eq!(Activation::Relu.apply(-2.0), 0.0);
        assert_eq!(Activation::Relu.apply(2.5), 2.5);
        assert!(Activation::parse("tanh").is_err());
        assert_eq!(Activation::parse("SiLU").unwrap(), Activation::Silu);
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![known_values];
}
