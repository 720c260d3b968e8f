//! Edge cases of the row forms: all-zero rows, non-finite input, values near the f16 maximum,
//! extreme f32 magnitudes, ties of L-inf and Top-k, zeros of the L1 sign.
//!
//! Decisions tested here (see the report of the row tests):
//! - eps > 0, all-zero row: every kind outputs exact zeros (then + bias), counters clean.
//! - eps = 0, all-zero row (and a centred row of one element, or a constant centred row):
//!   `D = 0` and the output is 0/0 = NaN, counted in `nonfinite_out` (not in `nonfinite_in`
//!   nor `acc_overflow`). That is the formula with eps = 0, as nGPT's `justnorm` (no eps) does;
//!   the count makes it visible rather than a silent 0.

use crate::common;

use common::{all_specs, crate_f64_forward, crate_forward, textbook, to_f64, to_t, Rng};
use normlab_norms::{bf16, f16, row, Accum, ConstMode, Counters, DType, Element, NormKind, NormSpec, RowStats, F8E4M3, F8E5M2};

/// `v` as the accumulator holds it (the bias is widened into it, then stored once).
fn accum_round(accum: Accum, v: f64) -> f64 {
    match accum {
        Accum::F64 => v,
        Accum::F32 => v as f32 as f64,
        Accum::PureF16 => <f16 as Element>::from_f64(v).to_f64(),
        Accum::PureBf16 => <bf16 as Element>::from_f64(v).to_f64(),
    }
}

const ACCUMS: [Accum; 4] = [Accum::F32, Accum::F64, Accum::PureF16, Accum::PureBf16];

fn zero_rows_case<T: Element>(eps: f64, accum: Accum) {
    let n = 37;
    let mut rng = Rng::new(7);
    let (w, b) = common::affine(&mut rng, n);
    let (w, b): (Vec<T>, Vec<T>) = (to_t(&w), to_t(&b));
    // Row 0 zeros, row 1 random, row 2 zeros (negative zeros).
    let mut x = vec![0.0; 3 * n];
    for v in &mut x[n..2 * n] {
        *v = rng.normal();
    }
    for v in &mut x[2 * n..] {
        *v = -0.0;
    }
    let x: Vec<T> = to_t(&x);
    for spec in all_specs(n, eps) {
        for (uw, ub) in common::AFFINE_MODES {
            let (wo, bo) = (uw.then_some(&w[..]), ub.then_some(&b[..]));
            let (y, st, c) = crate_forward(&spec, accum, &x, n, wo, bo);
            for r in [0usize, 2] {
                for j in 0..n {
                    let v = y[r * n + j].to_f64();
                    if eps > 0.0 {
                        let want = bo.map_or(0.0, |b| accum_round(accum, b[j].to_f64()));
                        assert_eq!(v, want, "{spec:?} {accum:?} {}: zero row gives {v}", T::DTYPE);
                    } else {
                        assert!(v.is_nan(), "{spec:?} {accum:?} {} eps=0: zero row gives {v}, expected 0/0 = NaN", T::DTYPE);
                    }
                }
                if eps > 0.0 && spec.kind == NormKind::UnitL2 {
                    assert!(st[r].clamped);
                }
            }
            let want_out = if eps > 0.0 { 0 } else { 2 * n as u64 };
            // What the code does with D = 0 (eps = 0): a wide accumulator counts only the NaN
            // outputs; a pure half one also counts the row in `acc_overflow`, because 1/D = inf
            // is a non-finite statistic from finite input and it cannot tell that from an
            // overflow (reported, not a contract beyond this test).
            let want_acc = if eps == 0.0 && !accum.is_wide() { 2 } else { 0 };
            assert_eq!(c, Counters { nonfinite_in: 0, acc_overflow: want_acc, nonfinite_out: want_out }, "{spec:?} {accum:?} {}", T::DTYPE);
            // The random row is unaffected by its zero neighbours.
            let (y1, _, _) = crate_forward(&spec, accum, &x[n..2 * n], n, wo, bo);
            for j in 0..n {
                assert_eq!(y[n + j].to_f64().to_bits(), y1[j].to_f64().to_bits());
            }
        }
    }
}

#[test]
fn zero_rows_with_eps_give_exact_zeros() {
    for accum in [Accum::F32, Accum::F64] {
        for eps in [1e-5, 1e-12] {
            zero_rows_case::<f64>(eps, accum);
            zero_rows_case::<f32>(eps, accum);
            zero_rows_case::<f16>(eps, accum);
            zero_rows_case::<bf16>(eps, accum);
            zero_rows_case::<F8E5M2>(eps, accum);
        }
    }
    // A pure half accumulator with eps = 1e-4 (1/eps = 1e4 fits f16): still exact zeros.
    // (With eps = 1e-5, unit L2 divides by the clamp eps and 1/eps = 1e5 overflows f16: a
    // zero row gives 0 * inf = NaN. That is pure half arithmetic, not tested as a contract.)
    zero_rows_case::<f16>(1e-4, Accum::PureF16);
    zero_rows_case::<bf16>(1e-4, Accum::PureBf16);
}

#[test]
fn zero_rows_without_eps_are_nan_and_counted() {
    for accum in ACCUMS {
        zero_rows_case::<f32>(0.0, accum);
        zero_rows_case::<f16>(0.0, accum);
    }
    // A constant centred row has z = 0 too.
    for spec in [NormSpec::layer(0.0), NormSpec::l1(0.0), NormSpec::linf(0.0), NormSpec::topk(2, 0.0)] {
        let (y, _, c) = crate_f64_forward(&spec, &[3.0; 5], 5, None, None);
        assert!(y.iter().all(|v| v.is_nan()), "{spec:?}: {y:?}");
        assert_eq!(c.nonfinite_out, 5);
        let (y, _, c) = crate_f64_forward(&spec.with_eps(1e-5), &[3.0; 5], 5, None, None);
        assert!(y.iter().all(|&v| v == 0.0), "{spec:?}: {y:?}");
        assert!(c.is_clean());
    }
}

trait WithEps {
    fn with_eps(self, eps: f64) -> Self;
}
impl WithEps for NormSpec {
    fn with_eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
}

/// Rows with NaN / +Inf / -Inf: that row is all NaN, counted; the others are untouched.
fn nonfinite_case<T: Element>(accum: Accum, bad: &[f64]) {
    let n = 21;
    let rows = 4;
    let mut rng = Rng::new(11);
    let mut x = common::gaussian(&mut rng, rows * n, 1.0, 0.3);
    // Row 1: one bad value; row 3: every bad value given.
    x[n + 5] = bad[0];
    for (i, &v) in bad.iter().enumerate() {
        x[3 * n + 2 * i] = v;
    }
    let x: Vec<T> = to_t(&x);
    let (w, b) = common::affine(&mut rng, n);
    let (w, b): (Vec<T>, Vec<T>) = (to_t(&w), to_t(&b));
    for spec in all_specs(n, 1e-5) {
        for (uw, ub) in common::AFFINE_MODES {
            let (wo, bo) = (uw.then_some(&w[..]), ub.then_some(&b[..]));
            let (y, st, c) = crate_forward(&spec, accum, &x, n, wo, bo);
            let what = format!("{spec:?} {accum:?} {} bad {bad:?}", T::DTYPE);
            assert_eq!(c.nonfinite_in, 1 + bad.len() as u64, "{what}: {c:?}");
            assert_eq!(c.acc_overflow, 0, "{what}: {c:?}");
            assert_eq!(c.nonfinite_out, 2 * n as u64, "{what}: {c:?}");
            for r in 0..rows {
                let (yr, _, cr) = crate_forward(&spec, accum, &x[r * n..(r + 1) * n], n, wo, bo);
                for j in 0..n {
                    let v = y[r * n + j].to_f64();
                    if r % 2 == 1 {
                        assert!(v.is_nan(), "{what}: row {r} elem {j} = {v}");
                    } else {
                        assert!(cr.is_clean(), "{what}: {cr:?}");
                        assert_eq!(v.to_bits(), yr[j].to_f64().to_bits(), "{what}: a clean row changed");
                    }
                }
            }
            // The backward propagates: NaN dx on the bad rows, finite elsewhere.
            let dy: Vec<T> = to_t(&common::gaussian(&mut rng, rows * n, 1.0, 0.0));
            let mut dx = vec![T::default(); rows * n];
            let cb = row::backward(&spec, accum, &x, &dy, n, &st, wo, &mut dx, None, None).unwrap();
            assert_eq!(cb.nonfinite_out, 2 * n as u64, "{what}: backward {cb:?}");
            for (j, v) in dx.iter().enumerate() {
                assert_eq!(v.to_f64().is_nan(), (j / n) % 2 == 1, "{what}: dx[{j}] = {:?}", v);
            }
        }
    }
}

#[test]
fn nonfinite_input_is_propagated_and_counted() {
    let inf = f64::INFINITY;
    for accum in ACCUMS {
        for bad in [&[f64::NAN][..], &[inf], &[-inf], &[inf, -inf], &[f64::NAN, inf, -inf]] {
            nonfinite_case::<f32>(accum, bad);
            nonfinite_case::<f16>(accum, bad);
            nonfinite_case::<bf16>(accum, bad);
            nonfinite_case::<F8E5M2>(accum, bad);
            nonfinite_case::<f64>(accum, bad);
        }
        nonfinite_case::<F8E4M3>(accum, &[f64::NAN]);
    }
}

/// f16 inputs near 65504 (sum of squares up to 4e9 * n): f32 accumulation is clean and within
/// one f16 ulp of the f64 path; a pure f16 accumulator overflows and counts it.
#[test]
fn f16_near_max() {
    let mut rng = Rng::new(65504);
    for n in [1usize, 2, 7, 33, 100, 1000] {
        let x: Vec<f64> =
            (0..3 * n).map(|i| if (i + rng.below(2)).is_multiple_of(2) { 1.0 } else { -1.0 } * rng.range(60000.0, 65504.0)).collect();
        let mut x16: Vec<f16> = to_t(&x);
        x16[0] = f16::MAX;
        if n > 1 {
            x16[1] = f16::MIN;
        }
        let xf = to_f64(&x16);
        for spec in all_specs(n, 1e-5) {
            let (r, _, _) = crate_f64_forward(&spec, &xf, n, None, None);
            let (y, _, c) = crate_forward(&spec, Accum::F32, &x16, n, None, None);
            assert!(c.is_clean(), "{spec:?} n={n}: {c:?}");
            for j in 0..y.len() {
                let (a, e) = (y[j].to_f64(), r[j]);
                // Centred outputs near 0 may carry the f32 mean's error (see row_lowprec).
                let tol = DType::F16.ulp(e) + if spec.centred { 2f64.powi(-16) } else { 0.0 };
                assert!((a - e).abs() <= tol, "{spec:?} n={n} elem {j}: {a} vs {e}");
            }
            // eps = 1e-4 here: with 1e-5, 1/eps itself overflows f16 when D = eps (n = 1, centred).
            let (_, _, c) = crate_forward(&NormSpec { eps: 1e-4, ..spec }, Accum::PureF16, &x16, n, None, None);
            assert_eq!(c.nonfinite_in, 0);
            // Statistics that are sums of squares or of two or more |z| >= 60000 overflow f16;
            // a maximum (L-inf, Top-1) of finite values does not. (Centred, the mean's sum
            // overflows on the rows whose values mostly share a sign: not asserted.)
            let sums = match spec.kind {
                NormKind::Rms | NormKind::UnitL2 => true,
                NormKind::Layer => n > 1,
                NormKind::L1 => n > 1,
                NormKind::LInf => false,
                NormKind::TopK { k } => k > 1,
            };
            if sums {
                assert_eq!(c.acc_overflow, 3, "{spec:?} n={n}: pure f16 must overflow on every row: {c:?}");
            } else if !spec.centred {
                // The maximum itself is finite: nothing overflowed, outputs are right.
                assert_eq!(c.acc_overflow, 0, "{spec:?} n={n}: no overflow in a max of finite values: {c:?}");
            }
        }
    }
}

/// Overflow of a pure f16 accumulator is counted per row, only on rows that overflow.
#[test]
fn pure_f16_overflow_counts_rows() {
    let n = 8;
    let mut x = vec![1.0f64; 4 * n];
    for v in &mut x[n..2 * n] {
        *v = 300.0; // 8 * 300^2 = 720000 > 65504
    }
    let x: Vec<f16> = to_t(&x);
    let (_, _, c) = crate_forward(&NormSpec::rms(1e-5), Accum::PureF16, &x, n, None, None);
    assert_eq!(c.acc_overflow, 1, "{c:?}");
    assert_eq!(c.nonfinite_in, 0);
    let (_, _, c) = crate_forward(&NormSpec::rms(1e-5), Accum::PureBf16, &x, n, None, None);
    assert!(c.is_clean(), "bf16 has the range: {c:?}");
    let (_, _, c) = crate_forward(&NormSpec::rms(1e-5), Accum::F32, &x, n, None, None);
    assert!(c.is_clean());
}

/// `sum(y^2)` in f64 of an f32 row normalized by unit L2.
fn unit_norm_error(x: &[f32], spec: &NormSpec) -> (f64, Counters, RowStats) {
    let (y, st, c) = crate_forward(spec, Accum::F32, x, x.len(), None, None);
    let s: f64 = y.iter().map(|&v| (v as f64) * (v as f64)).sum();
    (s.sqrt() - 1.0, c, st[0])
}

/// f32 rows whose squares overflow (1e30, 3e38) or underflow (1e-30, subnormal 1e-40) in f32,
/// eps = 0: the rescue by a power of two gives unit-norm outputs, clean counters, and the same
/// outputs as the row scaled to 1.
#[test]
fn f32_extreme_magnitudes_unit_l2() {
    let mut rng = Rng::new(30);
    for scale in [1e30f64, 3e37, 1e-30, 1e-38, 1e-40, 1e-43] {
        for n in [1usize, 3, 33, 1000] {
            let base: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
            let x: Vec<f32> = base.iter().map(|&v| (v * scale) as f32).collect();
            if x.iter().all(|&v| v == 0.0) {
                continue;
            }
            for spec in [NormSpec::unit_l2(0.0), NormSpec::rms(0.0)] {
                let (y, st, c) = crate_forward(&spec, Accum::F32, &x, n, None, None);
                assert!(c.is_clean(), "{spec:?} scale {scale:e} n={n}: {c:?} {:?}", st[0]);
                // The f64 path on the same (exactly widened) values.
                let (r, _, _) = crate_f64_forward(&spec, &to_f64(&x), n, None, None);
                for j in 0..n {
                    let e = (y[j] as f64 - r[j]).abs();
                    assert!(e <= 8.0 * DType::F32.ulp(r[j].abs().max(1.0 / (n as f64).sqrt())), "{spec:?} scale {scale:e} n={n} elem {j}: {} vs {}", y[j], r[j]);
                }
            }
            let (err, c, st) = unit_norm_error(&x, &NormSpec::unit_l2(0.0));
            assert!(c.is_clean());
            assert!(err.abs() < 1e-6, "scale {scale:e} n={n}: ‖y‖ - 1 = {err:e} ({st:?})");
        }
    }
}

/// The same rescue for every kind at the f32 extremes (3e38: sums overflow; 1e-40: squares
/// underflow), with the backward: dx matches the f64 path.
#[test]
fn f32_extreme_magnitudes_every_kind() {
    let mut rng = Rng::new(31);
    let n = 50;
    for scale in [3e38f64 / 4.0, 1e-40] {
        let x: Vec<f32> = (0..n).map(|_| (rng.normal().clamp(-4.0, 4.0) * scale) as f32).collect();
        let dy: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
        for spec in all_specs(n, 0.0) {
            let (y, st, c) = crate_forward(&spec, Accum::F32, &x, n, None, None);
            assert!(c.is_clean(), "{spec:?} {scale:e}: {c:?}");
            let (r, st64, _) = crate_f64_forward(&spec, &to_f64(&x), n, None, None);
            for j in 0..n {
                let tol = 64.0 * DType::F32.ulp(r[j].abs().max(0.1));
                assert!((y[j] as f64 - r[j]).abs() <= tol, "{spec:?} {scale:e} elem {j}: {} vs {}", y[j], r[j]);
            }
            let mut dx = vec![0f32; n];
            let mut dx64 = vec![0f64; n];
            let cb = row::backward(&spec, Accum::F32, &x, &dy, n, &st, None, &mut dx, None, None).unwrap();
            row::backward(&spec, Accum::F64, &to_f64(&x), &to_f64(&dy), n, &st64, None, &mut dx64, None, None).unwrap();
            let big = dx64.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            // dx is ~1/scale: at 3e38 it is a subnormal-range f32 (2^-149 spacing), which bounds
            // its accuracy; at 1e-40 it overflows f32 (counted).
            if scale < 1.0 {
                assert!(big > f32::MAX as f64);
                assert!(cb.nonfinite_out > 0, "{spec:?}: dx of a 1e-40 row overflows f32 and must be counted");
                continue;
            }
            assert!(cb.is_clean(), "{spec:?} {scale:e}: {cb:?}");
            for j in 0..n {
                let tol = 1e-3 * big + 2f64.powi(-149) * 4.0;
                assert!((dx[j] as f64 - dx64[j]).abs() <= tol, "{spec:?} {scale:e} dx[{j}]: {} vs {}", dx[j], dx64[j]);
            }
        }
    }
}

/// Run the crate backward (f64 and f32 accumulators over f16-exact values) and the textbook
/// backward; they must agree, the tie rule included.
fn tie_case(spec: &NormSpec, x: &[f64], dy: &[f64]) {
    let n = x.len();
    let c = spec.scale_constant(n).unwrap();
    let (want, _) = textbook::backward_row(spec, c, x, dy, None);
    // f64 reference path.
    let (_, st, _) = crate_f64_forward(spec, x, n, None, None);
    let mut dx = vec![0.0; n];
    row::backward(spec, Accum::F64, x, dy, n, &st, None, &mut dx, None, None).unwrap();
    for j in 0..n {
        assert!((dx[j] - want[j]).abs() <= 1e-12 * (1.0 + want[j].abs()), "{spec:?} x={x:?}: dx {dx:?} vs textbook {want:?}");
    }
    // f16 storage, f32 and pure-f16 accumulators: the same selection (values are f16-exact and
    // small integers, so z and |z| are exact everywhere).
    let x16: Vec<f16> = to_t(x);
    let dy16: Vec<f16> = to_t(dy);
    for accum in [Accum::F32, Accum::PureF16] {
        let (_, st, _) = crate_forward(spec, accum, &x16, n, None, None);
        let mut dx16 = vec![f16::ZERO; n];
        row::backward(spec, accum, &x16, &dy16, n, &st, None, &mut dx16, None, None).unwrap();
        let tol = if accum == Accum::F32 { 1.0 } else { 8.0 };
        for j in 0..n {
            let got = dx16[j].to_f64();
            assert!(
                (got - want[j]).abs() <= tol * DType::F16.ulp(want[j]) + 1e-3 * tol,
                "{spec:?} {accum:?} x={x:?}: dx[{j}] = {got} vs textbook {}",
                want[j]
            );
        }
    }
}

/// The gradient of max|z| or of the top-k goes to the lowest index among equal |z|.
#[test]
fn ties_break_to_lowest_index() {
    let dy = [0.7, -1.3, 0.4, 2.1, -0.6, 0.9, 1.7];
    // Uncentred: |z| ties between +3 and -3 and 3.
    let x = [1.0, -3.0, 2.0, 3.0, -3.0, 0.5, -2.0];
    for mode in [ConstMode::Exact, ConstMode::One, ConstMode::Code] {
        let linf = NormSpec::linf(0.0).with_centred(false).with_constant(mode);
        tie_case(&linf, &x, &dy);
        for k in 1..=7 {
            tie_case(&NormSpec::topk(k, 0.0).with_centred(false).with_constant(mode), &x, &dy);
        }
    }
    // Centred (mean 0 by construction): ties between -4 and 4, and among the 2s.
    let x = [2.0, 4.0, -2.0, -4.0, 2.0, 0.0, -2.0];
    for k in 1..=7 {
        tie_case(&NormSpec::topk(k, 1e-5), &x, &dy);
    }
    tie_case(&NormSpec::linf(1e-5), &x, &dy);
    // Explicitly: L-inf uncentred on [3, -3]: only index 0 gets the dD term.
    let spec = NormSpec::linf(0.0).with_centred(false).with_constant(ConstMode::One);
    let (_, st, _) = crate_f64_forward(&spec, &[3.0, -3.0], 2, None, None);
    let mut dx = [0.0; 2];
    row::backward(&spec, Accum::F64, &[3.0, -3.0], &[1.0, 1.0], 2, &st, None, &mut dx, None, None).unwrap();
    // x̂ = [1, -1], g·x̂ = 0, so the dD term vanishes: use dy = [1, 0] instead.
    row::backward(&spec, Accum::F64, &[3.0, -3.0], &[1.0, 0.0], 2, &st, None, &mut dx, None, None).unwrap();
    // dot = 1; dx_0 = (1 - 1 * 1)/3 = 0; dx_1 = 0/3 = 0.
    assert_eq!(dx, [0.0, 0.0]);
    row::backward(&spec, Accum::F64, &[3.0, -3.0], &[0.0, 1.0], 2, &st, None, &mut dx, None, None).unwrap();
    // dot = -1; dx_0 = (0 - (-1) * 1)/3 = 1/3 (index 0 holds the max); dx_1 = 1/3.
    assert_eq!(dx, [1.0 / 3.0, 1.0 / 3.0]);
}

/// sign(0) = 0 in the L1 gradient: a zero z_j gets no dD term.
#[test]
fn l1_gradient_with_exact_zeros() {
    let dy = [0.7, -1.3, 0.4, 2.1, -0.6, 0.9];
    for mode in [ConstMode::Exact, ConstMode::One] {
        // Uncentred zeros.
        tie_case(&NormSpec::l1(0.0).with_centred(false).with_constant(mode), &[0.0, 1.0, -2.0, 0.0, 3.0, -0.0], &dy);
        // Centred: x_j equal to the mean (2) exactly.
        tie_case(&NormSpec::l1(1e-5).with_constant(mode), &[2.0, 1.0, 3.0, 2.0, 0.0, 4.0], &dy);
    }
    // By hand: uncentred, C = 1, x = [0, 2]: D = 1, x̂ = [0, 2], dy = [1, 0]: dot = 0,
    // so dx = dy / D = [1, 0]; with dy = [0, 1]: dot = 2, dD/dz = [0, 1/2]: dx = [0, 1 - 1] = 0.
    let spec = NormSpec::l1(0.0).with_centred(false).with_constant(ConstMode::One);
    let (_, st, _) = crate_f64_forward(&spec, &[0.0, 2.0], 2, None, None);
    let mut dx = [9.0; 2];
    row::backward(&spec, Accum::F64, &[0.0, 2.0], &[1.0, 0.0], 2, &st, None, &mut dx, None, None).unwrap();
    assert_eq!(dx, [1.0, 0.0]);
    row::backward(&spec, Accum::F64, &[0.0, 2.0], &[0.0, 1.0], 2, &st, None, &mut dx, None, None).unwrap();
    assert_eq!(dx, [0.0, 0.0]);
}

/// Regression: the Top-k mean of many equal values (k = n = 65536, f16 input with three
/// distinct values) must be as accurate as a lane sum: a single running sum of sorted values
/// was off by 1e-3 relative (one f16 ulp) here.
#[test]
fn topk_statistic_of_many_equal_values() {
    let n = 65536;
    let mut rng = Rng::new(3);
    let x: Vec<f64> = (0..n).map(|_| [0.1, -0.3, 0.7][rng.below(3)]).collect();
    let x16: Vec<f16> = to_t(&x);
    let x32: Vec<f32> = to_t(&to_f64(&x16));
    // ConstMode::One: C does not matter here, and c_topk(65536, 32768) is a long quadrature.
    let one = |s: NormSpec| s.with_centred(false).with_constant(ConstMode::One);
    for spec in [one(NormSpec::topk(n, 0.0)), one(NormSpec::topk(n / 2, 0.0)), one(NormSpec::l1(0.0))] {
        let (_, st64, _) = crate_f64_forward(&spec, &to_f64(&x16), n, None, None);
        let (_, st, _) = crate_forward(&spec, Accum::F32, &x32, n, None, None);
        let rel = (st[0].denominator() / st64[0].denominator() - 1.0).abs();
        // Lane sums of 4096 terms each: at most 4096 * 2^-24 = 2.4e-4 relative, in practice far less.
        assert!(rel < 3e-5, "{spec:?}: D relative error {rel:e}");
    }
}

/// A row of f32 subnormals whose gradient is exactly zero (n = 1, and a symmetric uncentred
/// unit-L2 row with dy along y): dx must be 0, not 0 * 2^134 = 0 * inf = NaN.
#[test]
fn subnormal_row_zero_gradient_is_zero() {
    for spec in [NormSpec::rms(0.0), NormSpec::unit_l2(0.0), NormSpec::l1(0.0).with_centred(false), NormSpec::linf(0.0).with_centred(false)] {
        let x = [1e-40f32];
        let (_, st, c) = crate_forward(&spec, Accum::F32, &x, 1, None, None);
        assert!(c.is_clean(), "{spec:?}: {c:?}");
        let mut dx = [f32::NAN];
        let cb = row::backward(&spec, Accum::F32, &x, &[1.0], 1, &st, None, &mut dx, None, None).unwrap();
        assert_eq!(dx, [0.0], "{spec:?}: d(x/|x|)/dx = 0 for n = 1");
        assert!(cb.is_clean(), "{spec:?}: {cb:?}");
    }
}
