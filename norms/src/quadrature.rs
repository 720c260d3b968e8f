//! Adaptive Gauss–Kronrod (7/15-point) quadrature, used for the exact scale constants and for
//! the one-dimensional expectations the Monte Carlo engine is checked against.

/// Kronrod abscissae on [-1, 1] (non-negative half, descending); odd indices are the Gauss nodes.
const XGK: [f64; 8] = [
    0.991_455_371_120_812_6,
    0.949_107_912_342_758_5,
    0.864_864_423_359_769_1,
    0.741_531_185_599_394_4,
    0.586_087_235_467_691_1,
    0.405_845_151_377_397_2,
    0.207_784_955_007_898_5,
    0.0,
];
const WGK: [f64; 8] = [
    0.022_935_322_010_529_22,
    0.063_092_092_629_978_55,
    0.104_790_010_322_250_18,
    0.140_653_259_715_525_92,
    0.169_004_726_639_267_9,
    0.190_350_578_064_785_4,
    0.204_432_940_075_298_9,
    0.209_482_141_084_727_83,
];
/// Gauss weights for `XGK[1]`, `XGK[3]`, `XGK[5]`, `XGK[7]`.
const WG: [f64; 4] = [0.129_484_966_168_869_7, 0.279_705_391_489_276_7, 0.381_830_050_505_118_9, 0.417_959_183_673_469_4];

/// One 15-point Kronrod estimate and its error estimate (|K15 - G7|).
fn gk15<F: Fn(f64) -> f64>(f: &F, a: f64, b: f64) -> (f64, f64) {
    let c = 0.5 * (a + b);
    let h = 0.5 * (b - a);
    let fc = f(c);
    let mut k = WGK[7] * fc;
    let mut g = WG[3] * fc;
    for i in 0..7 {
        let dx = h * XGK[i];
        let s = f(c - dx) + f(c + dx);
        k += WGK[i] * s;
        if i % 2 == 1 {
            g += WG[i / 2] * s;
        }
    }
    (k * h, ((k - g) * h).abs())
}

/// Integral of `f` over [a, b] to absolute tolerance `abs_tol` or relative tolerance
/// `rel_tol` (whichever is looser), by adaptive bisection (global error control, at most
/// `max_intervals` intervals). Returns (value, error estimate).
pub fn integrate<F: Fn(f64) -> f64>(f: F, a: f64, b: f64, abs_tol: f64, rel_tol: f64) -> (f64, f64) {
    let max_intervals = 2000;
    let (v, e) = gk15(&f, a, b);
    let mut parts: Vec<(f64, f64, f64, f64)> = vec![(a, b, v, e)];
    loop {
        let total: f64 = parts.iter().map(|p| p.2).sum();
        let err: f64 = parts.iter().map(|p| p.3).sum();
        if err <= abs_tol.max(rel_tol * total.abs()) || parts.len() >= max_intervals {
            return (total, err);
        }
        // Split the interval with the largest error.
        let (i, _) = parts
            .iter()
            .enumerate()
            .fold((0, -1.0), |(bi, be), (i, p)| if p.3 > be { (i, p.3) } else { (bi, be) });
        let (lo, hi, _, _) = parts.swap_remove(i);
        let mid = 0.5 * (lo + hi);
        let (v1, e1) = gk15(&f, lo, mid);
        let (v2, e2) = gk15(&f, mid, hi);
        parts.push((lo, mid, v1, e1));
        parts.push((mid, hi, v2, e2));
    }
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn integrates_known_functions() {
        let (v, _) = integrate(f64::exp, 0.0, 1.0, 1e-14, 1e-14);
        assert!((v - (std::f64::consts::E - 1.0)).abs() < 1e-13);
        // E|Z| = sqrt(2/pi)
        let pdf = |x: f64| x * 2.0 * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let (v, _) = integrate(pdf, 0.0, 40.0, 1e-14, 1e-14);
        assert!((v - (2.0 / std::f64::consts::PI).sqrt()).abs() < 1e-12, "{v}");
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![integrates_known_functions];
}
