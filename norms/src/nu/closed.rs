//! Closed forms the Monte Carlo estimates are checked against.
//!
//! - Linear map with random rows, `x` fixed: `E||W x||^2 = r E||w||^2 / d * ||x||^2` (each
//!   coordinate `w_i . x` has second moment `E||w_i||^2 ||x||^2 / d`); unit rows and unit `x`
//!   give `r/d`, so `nu = sqrt(d/r)` (anGPT's lemma, algorithms.md 2.2).
//! - Residual LERP of independent uniform unit `h`, `x`: `E||(1-a) h + a x||^2 = 1 - 2a + 2a^2`,
//!   per-dimension `a_i`: `(1/d) sum_i ((1 - a_i)^2 + a_i^2)` (algorithms.md 2.4).
//! - One-dimensional expectations `E[f(c t)^2]` by adaptive quadrature
//!   (`crate::quadrature::integrate`), for `t ~ N(0, 1)` (the `d -> inf` limit) or `t` one
//!   coordinate of a uniform unit vector of `R^d` (exact at finite `d`), see [`CoordDist`].
//! - SwiGLU `a = u * SiLU(z)` with `u`, `z` produced from the same input by independent random
//!   maps: the coordinates are independent, `E||a||^2 = E||u||^2 E[SiLU(z_1)^2]`.

use crate::error::{NormError, Result};
use crate::nu::activation::Activation;
use crate::quadrature::integrate;

/// The distribution of one pre-activation coordinate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CoordDist {
    /// `N(0, std^2)`.
    Gaussian { std: f64 },
    /// `scale * t`, `t` one coordinate of a uniform unit vector of `R^d`: density of `t`
    /// `∝ (1 - t^2)^{(d-3)/2}` on [-1, 1]; `E[t^2] = 1/d`. This is exactly what a random unit-row
    /// map applied to a unit vector produces at finite `d`.
    SphereCoord { d: usize, scale: f64 },
}

impl CoordDist {
    /// `E[h(X)]` by quadrature (relative tolerance about 1e-12).
    pub fn expect<F: Fn(f64) -> f64>(&self, h: F) -> Result<f64> {
        match *self {
            CoordDist::Gaussian { std } => {
                if !(std.is_finite() && std >= 0.0) {
                    return Err(NormError::OutOfRange { what: "input std", range: "finite values >= 0", value: std });
                }
                let phi = |t: f64| (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt();
                // Beyond |t| = 40 the Gaussian weight is below 1e-340.
                let (a, _) = integrate(|t| h(std * t) * phi(t), -40.0, 0.0, 1e-15, 1e-13);
                let (b, _) = integrate(|t| h(std * t) * phi(t), 0.0, 40.0, 1e-15, 1e-13);
                Ok(a + b)
            }
            CoordDist::SphereCoord { d, scale } => {
                if d == 0 {
                    return Err(NormError::Empty { what: "sphere dimension d", value: d });
                }
                if !scale.is_finite() {
                    return Err(NormError::OutOfRange { what: "coordinate scale", range: "finite values", value: scale });
                }
                if d == 1 {
                    return Ok(0.5 * (h(scale) + h(-scale)));
                }
                // t = sin(theta): the weight becomes cos^{d-2}(theta) on (-pi/2, pi/2) (no endpoint
                // singularity for d = 2). For large d it lives within ~1/sqrt(d) of 0: cut at
                // 14/sqrt(d), where cos^{d-2} < e^{-90}.
                let w = (14.0 / (d as f64).sqrt()).min(std::f64::consts::FRAC_PI_2);
                let k = (d - 2) as f64;
                let wt = |th: f64| th.cos().powf(k);
                let (z1, _) = integrate(wt, -w, 0.0, 1e-300, 1e-13);
                let (z2, _) = integrate(wt, 0.0, w, 1e-300, 1e-13);
                let (n1, _) = integrate(|th| h(scale * th.sin()) * wt(th), -w, 0.0, 1e-300, 1e-13);
                let (n2, _) = integrate(|th| h(scale * th.sin()) * wt(th), 0.0, w, 1e-300, 1e-13);
                Ok((n1 + n2) / (z1 + z2))
            }
        }
    }

    /// `E[f(X)^2]`.
    pub fn activation_mean_sq(&self, f: Activation) -> Result<f64> {
        self.expect(|z| f.apply(z).powi(2))
    }
}

/// `E||W x||^2 / ||x||^2 = r E||w_i||^2 / d`.
pub fn linear_gain(r: usize, d: usize, mean_sq_row_norm: f64) -> f64 {
    r as f64 * mean_sq_row_norm / d as f64
}

/// `1 - 2a + 2a^2` for a scalar alpha.
pub fn lerp_mean_sq(alpha: f64) -> f64 {
    1.0 - 2.0 * alpha + 2.0 * alpha * alpha
}

/// `(1/d) sum_i ((1 - a_i)^2 + a_i^2)` for a per-dimension alpha.
pub fn lerp_mean_sq_per_dim(alpha: &[f64]) -> f64 {
    alpha.iter().map(|a| (1.0 - a).powi(2) + a * a).sum::<f64>() / alpha.len() as f64
}

/// anGPT's residual factor `nu(a) = (1 - 2a + 2a^2)^{-1/2}` (the paper's text writes the
/// expected squared norm `1 - 2a + 2a^2`; only its inverse square root keeps `||h|| ~ 1`).
pub fn residual_factor(alpha: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&alpha) {
        return Err(NormError::OutOfRange { what: "lerp alpha", range: "[0, 1]", value: alpha });
    }
    Ok(1.0 / lerp_mean_sq(alpha).sqrt())
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn reference_activation_moments() {
        // algorithms.md 4.4.
        for (std, want) in [(0.25, 0.016321), (0.5, 0.072249), (1.0, 0.355776), (2.0, 1.757890)] {
            let v = CoordDist::Gaussian { std }.activation_mean_sq(Activation::Silu).unwrap();
            assert!((v - want).abs() < 1e-6, "std {std}: {v}");
        }
        let v = CoordDist::Gaussian { std: 0.5 }.activation_mean_sq(Activation::Silu).unwrap();
        assert!((1.0 / v.sqrt() - 3.7203).abs() < 1e-4);
        // ReLU: E[relu(Z)^2] = 1/2 exactly.
        let r = CoordDist::Gaussian { std: 1.0 }.activation_mean_sq(Activation::Relu).unwrap();
        assert!((r - 0.5).abs() < 1e-12, "{r}");
    }

    fn sphere_coordinate_moments() {
        for d in [1usize, 2, 3, 10, 1000, 100_000] {
            let m2 = CoordDist::SphereCoord { d, scale: 1.0 }.expect(|t| t * t).unwrap();
            assert!((m2 * d as f64 - 1.0).abs() < 1e-10, "d={d}: {m2}");
            // E t^4 = 3 / (d (d + 2)).
            let m4 = CoordDist::SphereCoord { d, scale: 1.0 }.expect(|t| t.powi(4)).unwrap();
            assert!((m4 * (d * (d + 2)) as f64 / 3.0 - 1.0).abs() < 1e-9, "d={d}: {m4}");
        }
        // Large d approaches the Gaussian.
        let g = CoordDist::Gaussian { std: 0.5 }.activation_mean_sq(Activation::Silu).unwrap();
        let s = CoordDist::SphereCoord { d: 1 << 20, scale: 0.5 * 1024.0 }.activation_mean_sq(Activation::Silu).unwrap();
        assert!((g - s).abs() < 1e-6 * g);
    }

    fn residual_factor_values() {
        // algorithms.md 4.5.
        for (a, want) in [(0.01, 1.010049), (0.05, 1.051177), (0.1, 1.104315), (0.2, 1.212678), (0.5, std::f64::consts::SQRT_2)] {
            assert!((residual_factor(a).unwrap() - want).abs() < 1e-6);
        }
        assert!(residual_factor(1.2).is_err());
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![reference_activation_moments, sphere_coordinate_moments, residual_factor_values];
}
