//! The Lp norms of a line (p = 1, 2, inf) and their gradients, in f64.
//!
//! - `||v||_1 = sum |v_j|`, gradient `sign(v_j)` (0 at 0: a subgradient);
//! - `||v||_2 = sqrt(sum v_j^2)`, gradient `v / ||v||_2`;
//! - `||v||_inf = max |v_j|`, gradient `sign(v_k) e_k` at the first `k` with the largest `|v_k|`
//!   (a subgradient at ties). "Norm matters" uses `abs().max` (convNet's p = inf without `abs` is
//!   a bug, algorithms.md 3.4).

use crate::error::{NormError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum LpNorm {
    L1,
    L2,
    LInf,
}

impl LpNorm {
    /// From the exponent `p`: 1, 2 or infinity; anything else is a typed error.
    pub fn from_p(p: f64) -> Result<LpNorm> {
        if p == 1.0 {
            Ok(LpNorm::L1)
        } else if p == 2.0 {
            Ok(LpNorm::L2)
        } else if p == f64::INFINITY {
            Ok(LpNorm::LInf)
        } else {
            Err(NormError::OutOfRange { what: "weight norm exponent p", range: "{1, 2, inf}", value: p })
        }
    }

    /// Parses `1`, `2`, `inf`/`max`.
    pub fn parse(s: &str) -> Result<LpNorm> {
        match s.trim().to_ascii_lowercase().as_str() {
            "1" | "l1" => Ok(LpNorm::L1),
            "2" | "l2" => Ok(LpNorm::L2),
            "inf" | "linf" | "max" => Ok(LpNorm::LInf),
            _ => Err(NormError::UnknownName { what: "weight norm p", value: s.to_string() }),
        }
    }

    pub fn p(self) -> f64 {
        match self {
            LpNorm::L1 => 1.0,
            LpNorm::L2 => 2.0,
            LpNorm::LInf => f64::INFINITY,
        }
    }

    /// The norm of `v`.
    pub fn norm(self, v: &[f64]) -> f64 {
        match self {
            LpNorm::L1 => v.iter().map(|x| x.abs()).sum(),
            LpNorm::L2 => v.iter().map(|x| x * x).sum::<f64>().sqrt(),
            LpNorm::LInf => v.iter().fold(0.0, |m, x| m.max(x.abs())),
        }
    }

    /// `sum_j a_j d||v||/dv_j` for a vector `a`, given `n = ||v||` (> 0).
    pub fn dot_grad(self, v: &[f64], n: f64, a: &[f64]) -> f64 {
        match self {
            LpNorm::L1 => v.iter().zip(a).map(|(x, y)| sign(*x) * y).sum(),
            LpNorm::L2 => v.iter().zip(a).map(|(x, y)| x * y).sum::<f64>() / n,
            LpNorm::LInf => {
                let k = argmax_abs(v);
                sign(v[k]) * a[k]
            }
        }
    }

    /// Adds `c * d||v||/dv` to `out`, given `n = ||v||` (> 0).
    pub fn add_grad(self, v: &[f64], n: f64, c: f64, out: &mut [f64]) {
        match self {
            LpNorm::L1 => v.iter().zip(out.iter_mut()).for_each(|(x, o)| *o += c * sign(*x)),
            LpNorm::L2 => v.iter().zip(out.iter_mut()).for_each(|(x, o)| *o += c * x / n),
            LpNorm::LInf => {
                let k = argmax_abs(v);
                out[k] += c * sign(v[k]);
            }
        }
    }
}

fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

fn argmax_abs(v: &[f64]) -> usize {
    let mut k = 0;
    for (i, x) in v.iter().enumerate() {
        if x.abs() > v[k].abs() {
            k = i;
        }
    }
    k
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn p_values() {
        assert_eq!(LpNorm::from_p(1.0).unwrap(), LpNorm::L1);
        assert_eq!(LpNorm::from_p(f64::INFINITY).unwrap(), LpNorm::LInf);
        assert!(matches!(LpNorm::from_p(3.0), Err(NormError::OutOfRange { value, .. }) if value == 3.0));
        assert!(LpNorm::parse("7").is_err());
        let v = [3.0, -4.0];
        assert_eq!(LpNorm::L1.norm(&v), 7.0);
        assert_eq!(LpNorm::L2.norm(&v), 5.0);
        assert_eq!(LpNorm::LInf.norm(&v), 4.0);
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![p_values];
}
