//! Batch forms against an independent textbook f64 implementation (`batch_common`), against
//! the row forms over the transposed channel (bitwise), and in f16/bf16 storage with f32
//! accumulation against the crate's f64 path (within 1 ulp).

#![allow(clippy::needless_range_loop)]

use crate::batch_common;

use batch_common::{channel, forward_ref, index, layouts, specs, Rng};
use normlab_norms::batch::{self, Layout, Mode};
use normlab_norms::{bf16, f16, row, Accum, DType, Element, NormSpec, RowStats};
use proptest::prelude::*;

fn to_t<T: Element>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}
fn to_f64<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Train-mode forward through the crate; returns (y, stats, counters).
fn crate_forward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    layout: Layout,
    x: &[T],
    w: Option<&[T]>,
    b: Option<&[T]>,
) -> (Vec<T>, Vec<RowStats>, normlab_norms::Counters) {
    let mut y = vec![T::default(); x.len()];
    let mut st = vec![RowStats::default(); layout.channels()];
    let c = batch::forward(spec, accum, layout, x, w, b, &mut y, Mode::Train, None, Some(&mut st)).unwrap();
    (y, st, c)
}

/// Largest |x̂| of the textbook output, to scale tolerances.
fn check_against_textbook(spec: &NormSpec, layout: Layout, x: &[f64], w: &[f64], b: &[f64], tol: f64) {
    let (y, _, c) = crate_forward(spec, Accum::F64, layout, x, Some(w), Some(b));
    assert!(c.is_clean(), "{spec:?} {layout:?}: {c:?}");
    let (r, _) = forward_ref(spec, &layout, x, Some(w), Some(b));
    let (rh, _) = forward_ref(spec, &layout, x, None, None);
    for ch in 0..layout.channels() {
        let xh_max = channel(&layout, &rh, ch).iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let scale = 1.0 + w[ch].abs() * xh_max + b[ch].abs();
        for (yv, rv) in channel(&layout, &y, ch).iter().zip(channel(&layout, &r, ch)) {
            assert!((yv - rv).abs() <= tol * scale, "{spec:?} {layout:?} ch {ch}: {yv} vs textbook {rv}");
        }
    }
}

#[test]
fn f64_path_matches_textbook() {
    let mut rng = Rng::new(1);
    for layout in layouts() {
        let m = layout.per_channel();
        for spec in specs(m, 1e-5) {
            for &(scale, offset) in &[(1.0, 0.0), (1e-3, 5.0), (3e4, -1e4), (1e-20, 0.0)] {
                let x = rng.gaussian(layout.len(), scale, offset);
                let w = rng.gaussian(layout.channels(), 1.0, 0.5);
                let b = rng.gaussian(layout.channels(), 1.0, 0.0);
                check_against_textbook(&spec, layout, &x, &w, &b, 1e-12);
            }
        }
    }
}

fn arb_layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        (1usize..40, 1usize..5).prop_map(|(n, c)| Layout::Nc { n, c }),
        (1usize..4, 1usize..4, 1usize..6, 1usize..6).prop_map(|(n, c, h, w)| Layout::Nchw { n, c, h, w }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn f64_path_matches_textbook_prop(layout in arb_layout(), which in 0usize..20, seed in any::<u64>(), log_scale in -6.0f64..6.0) {
        let m = layout.per_channel();
        let all = specs(m, 1e-6);
        let spec = all[which % all.len()];
        let mut rng = Rng::new(seed);
        let offset = rng_offset(&mut rng);
        let x = rng.gaussian(layout.len(), 10f64.powf(log_scale), offset);
        let w = rng.gaussian(layout.channels(), 1.0, 0.0);
        let b = rng.gaussian(layout.channels(), 1.0, 0.0);
        check_against_textbook(&spec, layout, &x, &w, &b, 1e-12);
    }
}

fn rng_offset(rng: &mut Rng) -> f64 {
    if rng.uniform() < 0.5 { 0.0 } else { 3.0 * rng.normal() }
}

/// The batch form equals the row form on each transposed channel with the weight and bias
/// broadcast, bitwise, forward (output and statistics) and backward (dx).
fn check_transposed<T: Element>(accum: Accum, seed: u64) {
    let mut rng = Rng::new(seed);
    for layout in layouts() {
        let m = layout.per_channel();
        for spec in specs(m, 1e-5) {
            let x: Vec<T> = to_t(&rng.gaussian(layout.len(), 2.0, 0.5));
            let dy: Vec<T> = to_t(&rng.gaussian(layout.len(), 1.0, 0.0));
            let w: Vec<T> = to_t(&rng.gaussian(layout.channels(), 1.0, 1.0));
            let b: Vec<T> = to_t(&rng.gaussian(layout.channels(), 1.0, 0.0));
            let (y, st, _) = crate_forward(&spec, accum, layout, &x, Some(&w), Some(&b));
            let mut dx = vec![T::default(); x.len()];
            batch::backward(&spec, accum, layout, &x, &dy, Mode::Train, &st, Some(&w), &mut dx, None, None).unwrap();
            for ch in 0..layout.channels() {
                let xr = channel(&layout, &x, ch);
                let dyr = channel(&layout, &dy, ch);
                let (wv, bv) = (vec![w[ch]; m], vec![b[ch]; m]);
                let mut yr = vec![T::default(); m];
                let mut sr = [RowStats::default()];
                row::forward(&spec, accum, &xr, m, Some(&wv), Some(&bv), &mut yr, Some(&mut sr)).unwrap();
                let mut dxr = vec![T::default(); m];
                row::backward(&spec, accum, &xr, &dyr, m, &sr, Some(&wv), &mut dxr, None, None).unwrap();
                let bits = |v: &[T]| to_f64(v).iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(sr[0], st[ch], "{spec:?} {layout:?} {accum:?} stats ch {ch}");
                assert_eq!(bits(&channel(&layout, &y, ch)), bits(&yr), "{spec:?} {layout:?} {accum:?} y ch {ch}");
                assert_eq!(bits(&channel(&layout, &dx, ch)), bits(&dxr), "{spec:?} {layout:?} {accum:?} dx ch {ch}");
            }
        }
    }
}

#[test]
fn equals_transposed_row_form_bitwise() {
    check_transposed::<f32>(Accum::F32, 2);
    check_transposed::<f64>(Accum::F64, 3);
    check_transposed::<f16>(Accum::F32, 4);
    check_transposed::<bf16>(Accum::F32, 5);
    check_transposed::<f16>(Accum::PureF16, 6);
    check_transposed::<bf16>(Accum::PureBf16, 7);
}

/// `|y - ref| <= ulp_T(ref) + gamma_m * size`, `size = |x̂ γ| + |β| + [centred] mean|x̂| |γ|`:
/// one ulp of T for the single rounding, plus the f32 sums' error for outputs near zero
/// (relative to the terms the output is made of, not to itself), `gamma_m = (m/16 + 16) 2^-24`.
fn check_half<T: Element>(dtype: DType, seed: u64) {
    let worst = check_half_on::<T>(dtype, seed, &layouts());
    println!("{dtype}: worst error {worst:.3} ulp (outputs not near zero)");
    assert!(worst <= 1.0);
}

/// Returns the worst error in ulps of the reference among outputs whose f32-sum term is at
/// most 0.1 ulp (the others are checked against the full bound).
fn check_half_on<T: Element>(dtype: DType, seed: u64, layouts: &[Layout]) -> f64 {
    let mut rng = Rng::new(seed);
    let mut worst = 0.0f64;
    for &layout in layouts {
        let m = layout.per_channel();
        let gamma = (m.div_ceil(16) + 16) as f64 * 2f64.powi(-24);
        for spec in specs(m, 1e-5) {
            for &(scale, offset) in &[(1.0, 0.0), (0.01, 3.0), (1e4, 0.0), (50.0, 6.3e4), (1e-3, 0.0)] {
                let x: Vec<T> = to_t(&rng.gaussian(layout.len(), scale, offset));
                let w: Vec<T> = to_t(&rng.gaussian(layout.channels(), 1.0, 0.0));
                let b: Vec<T> = to_t(&rng.gaussian(layout.channels(), 0.5, 0.0));
                let (y, _, c) = crate_forward(&spec, Accum::F32, layout, &x, Some(&w), Some(&b));
                let (xf, wf, bf) = (to_f64(&x), to_f64(&w), to_f64(&b));
                let (r, _, _) = crate_forward(&spec, Accum::F64, layout, &xf, Some(&wf), Some(&bf));
                let (xh, _, _) = crate_forward(&spec, Accum::F64, layout, &xf, None, None);
                if !c.is_clean() {
                    // Only a result that overflows the storage type may be non-finite.
                    assert!(r.iter().any(|v| v.abs() > dtype.max_finite()), "{spec:?} {layout:?}: {c:?}");
                    continue;
                }
                for ch in 0..layout.channels() {
                    let xhc = channel(&layout, &xh, ch);
                    let mean_abs = xhc.iter().map(|v| v.abs()).sum::<f64>() / m as f64;
                    for (k, (yv, rv)) in channel(&layout, &y, ch).iter().zip(channel(&layout, &r, ch)).enumerate() {
                        let size = (xhc[k] * wf[ch]).abs() + bf[ch].abs() + if spec.centred { mean_abs * wf[ch].abs() } else { 0.0 };
                        let err = (yv.to_f64() - rv).abs();
                        let bound = dtype.ulp(rv) + gamma * size;
                        if gamma * size <= 0.1 * dtype.ulp(rv) {
                            // Outputs whose f32-sum term is negligible: the plain 1-ulp claim.
                            worst = worst.max(err / dtype.ulp(rv));
                        }
                        assert!(err <= bound, "{dtype} {spec:?} {layout:?} ch {ch}: {} vs f64 path {rv} (err {err}, bound {bound})", yv.to_f64());
                    }
                }
            }
        }
    }
    worst
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn half_storage_within_one_ulp_prop(layout in arb_layout(), seed in any::<u64>()) {
        check_half_on::<f16>(DType::F16, seed, &[layout]);
        check_half_on::<bf16>(DType::BF16, seed, &[layout]);
    }
}

#[test]
fn f16_storage_within_one_ulp() {
    check_half::<f16>(DType::F16, 8);
}

#[test]
fn bf16_storage_within_one_ulp() {
    check_half::<bf16>(DType::BF16, 9);
}

#[test]
fn nonfinite_input_poisons_only_its_channel() {
    let layout = Layout::Nchw { n: 2, c: 3, h: 2, w: 2 };
    let m = layout.per_channel();
    let mut rng = Rng::new(10);
    for spec in specs(m, 1e-5) {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut x: Vec<f16> = to_t(&rng.gaussian(layout.len(), 1.0, 0.0));
            x[index(&layout, 1, 1, 3)] = f16::from_f64(bad);
            let (y, st, c) = crate_forward(&spec, Accum::F32, layout, &x, None, None);
            assert_eq!(c.nonfinite_in, 1, "{spec:?}");
            assert_eq!(c.nonfinite_out, m as u64, "{spec:?}");
            assert!(channel(&layout, &y, 1).iter().all(|v| v.is_nan()), "{spec:?}");
            assert!(st[1].rscale.is_nan());
            for ch in [0, 2] {
                assert!(channel(&layout, &y, ch).iter().all(|v| v.is_finite()), "{spec:?}");
            }
        }
    }
}

#[test]
fn zero_channel_gives_zero_output() {
    let layout = Layout::Nc { n: 9, c: 2 };
    let x = vec![f16::ZERO; layout.len()];
    let b = [f16::from_f64(0.25), f16::from_f64(-1.0)];
    for spec in specs(9, 1e-12) {
        let (y, _, c) = crate_forward(&spec, Accum::F32, layout, &x, None, Some(&b));
        assert!(c.is_clean(), "{spec:?}: {c:?}");
        for ch in 0..2 {
            assert!(channel(&layout, &y, ch).iter().all(|v| *v == b[ch]), "{spec:?}");
        }
    }
}

#[test]
fn pure_f16_overflow_is_counted_and_f32_rescues_it() {
    // Squares of 300 overflow f16: classic batch norm in pure f16 fails ("Norm matters" 3.3),
    // L1 does not, and the f32 accumulator never does.
    let layout = Layout::Nc { n: 16, c: 1 };
    let x: Vec<f16> = (0..16).map(|i| f16::from_f64(300.0 * if i % 2 == 0 { 1.0 } else { -1.0 })).collect();
    let (_, _, c) = crate_forward(&NormSpec::layer(1e-5), Accum::PureF16, layout, &x, None, None);
    assert_eq!(c.acc_overflow, 1);
    let (_, _, c) = crate_forward(&NormSpec::l1(1e-5), Accum::PureF16, layout, &x, None, None);
    assert!(c.is_clean(), "{c:?}");
    let (y, _, c) = crate_forward(&NormSpec::layer(1e-5), Accum::F32, layout, &x, None, None);
    assert!(c.is_clean());
    assert!(y.iter().all(|v| (v.to_f64().abs() - 1.0).abs() < 1e-3));
}
