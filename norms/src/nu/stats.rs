//! Running moments, confidence intervals and the delta method.
//!
//! The engine records `Y = ||g||^2` and `N = ||g||` per sample. With sample means `m2`, `m1` and
//! standard errors `se2 = sd(Y)/sqrt(n)`, `se1 = sd(N)/sqrt(n)`:
//!
//! - `nu_rms = m2^{-1/2}`, `se = se2 * |d nu/d m2| = se2 * m2^{-3/2} / 2` (delta method);
//! - `nu_mean = 1/m1`, `se = se1 / m1^2`.
//!
//! Intervals are `value ± q * se`, `q` the two-sided quantile of Student's t with `n - 1` degrees
//! of freedom (statrs).

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use crate::error::{NormError, Result};

/// Mean and sum of squared deviations (Welford), mergeable in a fixed order (Chan et al.).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    pub n: u64,
    pub mean: f64,
    pub m2: f64,
}

impl Moments {
    #[inline]
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    pub fn merge(&mut self, o: &Moments) {
        if o.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *o;
            return;
        }
        let n = self.n + o.n;
        let d = o.mean - self.mean;
        self.mean += d * o.n as f64 / n as f64;
        self.m2 += o.m2 + d * d * (self.n as f64 * o.n as f64 / n as f64);
        self.n = n;
    }

    pub fn variance(&self) -> f64 {
        if self.n < 2 {
            f64::NAN
        } else {
            self.m2 / (self.n - 1) as f64
        }
    }

    /// Standard error of the mean.
    pub fn se(&self) -> f64 {
        (self.variance() / self.n as f64).sqrt()
    }
}

/// A point estimate with its standard error and confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Interval {
    pub value: f64,
    pub se: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    pub fn new(value: f64, se: f64, q: f64) -> Self {
        Interval { value, se, lo: value - q * se, hi: value + q * se }
    }
    pub fn half_width(&self) -> f64 {
        0.5 * (self.hi - self.lo)
    }
    pub fn contains(&self, v: f64) -> bool {
        self.lo <= v && v <= self.hi
    }
}

/// Two-sided quantile for a `level` interval from `n` samples (Student's t, n - 1 dof).
pub fn quantile(level: f64, n: u64) -> Result<f64> {
    if !(level > 0.0 && level < 1.0) {
        return Err(NormError::OutOfRange { what: "confidence level", range: "(0, 1)", value: level });
    }
    if n < 2 {
        return Err(NormError::OutOfRange { what: "Monte Carlo samples for an interval", range: ">= 2", value: n as f64 });
    }
    let p = 0.5 + 0.5 * level;
    // Beyond 10^5 dof the t and normal quantiles agree to < 1e-5 relative.
    let err = |e: &dyn std::fmt::Display| NormError::Unsupported { what: "quantile".into(), why: e.to_string() };
    if n > 100_000 {
        Normal::new(0.0, 1.0).map(|d| d.inverse_cdf(p)).map_err(|e| err(&e))
    } else {
        StudentsT::new(0.0, 1.0, (n - 1) as f64).map(|d| d.inverse_cdf(p)).map_err(|e| err(&e))
    }
}

/// `nu = m2^{-1/2}` with its delta-method interval.
pub fn nu_rms(sq: &Moments, q: f64) -> Interval {
    let m = sq.mean;
    Interval::new(1.0 / m.sqrt(), 0.5 * sq.se() * m.powf(-1.5), q)
}

/// `nu = 1/m1` with its delta-method interval.
pub fn nu_mean(nm: &Moments, q: f64) -> Interval {
    let m = nm.mean;
    Interval::new(1.0 / m, nm.se() / (m * m), q)
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn merge_matches_one_pass() {
        let xs: Vec<f64> = (0..1000).map(|i| ((i * 37) % 101) as f64 * 0.1 + 1e6).collect();
        let mut all = Moments::default();
        xs.iter().for_each(|&x| all.push(x));
        let mut a = Moments::default();
        let mut b = Moments::default();
        xs[..300].iter().for_each(|&x| a.push(x));
        xs[300..].iter().for_each(|&x| b.push(x));
        a.merge(&b);
        assert_eq!(a.n, all.n);
        assert!((a.mean - all.mean).abs() < 1e-9);
        assert!((a.variance() - all.variance()).abs() < 1e-9 * all.variance());
    }

    fn quantiles() {
        assert!((quantile(0.95, 1_000_000).unwrap() - 1.959_963_984_540_054).abs() < 1e-9);
        assert!((quantile(0.95, 11).unwrap() - 2.228_138_851_986_273).abs() < 1e-6);
        assert!(quantile(1.5, 10).is_err());
        assert!(quantile(0.95, 1).is_err());
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![merge_matches_one_pass, quantiles];
}
