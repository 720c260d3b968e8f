//! The crate's reference path (f64 storage, `Accum::F64`) against the independent textbook
//! implementation of `common::textbook`, for every kind, centring, constant mode and affine
//! combination.
//!
//! Bound: `|y - y_textbook| <= 1e-12 * (|y_textbook| + s_j)` with `s_j = |w_j|` (1 without a
//! weight), i.e. relative 1e-12 of the output's own scale. Both sides round about 2n times at
//! 2^-53 (a sum of n <= 4097 terms has relative error below n * 1.1e-16 = 4.5e-13 in the worst
//! case); the `s_j` term covers outputs near zero in centred rows, whose absolute error is
//! relative to the row's spread, not to themselves. Plus `8 * 2^-52 * |mean| / D * s_j` for
//! the rounding of `x - mean` (both sides round it at the scale of the mean). Offsets are at
//! most 100 std (but a row of two close values can have a much larger |mean| / D).
//!
//! The scale constants themselves are checked against an independent integration
//! (`constants_match_independent_integration`), so the textbook and the crate share nothing.

use crate::common;

use common::{all_specs, crate_f64_forward, textbook, Rng, AFFINE_MODES};
use normlab_norms::{constants, ConstMode, NormKind, NormSpec};
use proptest::prelude::*;

const REL: f64 = 1e-12;

fn check_against_textbook(spec: &NormSpec, x: &[f64], n: usize, w: Option<&[f64]>, b: Option<&[f64]>) -> Result<(), String> {
    let c = spec.scale_constant(n).map_err(|e| e.to_string())?;
    let (y, st, cnt) = crate_f64_forward(spec, x, n, w, b);
    let (t, rows) = textbook::forward(spec, c, x, n, w, b);
    if !cnt.is_clean() {
        return Err(format!("{spec:?}: counters {cnt:?} on finite input"));
    }
    for (j, (a, e)) in y.iter().zip(&t).enumerate() {
        let s = w.map_or(1.0, |w| w[j % n].abs());
        // Centring rounds x - mean at the scale of the mean: z carries an absolute error of
        // about 2^-53 |mean| on both sides, i.e. 2^-53 |mean| / D in x̂ (large when the row's
        // spread is tiny next to its mean, e.g. two close values far from 0).
        let row = &rows[j / n];
        let centring = 8.0 * f64::EPSILON * (row.mean.abs() / row.d) * s;
        let tol = REL * (e.abs() + s) + centring;
        #[allow(clippy::neg_cmp_op_on_partial_ord)] // deliberate: a NaN difference fails
        if !((a - e).abs() <= tol) {
            return Err(format!("{spec:?} n={n} elem {j}: crate {a:e} textbook {e:e} (diff {:e} > tol {tol:e})", (a - e).abs()));
        }
    }
    for (i, (s, r)) in st.iter().zip(&rows).enumerate() {
        let scale = x[i * n..(i + 1) * n].iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if (s.mean() - r.mean).abs() > REL * scale.max(f64::MIN_POSITIVE) {
            return Err(format!("{spec:?} row {i}: mean {} vs textbook {}", s.mean(), r.mean));
        }
        if (s.denominator() - r.d).abs() > REL * r.d + 8.0 * f64::EPSILON * r.mean.abs() * c.max(1.0) {
            return Err(format!("{spec:?} row {i}: D {} vs textbook {}", s.denominator(), r.d));
        }
        if s.clamped != r.clamped {
            return Err(format!("{spec:?} row {i}: clamped {} vs textbook {}", s.clamped, r.clamped));
        }
    }
    Ok(())
}

const NS: [usize; 9] = [1, 2, 3, 7, 31, 33, 100, 1000, 4097];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(48)))]

    /// Every spec, every affine combination, random shapes and magnitudes.
    #[test]
    fn f64_path_matches_textbook(
        seed in any::<u64>(),
        ni in 0usize..NS.len(),
        rows in 1usize..6,
        scale_i in 0usize..4,
        offset in prop_oneof![Just(0.0), -100.0f64..100.0],
        eps in prop_oneof![Just(0.0), Just(1e-5), Just(1e-12)],
    ) {
        let n = NS[ni];
        let rows = if n >= 1000 { 1 } else { rows };
        let scale = [1e-6, 1e-2, 1.0, 100.0][scale_i];
        let mut rng = Rng::new(seed);
        let x = common::gaussian(&mut rng, rows * n, scale, offset * scale);
        let (w, b) = common::affine(&mut rng, n);
        for spec in all_specs(n, eps) {
            if spec.centred && n == 1 && eps == 0.0 {
                continue; // z = 0 and D = 0: 0/0 (tested in row_edge)
            }
            for (use_w, use_b) in AFFINE_MODES {
                let r = check_against_textbook(&spec, &x, n, use_w.then_some(&w[..]), use_b.then_some(&b[..]));
                prop_assert!(r.is_ok(), "{}", r.unwrap_err());
            }
        }
    }
}

/// Hand-checkable values: x = [1, -2, 3, -4].
#[test]
fn small_row_by_hand() {
    let x = [1.0, -2.0, 3.0, -4.0];
    // RMS: mean square 7.5.
    let (y, _, _) = crate_f64_forward(&NormSpec::rms(0.0), &x, 4, None, None);
    let r = 7.5f64.sqrt();
    for (a, v) in y.iter().zip(&x) {
        assert!((a - v / r).abs() < 1e-15);
    }
    // L-inf uncentred, C = 1: divide by 4.
    let spec = NormSpec::linf(0.0).with_centred(false).with_constant(ConstMode::One);
    let (y, _, _) = crate_f64_forward(&spec, &x, 4, None, None);
    assert_eq!(y, vec![0.25, -0.5, 0.75, -1.0]);
    // Top-2 uncentred, C = 1: mean of {4, 3} = 3.5.
    let spec = NormSpec::topk(2, 0.0).with_centred(false).with_constant(ConstMode::One);
    let (y, _, _) = crate_f64_forward(&spec, &x, 4, None, None);
    for (a, v) in y.iter().zip(&x) {
        assert!((a - v / 3.5).abs() < 1e-15);
    }
    // L1 centred, C = 1: mean -0.5, z = [1.5, -1.5, 3.5, -3.5], mean|z| = 2.5.
    let spec = NormSpec::l1(0.0).with_constant(ConstMode::One);
    let (y, _, _) = crate_f64_forward(&spec, &x, 4, None, None);
    for (a, e) in y.iter().zip([0.6, -0.6, 1.4, -1.4]) {
        assert!((a - e).abs() < 1e-15, "{a} vs {e}");
    }
    // Unit L2: norm sqrt(30).
    let (y, _, _) = crate_f64_forward(&NormSpec::unit_l2(1e-12), &x, 4, None, None);
    assert!((y.iter().map(|v| v * v).sum::<f64>() - 1.0).abs() < 1e-15);
}

/// E[sum of the k largest of n iid |N(0,1)|] = ∫_0^∞ E[min(B(t), k)] dt with
/// B(t) ~ Binomial(n, p(t)), p(t) = P(|Z| > t) = erfc(t/√2): the number of values above t,
/// capped at k, integrated over t. Composite Simpson on [0, 12] (the integrand is below
/// n * erfc(12/√2) < 1e-30 beyond), 24000 intervals.
fn e_topk_sum_independent(n: usize, k: usize) -> f64 {
    let f = |t: f64| -> f64 {
        let p = libm::erfc(t / std::f64::consts::SQRT_2);
        if p <= 0.0 {
            return 0.0;
        }
        // E[min(B, k)] = k - sum_{i < k} (k - i) P(B = i), with the pmf from logs.
        let (lp, lq) = (p.ln(), (-p).ln_1p());
        let mut acc = 0.0;
        let mut log_binom = 0.0; // ln C(n, i)
        for i in 0..k {
            if i > 0 {
                log_binom += ((n - i + 1) as f64).ln() - (i as f64).ln();
            }
            let pmf = (log_binom + i as f64 * lp + (n - i) as f64 * lq).exp();
            acc += (k - i) as f64 * pmf;
        }
        k as f64 - acc
    };
    let (a, b, m) = (0.0, 12.0, 24000);
    let h = (b - a) / m as f64;
    let mut s = f(a) + f(b);
    for i in 1..m {
        s += f(a + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0
}

/// The crate's exact constants against an integration written here from a different formula.
#[test]
fn constants_match_independent_integration() {
    assert!((constants::C_L1 - (std::f64::consts::PI / 2.0).sqrt()).abs() < 1e-15);
    for &(n, k) in &[(1usize, 1usize), (2, 1), (2, 2), (7, 3), (33, 1), (100, 10), (1000, 1), (1000, 333)] {
        let e = e_topk_sum_independent(n, k) / k as f64;
        let c = if k == 1 { constants::c_inf(n).unwrap() } else { constants::c_topk(n, k).unwrap() };
        assert!((c * e - 1.0).abs() < 1e-9, "n={n} k={k}: C={c}, 1/E={}", 1.0 / e);
        let spec = NormSpec::topk(k, 0.0);
        assert_eq!(spec.scale_constant(n).unwrap(), constants::c_topk(n, k).unwrap());
    }
    // The authors' c(n) = 0.5 (1 + sqrt(pi ln 4)) / sqrt(2 ln n).
    for n in [2usize, 10, 1000] {
        let c = 0.5 * (1.0 + (std::f64::consts::PI * 4f64.ln()).sqrt()) / (2.0 * (n as f64).ln()).sqrt();
        let got = NormSpec::linf(0.0).with_constant(ConstMode::Code).scale_constant(n).unwrap();
        assert!((got - c).abs() < 1e-14 * c, "c_code({n}) = {got}, formula {c}");
        let got = NormSpec::topk(1, 0.0).with_constant(ConstMode::Code).scale_constant(n).unwrap();
        assert!((got - c).abs() < 1e-14 * c);
    }
    // k = n: the mean of all |Z| has expectation sqrt(2/pi).
    assert!((constants::c_topk(50, 50).unwrap() - constants::C_L1).abs() < 1e-9);
    assert!(matches!(NormSpec::new(NormKind::L1, 0.0).scale_constant(5), Ok(c) if c == constants::C_L1));
}
