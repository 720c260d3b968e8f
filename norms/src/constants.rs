//! Scale constants of the L1, L-inf and Top-k norms.
//!
//! Convention: a norm divides by `D = C * statistic(|z|) + eps`, and `C` is chosen so that `D`
//! estimates the standard deviation of Gaussian input:
//!
//! - `C_L1 = sqrt(pi/2) = 1 / E|Z|`;
//! - `C_inf(n) = 1 / E[max_i |Z_i|]`, with `E[max] = ∫_0^∞ (1 − erf(t/√2)^n) dt`;
//! - `C_topk(n, k) = 1 / E[mean of the k largest |Z_i|]`, with
//!   `E[sum of top k] = n ∫_0^∞ x f(x) P(Bin(n−1, 1−F(x)) ≤ k−1) dx`, F, f the CDF and pdf of |Z|;
//! - `c_code(n) = 0.5 (1 + sqrt(pi ln 4)) / sqrt(2 ln n)`: the "Norm matters" authors' code
//!   constant, used for every k (biased: see `../shared/reference/algorithms.md` 3.2).
//!
//! Z_i are iid N(0, 1) (the known-mean case; subtracting the sample mean multiplies the
//! expectation by about sqrt(1 − 1/n)). The paper only interpolated these constants; here they
//! are computed by adaptive quadrature to about 1e-12 and cached per (n, k).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use libm::erfc;

use crate::error::{NormError, Result};
use crate::quadrature::integrate;

/// `sqrt(pi / 2) = 1 / E|Z|`.
pub const C_L1: f64 = 1.253_314_137_315_500_3;

/// `0.5 (1 + sqrt(pi ln 4))`, the numerator of the authors' `c(n)`.
pub const C_CODE_NUMERATOR: f64 = 1.543_452_464_251_151_8;

fn cache() -> &'static Mutex<HashMap<(usize, usize), f64>> {
    static CACHE: OnceLock<Mutex<HashMap<(usize, usize), f64>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn cached(n: usize, k: usize, f: impl FnOnce() -> f64) -> f64 {
    if let Some(v) = cache().lock().ok().and_then(|m| m.get(&(n, k)).copied()) {
        return v;
    }
    let v = f();
    if let Ok(mut m) = cache().lock() {
        m.insert((n, k), v);
    }
    v
}

/// Upper integration limit: beyond it, n * P(|Z| > t) is below 1e-30.
fn upper_limit(n: usize) -> f64 {
    (2.0 * ((n as f64).ln() + 70.0)).sqrt() + 1.0
}

/// `E[max_i |Z_i|]` for n iid standard normals.
pub fn e_max_abs(n: usize) -> Result<f64> {
    if n == 0 {
        return Err(NormError::Empty { what: "n for E[max|Z|]", value: n });
    }
    Ok(cached(n, 0, || {
        let nf = n as f64;
        let integrand = |t: f64| {
            let q = erfc(t / std::f64::consts::SQRT_2); // P(|Z| > t)
            -(nf * (-q).ln_1p()).exp_m1() // 1 - (1 - q)^n, without cancellation
        };
        integrate(integrand, 0.0, upper_limit(n), 1e-14, 1e-13).0
    }))
}

/// `ln P(Bin(m, q) <= j)`-free evaluation of the binomial CDF `P(Bin(m, q) <= j)`, summed in
/// log space from the side with fewer terms (robust for m up to millions).
fn binom_cdf(m: usize, q: f64, j: usize) -> f64 {
    if j >= m {
        return 1.0;
    }
    if q <= 0.0 {
        return 1.0;
    }
    if q >= 1.0 {
        return 0.0; // j < m: at least one failure needed
    }
    let lq = q.ln();
    let lp = (-q).ln_1p();
    let ln_choose = |i: usize| {
        statrs::function::gamma::ln_gamma(m as f64 + 1.0)
            - statrs::function::gamma::ln_gamma(i as f64 + 1.0)
            - statrs::function::gamma::ln_gamma((m - i) as f64 + 1.0)
    };
    let log_sum = |lo: usize, hi: usize| {
        // log of sum_{i=lo}^{hi} C(m,i) q^i (1-q)^(m-i), by recurrence in log space.
        let mut l = ln_choose(lo) + lo as f64 * lq + (m - lo) as f64 * lp;
        let mut terms = Vec::with_capacity(hi - lo + 1);
        terms.push(l);
        for i in lo..hi {
            l += ((m - i) as f64).ln() - ((i + 1) as f64).ln() + lq - lp;
            terms.push(l);
        }
        let mx = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if mx == f64::NEG_INFINITY {
            return f64::NEG_INFINITY;
        }
        mx + terms.iter().map(|t| (t - mx).exp()).sum::<f64>().ln()
    };
    if j < m - j {
        log_sum(0, j).exp().min(1.0)
    } else {
        (1.0 - log_sum(j + 1, m).exp()).max(0.0)
    }
}

/// `E[mean of the k largest |Z_i|]` for n iid standard normals (k = 1: `e_max_abs`;
/// k = n: `sqrt(2/pi)`).
pub fn e_topk_mean_abs(n: usize, k: usize) -> Result<f64> {
    if k == 0 || k > n {
        return Err(NormError::InvalidK { k, n });
    }
    if k == 1 {
        return e_max_abs(n);
    }
    Ok(cached(n, k, || {
        let nf = n as f64;
        let pdf_scale = (2.0 / std::f64::consts::PI).sqrt();
        let integrand = |x: f64| {
            let q = erfc(x / std::f64::consts::SQRT_2);
            x * pdf_scale * (-0.5 * x * x).exp() * binom_cdf(n - 1, q, k - 1)
        };
        nf / k as f64 * integrate(integrand, 0.0, upper_limit(n), 1e-14, 1e-13).0
    }))
}

/// `C_inf(n) = 1 / E[max_i |Z_i|]`.
pub fn c_inf(n: usize) -> Result<f64> {
    Ok(1.0 / e_max_abs(n)?)
}

/// `C_topk(n, k) = 1 / E[mean of the k largest |Z_i|]`.
pub fn c_topk(n: usize, k: usize) -> Result<f64> {
    Ok(1.0 / e_topk_mean_abs(n, k)?)
}

/// The authors' `c(n) = 0.5 (1 + sqrt(pi ln 4)) / sqrt(2 ln n)` (needs n >= 2).
pub fn c_code(n: usize) -> Result<f64> {
    if n < 2 {
        return Err(NormError::OutOfRange { what: "n for the authors' c(n)", range: "[2, inf)", value: n as f64 });
    }
    Ok(C_CODE_NUMERATOR / (2.0 * (n as f64).ln()).sqrt())
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    /// `../shared/reference/algorithms.md` 4.2 and 4.3 (exact, 6 decimals).
    const TABLE: &[(usize, usize, f64)] = &[
        (8, 1, 1.783367),
        (32, 1, 2.347079),
        (128, 1, 2.827558),
        (256, 1, 3.044225),
        (1024, 1, 3.441870),
        (4096, 1, 3.802295),
        (8, 4, 1.226006),
        (32, 4, 1.914776),
        (32, 10, 1.511285),
        (32, 32, 0.797885),
        (128, 4, 2.463989),
        (128, 10, 2.142983),
        (128, 32, 1.639763),
        (256, 4, 2.704882),
        (256, 10, 2.410168),
        (256, 32, 1.960837),
        (1024, 4, 3.139456),
        (1024, 10, 2.882649),
        (1024, 32, 2.504187),
        (4096, 4, 3.527025),
        (4096, 10, 3.296662),
        (4096, 32, 2.963908),
    ];

    fn exact_table_to_1e6() {
        for &(n, k, want) in TABLE {
            let got = e_topk_mean_abs(n, k).unwrap();
            assert!((got - want).abs() < 1.0e-6, "n={n} k={k}: {got} vs {want}");
            assert!((c_topk(n, k).unwrap() * want - 1.0).abs() < 1e-6);
        }
    }

    fn code_constant_table() {
        // algorithms.md 4.2, column c(n).
        for &(n, want) in &[(8, 0.756841), (32, 0.586247), (128, 0.495469), (1024, 0.414539), (4096, 0.378421)] {
            assert!((c_code(n).unwrap() - want).abs() < 1e-6, "n={n}");
        }
        assert!(c_code(1).is_err());
    }

    fn limits() {
        let e1 = e_max_abs(1).unwrap();
        assert!((e1 - (2.0 / std::f64::consts::PI).sqrt()).abs() < 1e-12, "{e1}");
        assert!((e_topk_mean_abs(1000, 1000).unwrap() - (2.0 / std::f64::consts::PI).sqrt()).abs() < 1e-10);
        assert!((C_L1 - (std::f64::consts::PI / 2.0).sqrt()).abs() < 1e-15);
        assert_eq!(e_topk_mean_abs(4, 5), Err(NormError::InvalidK { k: 5, n: 4 }));
        assert!(e_topk_mean_abs(4, 0).is_err());
        // Means of top-k decrease with k.
        let a = e_topk_mean_abs(65536, 2).unwrap();
        let b = e_topk_mean_abs(65536, 3).unwrap();
        assert!(a > b && b > 0.0);
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![exact_table_to_1e6, code_constant_table, limits];
}
