//! Error of a rounded result against the f64 reference, in units in the last place (ulp) of the
//! result's storage type at the reference value, as gpu-check reports it.
//!
//! `err_i = max(0, |got_i - want_i| - slack_i) / ulp_T(want_i)`: `slack_i` is an absolute
//! allowance for terms a kernel legitimately computes in fp32 before its one rounding (e.g. the
//! backward's subtraction of terms as large as the row's gradient scale); 0 for a pure ulp
//! bound. NaN must meet NaN, and a reference beyond the type's range must round to the same
//! infinity (or the largest finite value).

use normlab_norms::DType;

/// Largest error (in ulps beyond the slack) and where it occurs.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct UlpError {
    pub max_ulp: f64,
    pub index: usize,
}

impl UlpError {
    pub const ZERO: UlpError = UlpError { max_ulp: 0.0, index: 0 };
    pub fn max(self, other: UlpError) -> UlpError {
        if other.max_ulp > self.max_ulp {
            other
        } else {
            self
        }
    }
}

/// Error of `got` (already widened to f64) against `want` for storage type `dt`.
pub fn max_ulp_error(dt: DType, got: &[f64], want: &[f64], slack: &dyn Fn(usize) -> f64) -> UlpError {
    let mut worst = UlpError::ZERO;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = if w.is_nan() || g.is_nan() {
            if w.is_nan() && g.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if w.abs() > dt.max_finite() {
            let ok = (g.is_infinite() && g.signum() == w.signum()) || g.abs() == dt.max_finite();
            if ok {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            let e = ((g - w).abs() - slack(i)).max(0.0) / dt.ulp(w);
            if e.is_nan() {
                f64::INFINITY
            } else {
                e
            }
        };
        if e > worst.max_ulp {
            worst = UlpError { max_ulp: e, index: i };
        }
    }
    if got.len() != want.len() {
        worst = UlpError { max_ulp: f64::INFINITY, index: got.len().min(want.len()) };
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn none(_: usize) -> f64 {
        0.0
    }

    #[test]
    fn exact_and_one_ulp_results() {
        let want = [1.0, -3.0, 1000.0, 1e-6];
        let got: Vec<f64> = want.iter().map(|&w| f16::from_f64(w).to_f64()).collect();
        assert!(max_ulp_error(DType::F16, &got, &want, &none).max_ulp <= 0.5);
        // One f16 ulp above 1.0 is 2^-10.
        let e = max_ulp_error(DType::F16, &[1.0 + 2f64.powi(-10)], &[1.0], &none);
        assert_eq!(e, UlpError { max_ulp: 1.0, index: 0 });
        // bf16 has 8 significant bits: one ulp at 1.0 is 2^-7.
        let e = max_ulp_error(DType::BF16, &[1.0, bf16::from_f64(1.5).to_f64() + 2.0 * 2f64.powi(-7)], &[1.0, 1.5], &none);
        assert_eq!(e, UlpError { max_ulp: 2.0, index: 1 });
    }

    #[test]
    fn slack_nan_and_overflow_rules() {
        let e = max_ulp_error(DType::F16, &[1.0 + 4.0 * 2f64.powi(-10)], &[1.0], &|_| 3.0 * 2f64.powi(-10));
        assert_eq!(e.max_ulp, 1.0);
        assert_eq!(max_ulp_error(DType::F16, &[f64::NAN], &[f64::NAN], &none).max_ulp, 0.0);
        assert_eq!(max_ulp_error(DType::F16, &[0.0, f64::NAN], &[0.0, 1.0], &none), UlpError { max_ulp: f64::INFINITY, index: 1 });
        assert_eq!(max_ulp_error(DType::F16, &[1.0], &[f64::NAN], &none).max_ulp, f64::INFINITY);
        assert_eq!(max_ulp_error(DType::F16, &[f64::INFINITY], &[70000.0], &none).max_ulp, 0.0);
        assert_eq!(max_ulp_error(DType::F16, &[65504.0], &[70000.0], &none).max_ulp, 0.0);
        assert_eq!(max_ulp_error(DType::F16, &[-f64::INFINITY], &[70000.0], &none).max_ulp, f64::INFINITY);
        assert_eq!(max_ulp_error(DType::F16, &[1.0], &[1.0, 2.0], &none).max_ulp, f64::INFINITY);
    }
}
