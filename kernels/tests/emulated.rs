//! The CUDA kernels executed on the CPU by the SIMT emulator, against normlab-norms' f64
//! reference path: every kind, fp16 and bf16, forward and backward, odd shapes (n = 1, tails,
//! one row, many rows, wide rows, zero rows, misaligned rows), edge magnitudes (all-zero rows,
//! near fp16 max, bf16 extremes, NaN/Inf rows, large mean offsets), in fwd, rev and random
//! thread orders.
//!
//! Bounds: forward outputs within 1 ulp of the output type beyond the fp32-level allowance of
//! [`normlab_kernels::bounds`]: `2^-20 (|x̂ w| + |b|)` when a bias is added (the sum can cancel),
//! plus `2^-20 mean|x̂| |w|` for centred kinds (the absolute error of the fp32 mean); backward dx within
//! 1 ulp plus `2^-16 (max|dx| + s (max|g| + C |g . x̂|))` of its row (the backward subtracts
//! nearly equal fp32 terms of that size);
//! weight/bias gradients within 1 ulp plus `2^-18` of the sum of the absolute row terms.

use crate::common;

use common::*;
use half::{bf16, f16};
use normlab_kernels::bounds;
use normlab_kernels::cpu::{self, EmuOptions, Order};
use normlab_kernels::plan::Device;
use normlab_kernels::KernelStats;
use normlab_norms::{ConstMode, NormSpec};

fn specs() -> Vec<NormSpec> {
    vec![
        NormSpec::rms(1e-6),
        NormSpec::layer(1e-5),
        NormSpec::unit_l2(1e-12),
        NormSpec::l1(1e-6),
        NormSpec::l1(0.0).with_centred(false),
        NormSpec::linf(1e-6),
        NormSpec::linf(1e-6).with_centred(false).with_constant(ConstMode::Code),
        NormSpec::topk(1, 1e-6),
        NormSpec::topk(5, 1e-6),
        NormSpec::topk(32, 1e-6).with_centred(false),
    ]
}

fn opts(order: Order, blocks: u32) -> EmuOptions {
    EmuOptions { order, device: Device::emulator(blocks), ..Default::default() }
}

struct Case {
    rows: usize,
    n: usize,
    data: Data,
    weight: bool,
    bias: bool,
    /// Element offsets of x and y inside their buffers (misaligned rows, 16-byte congruence).
    x_off: usize,
    y_off: usize,
}

fn case(rows: usize, n: usize, data: Data) -> Case {
    Case { rows, n, data, weight: false, bias: false, x_off: 0, y_off: 0 }
}

/// The forward's documented allowance per element ([`normlab_kernels::bounds`]).
fn forward_slack<T: H>(spec: &NormSpec, x: &[T], n: usize, w: Option<&[T]>, b: Option<&[T]>) -> Vec<f64> {
    let (xh, _) = ref_forward::<T>(spec, x, n, None, None);
    bounds::row_forward_slack(spec, &xh, n, w.map(to64).as_deref(), b.map(to64).as_deref())
}

/// Forward of one case; returns the worst error in ulps (after the documented allowance).
fn forward_err<T: H>(spec: &NormSpec, c: &Case, o: &EmuOptions, seed: u64) -> f64 {
    let mut rng = Rng(seed | 1);
    let len = c.rows * c.n;
    let xb: Vec<T> = gen(&mut rng, len + c.x_off, c.data);
    let x = &xb[c.x_off..];
    let w: Option<Vec<T>> = c.weight.then(|| gen(&mut rng, c.n, Data::Normal { mean: 1.0, scale: 0.5 }));
    let b: Option<Vec<T>> = c.bias.then(|| gen(&mut rng, c.n, Data::Normal { mean: 0.0, scale: 0.5 }));
    let mut yb = vec![T::from64(0.0); len + c.y_off];
    let mut st = vec![KernelStats::default(); c.rows];
    cpu::forward(spec, x, c.n, w.as_deref(), b.as_deref(), &mut yb[c.y_off..], Some(&mut st), o).unwrap();
    let y = &yb[c.y_off..];
    let (want, ref_st) = ref_forward(spec, x, c.n, w.as_deref(), b.as_deref());
    // Statistics: the denominator D in fp32 vs f64.
    for (r, (k, s)) in st.iter().zip(&ref_st).enumerate() {
        let kd = 2f64.powi(k.exp2()) / k.rscale as f64;
        let rd = s.denominator();
        if rd.is_nan() {
            assert!(kd.is_nan(), "{spec:?} row {r}: reference stats NaN, kernel {k:?}");
        } else {
            assert!((kd - rd).abs() <= 1e-5 * rd.abs(), "{spec:?} row {r}: D = {kd} vs reference {rd} ({k:?} vs {s:?})");
        }
    }
    let slack = forward_slack(spec, x, c.n, w.as_deref(), b.as_deref());
    let slack = |i: usize| slack[i];
    let (err, at) = max_ulp_err(y, &want, &slack);
    if err > 1.0 {
        panic!(
            "{spec:?} {:?} rows={} n={} {:?}: {err} ulp at {at} (row {}, col {}): got {:?}, want {}",
            T::DT,
            c.rows,
            c.n,
            c.data,
            at / c.n,
            at % c.n,
            y[at],
            want[at]
        );
    }
    err
}

fn run_forward<T: H>(cases: &[Case], orders: &[Order]) {
    for spec in specs() {
        for (ci, c) in cases.iter().enumerate() {
            if spec.validate(c.n).is_err() || spec.scale_constant(c.n).is_err() {
                continue;
            }
            for (oi, &order) in orders.iter().enumerate() {
                forward_err::<T>(&spec, c, &opts(order, 3), 1000 + ci as u64 * 7 + oi as u64);
            }
        }
    }
}

fn shape_cases() -> Vec<Case> {
    let d = Data::Normal { mean: 0.3, scale: 1.0 };
    vec![
        case(1, 1, d),
        case(3, 7, d),
        case(5, 33, d),
        case(13, 64, d),
        case(2, 100, Data::Ints(3)),
        case(11, 128, Data::Ints(3)),
        case(9, 255, d),
        case(6, 1024, d),
        case(3, 1025, d),
        case(2, 2000, Data::Ints(5)),
        case(1, 4099, d),
        Case { x_off: 3, y_off: 3, ..case(7, 61, d) },
        Case { x_off: 1, y_off: 0, ..case(4, 200, d) },
        Case { x_off: 5, y_off: 5, ..case(3, 1500, d) },
        Case { weight: true, ..case(7, 96, d) },
        Case { weight: true, x_off: 2, y_off: 2, ..case(9, 45, d) },
        Case { weight: true, bias: true, ..case(5, 130, d) },
        Case { weight: true, bias: true, ..case(2, 2048, d) },
    ]
}

#[test]
fn forward_f16_shapes_fwd_order() {
    run_forward::<f16>(&shape_cases(), &[Order::Fwd]);
}

#[test]
fn forward_bf16_shapes_rev_and_random_order() {
    run_forward::<bf16>(&shape_cases(), &[Order::Rev, Order::Random(7)]);
}

/// Backward of one case (statistics from the kernel forward); returns the worst error in ulps.
fn backward_err<T: H>(spec: &NormSpec, c: &Case, o: &EmuOptions, seed: u64) -> f64 {
    let mut rng = Rng(seed | 1);
    let (rows, n) = (c.rows, c.n);
    let len = rows * n;
    let xb: Vec<T> = gen(&mut rng, len + c.x_off, c.data);
    let dyb: Vec<T> = gen(&mut rng, len + c.x_off, Data::Normal { mean: 0.1, scale: 1.0 });
    let (x, dy) = (&xb[c.x_off..], &dyb[c.x_off..]);
    let w: Option<Vec<T>> = c.weight.then(|| gen(&mut rng, n, Data::Normal { mean: 1.0, scale: 0.5 }));
    let grads = c.weight || c.bias;
    let (_, st) = kernel_forward(spec, x, n, None, None, o);
    let mut dxb = vec![T::from64(0.0); len + c.y_off];
    let mut dw = vec![T::from64(0.0); n];
    let mut db = vec![T::from64(0.0); n];
    cpu::backward(
        spec,
        x,
        dy,
        n,
        &st,
        w.as_deref(),
        &mut dxb[c.y_off..],
        grads.then_some(&mut dw[..]),
        grads.then_some(&mut db[..]),
        o,
    )
    .unwrap();
    let dx = &dxb[c.y_off..];
    let (dx_ref, dw_ref, db_ref) = ref_backward(spec, x, dy, n, w.as_deref());
    // Per row: the magnitude of the terms dx = s (g - correction) subtracts in fp32.
    let (xh_ref, st_ref) = ref_forward::<T>(spec, x, n, None, None);
    let (dy64, w64) = (to64(dy), w.as_deref().map(to64));
    let c_const = spec.scale_constant(n).unwrap().max(1.0);
    let row_scale: Vec<f64> = (0..rows)
        .map(|r| {
            let s = 1.0 / st_ref[r].denominator();
            let (mut gmax, mut dot, mut dxmax) = (0.0f64, 0.0f64, 0.0f64);
            for j in 0..n {
                let g = dy64[r * n + j] * w64.as_ref().map_or(1.0, |w| w[j]);
                gmax = gmax.max(g.abs());
                dot += g * xh_ref[r * n + j];
                if !dx_ref[r * n + j].is_nan() {
                    dxmax = dxmax.max(dx_ref[r * n + j].abs());
                }
            }
            dxmax + s * (gmax + dot.abs() * c_const)
        })
        .collect();
    let tie: Vec<f64> = (0..rows)
        .flat_map(|r| {
            let st = &st_ref[r];
            let dot: f64 = (0..n).map(|j| dy64[r * n + j] * w64.as_ref().map_or(1.0, |w| w[j]) * xh_ref[r * n + j]).sum();
            bounds::selection_tie_slack(spec, &xh_ref[r * n..(r + 1) * n], 1.0 / st.denominator(), st.mean_hi + st.mean_lo, dot)
        })
        .collect();
    let (err, at) = max_ulp_err(dx, &dx_ref, &|i| 2f64.powi(-16) * row_scale[i / n] + tie[i]);
    let ctx = format!("{spec:?} {:?} rows={rows} n={n} {:?} w={}", T::DT, c.data, c.weight);
    assert!(err <= 1.0, "{ctx}: dx {err} ulp at {at} (row {}, col {}): got {:?}, want {}", at / n, at % n, dx[at], dx_ref[at]);
    let mut worst = err;
    if grads {
        let (xh, _) = ref_forward::<T>(spec, x, n, None, None);
        let dy64 = to64(dy);
        let mut abs_w = vec![0.0; n];
        let mut abs_b = vec![0.0; n];
        for i in 0..len {
            abs_w[i % n] += (dy64[i] * xh[i]).abs();
            abs_b[i % n] += dy64[i].abs();
        }
        let (e, at) = max_ulp_err(&dw, &dw_ref, &|j| 2f64.powi(-18) * abs_w[j]);
        assert!(e <= 1.0, "{ctx}: dweight {e} ulp at col {at}: got {:?}, want {}", dw[at], dw_ref[at]);
        let (e2, at) = max_ulp_err(&db, &db_ref, &|j| 2f64.powi(-18) * abs_b[j]);
        assert!(e2 <= 1.0, "{ctx}: dbias {e2} ulp at col {at}: got {:?}, want {}", db[at], db_ref[at]);
        worst = worst.max(e).max(e2);
    }
    worst
}

fn run_backward<T: H>(cases: &[Case], orders: &[Order]) {
    for spec in specs() {
        for (ci, c) in cases.iter().enumerate() {
            if spec.validate(c.n).is_err() || spec.scale_constant(c.n).is_err() {
                continue;
            }
            for (oi, &order) in orders.iter().enumerate() {
                backward_err::<T>(&spec, c, &opts(order, 3), 5000 + ci as u64 * 7 + oi as u64);
            }
        }
    }
}

#[test]
fn backward_f16_shapes_rev_order() {
    run_backward::<f16>(&shape_cases(), &[Order::Rev]);
}

#[test]
fn backward_bf16_shapes_fwd_and_random_order() {
    run_backward::<bf16>(&shape_cases(), &[Order::Fwd, Order::Random(11)]);
}

/// bf16 rows the forward rescues by a power of two (max |x| above 2^40 or below 2^-30), whose
/// backward scales x the same way: at n = 1040 the block kernels hold them in registers (the
/// SCALED instantiation of bwd_regs_row), at n = 1036 they take the staged path.
#[test]
fn backward_rescued_rows_bf16() {
    let huge = Data::Normal { mean: 1e37, scale: 3e37 };
    let tiny = Data::Normal { mean: 0.0, scale: 1e-37 };
    let cases = [
        case(5, 1040, huge),
        case(5, 1040, tiny),
        Case { weight: true, bias: true, ..case(4, 1040, huge) },
        case(3, 1036, tiny),
    ];
    run_backward::<bf16>(&cases, &[Order::Fwd]);
}

/// Rows with special content, one per row, in one launch.
fn special_rows<T: H>(n: usize, rows: &[&dyn Fn(usize) -> f64]) -> Vec<T> {
    rows.iter().flat_map(|f| (0..n).map(move |j| T::from64(f(j)))).collect()
}

fn check_special<T: H>(x: &[T], n: usize) {
    for spec in specs() {
        if spec.validate(n).is_err() {
            continue;
        }
        for order in [Order::Fwd, Order::Rev] {
            let o = opts(order, 2);
            let (y, _) = kernel_forward(&spec, x, n, None, None, &o);
            let (want, _) = ref_forward(&spec, x, n, None, None);
            let slack = forward_slack(&spec, x, n, None, None);
            let (err, at) = max_ulp_err(&y, &want, &|i| slack[i]);
            assert!(err <= 1.0, "{spec:?} {:?} n={n}: {err} ulp at row {} col {}: got {:?}, want {}", T::DT, at / n, at % n, y[at], want[at]);
        }
    }
}

/// The centred term of the forward allowance, on rows found by a sweep (bounds.rs): each has an
/// output within a few fp32 ulps of the row mean whose error, the fp32 mean's, is more than 1
/// ulp of the output type. With the allowance every output is within 1 ulp; the allowance is
/// below 1/16 ulp at every output of magnitude >= 2^-6, so it cannot hide an error there.
#[test]
fn centred_outputs_near_the_mean_carry_the_fp32_mean_error() {
    fn check<T: H>(spec: NormSpec, n: usize, seed: u64) {
        let mut rng = Rng(seed | 1);
        let x: Vec<T> = gen(&mut rng, 3 * n, Data::Normal { mean: 0.2, scale: 3.0 });
        let (y, _) = kernel_forward(&spec, &x, n, None, None, &opts(Order::Fwd, 2));
        let (want, _) = ref_forward(&spec, &x, n, None, None);
        let what = format!("{spec:?} {:?} n={n} seed={seed}", T::DT);
        let (bare, at) = max_ulp_err(&y, &want, &|_| 0.0);
        // If this fails, the kernel's mean became more accurate: the centred term may be tightened.
        assert!(bare > 1.0, "{what}: {bare} ulp without the centred term");
        assert!(want[at].abs() < 1e-4, "{what}: the worst output {} is not near the mean", want[at]);
        let slack = forward_slack(&spec, &x, n, None, None);
        let (err, at) = max_ulp_err(&y, &want, &|i| slack[i]);
        assert!(err <= 1.0, "{what}: {err} ulp beyond the allowance at {at}");
        for (i, w) in want.iter().enumerate() {
            if w.abs() >= 2f64.powi(-6) {
                assert!(slack[i] < T::DT.ulp(*w) / 16.0, "{what}: allowance {} at output {w}", slack[i]);
            }
        }
    }
    for spec in [NormSpec::layer(1e-5), NormSpec::l1(1e-6), NormSpec::linf(1e-6), NormSpec::topk(5, 1e-6)] {
        check::<bf16>(spec, 654, 641439);
    }
    check::<f16>(NormSpec::linf(1e-6), 322, 926523);
    check::<f16>(NormSpec::layer(1e-5), 777, 1203688);
}

#[test]
fn forward_edge_magnitudes_f16() {
    let mut rng = Rng(99);
    let z: Vec<f64> = (0..1040).map(|_| rng.normal()).collect();
    // 64: warp kernels' register path (4 rows a warp, in 8-lane segments); 1040: a block
    // kernel's rows held in registers (n a multiple of 8 above 1024).
    for n in [37usize, 64, 300, 1040] {
        let x = special_rows::<f16>(
            n,
            &[
                &|_| 0.0,
                &|j| z[j] * 20000.0,
                &|j| if j % 3 == 0 { 65504.0 } else { -65504.0 },
                &|j| z[j] * 1e-6,
                &|j| 6e-8 * (j % 2) as f64,
                &|j| 1000.0 + z[j],
                &|j| if j == 5 { f64::NAN } else { z[j] },
                &|j| if j == n - 1 { f64::INFINITY } else { z[j] },
            ],
        );
        check_special::<f16>(&x, n);
    }
}

#[test]
fn forward_edge_magnitudes_bf16() {
    let mut rng = Rng(98);
    let z: Vec<f64> = (0..1200).map(|_| rng.normal()).collect();
    // 64: rescued, non-finite and plain rows side by side in one warp's segments.
    for n in [45usize, 64, 1200] {
        let x = special_rows::<bf16>(
            n,
            &[
                &|_| 0.0,
                &|j| z[j] * 1e38,
                &|j| if j % 2 == 0 { 3.3e38 } else { -3.3e38 },
                &|j| z[j] * 1e-37,
                &|j| z[j] * 1e-39,
                &|j| 1e4 + z[j] * 10.0,
                &|j| if j == 0 { f64::NEG_INFINITY } else { z[j] },
            ],
        );
        check_special::<bf16>(&x, n);
    }
}

#[test]
fn zero_rows_launch_nothing() {
    let x: Vec<f16> = vec![];
    let mut y: Vec<f16> = vec![];
    for spec in specs() {
        cpu::forward(&spec, &x, 64, None, None, &mut y, Some(&mut []), &EmuOptions::default()).unwrap();
        let mut dw = vec![f16::from_f64(7.0); 64];
        cpu::backward(&spec, &x, &x, 64, &[], None, &mut y, Some(&mut dw), None, &EmuOptions::default()).unwrap();
        assert!(dw.iter().all(|v| v.to_f64() == 0.0), "empty batch: dweight must be 0");
    }
}

#[test]
fn weight_gradients_are_bitwise_deterministic() {
    let spec = NormSpec::layer(1e-5);
    let n = 200;
    let mut rng = Rng(5);
    let x: Vec<bf16> = gen(&mut rng, 23 * n, Data::Normal { mean: 0.0, scale: 1.0 });
    let dy: Vec<bf16> = gen(&mut rng, 23 * n, Data::Normal { mean: 0.0, scale: 1.0 });
    let w: Vec<bf16> = gen(&mut rng, n, Data::Normal { mean: 1.0, scale: 0.1 });
    let mut results = Vec::new();
    for (order, rev_blocks) in [(Order::Fwd, false), (Order::Rev, true), (Order::Random(3), false)] {
        let o = EmuOptions { order, reverse_blocks: rev_blocks, device: Device::emulator(4), ..Default::default() };
        let (_, st) = kernel_forward(&spec, &x, n, None, None, &o);
        let mut dx = vec![bf16::ZERO; x.len()];
        let mut dw = vec![bf16::ZERO; n];
        let mut db = vec![bf16::ZERO; n];
        cpu::backward(&spec, &x, &dy, n, &st, Some(&w), &mut dx, Some(&mut dw), Some(&mut db), &o).unwrap();
        results.push((dx, dw, db));
    }
    assert!(results.windows(2).all(|p| p[0] == p[1]), "results differ between thread/block orders");
}

#[test]
fn kernel_list_matches_cpu_launcher() {
    assert_eq!(cpu::kernel_names(), normlab_kernels::list::all_names());
    assert_eq!(normlab_kernels::list::all_names().len(), 6 * 2 * 2 * 2 + 2 + normlab_kernels::list::variant_kernels().len());
}

#[test]
fn bad_requests_are_typed_errors() {
    use normlab_kernels::KernelError;
    use normlab_norms::NormError;
    let x = vec![f16::ONE; 64 * 2];
    let mut y = vec![f16::ZERO; 64 * 2];
    let o = EmuOptions::default();
    let e = cpu::forward(&NormSpec::topk(33, 1e-6), &x, 64, None, None, &mut y, None, &o).unwrap_err();
    assert_eq!(e, KernelError::TopKTooLarge { k: 33, max: 32 });
    let e = cpu::forward(&NormSpec::rms(1e-6), &x, 64, None, None, &mut y[..10], None, &o).unwrap_err();
    assert_eq!(e, KernelError::Norm(NormError::Length { what: "output", expected: 128, got: 10 }));
    let e = cpu::forward(&NormSpec::rms(1e-6), &x, 0, None, None, &mut y, None, &o).unwrap_err();
    assert!(matches!(e, KernelError::Norm(NormError::Empty { .. })), "{e:?}");
    let e = cpu::forward(&NormSpec::rms(-1.0), &x, 64, None, None, &mut y, None, &o).unwrap_err();
    assert_eq!(e, KernelError::Norm(NormError::InvalidEps { eps: -1.0 }));
    let wide = 200_000;
    let xw = vec![f16::ONE; wide];
    let mut yw = vec![f16::ZERO; wide];
    let e = cpu::forward(&NormSpec::rms(1e-6), &xw, wide, None, None, &mut yw, None, &o).unwrap_err();
    assert!(matches!(e, KernelError::RowTooWide { n: 200_000, .. }), "{e:?}");
    let st = vec![KernelStats::default(); 2];
    let mut dw = vec![f16::ZERO; 3];
    let e = cpu::backward(&NormSpec::rms(1e-6), &x, &x, 64, &st, None, &mut y, Some(&mut dw), None, &o).unwrap_err();
    assert_eq!(e, KernelError::Norm(NormError::Length { what: "dweight", expected: 64, got: 3 }));
    let e = normlab_kernels::list::Storage::from_dtype(normlab_norms::DType::F32).unwrap_err();
    assert_eq!(e, KernelError::UnsupportedDType(normlab_norms::DType::F32));
}

mod random_shapes {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Each case is a few emulated launches; 24 cases keep the test in seconds.
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Random shapes, kinds, dtypes, offsets, affine and thread orders: forward and backward
        /// within the documented bounds.
        #[test]
        fn random_cases_match_reference(
            spec_i in 0usize..10,
            rows in 1usize..6,
            n in 1usize..1400,
            x_off in 0usize..8,
            y_off in 0usize..8,
            weight in any::<bool>(),
            bias in any::<bool>(),
            bf in any::<bool>(),
            order_i in 0u64..3,
            seed in any::<u64>(),
        ) {
            let spec = specs()[spec_i];
            prop_assume!(spec.validate(n).is_ok() && spec.scale_constant(n).is_ok());
            let order = match order_i { 0 => Order::Fwd, 1 => Order::Rev, _ => Order::Random(seed) };
            let c = Case { rows, n, data: Data::Normal { mean: 0.2, scale: 3.0 }, weight, bias, x_off, y_off };
            let o = opts(order, 2);
            if bf {
                forward_err::<bf16>(&spec, &c, &o, seed);
                backward_err::<bf16>(&spec, &Case { bias: false, ..c }, &o, seed);
            } else {
                forward_err::<f16>(&spec, &c, &o, seed);
                backward_err::<f16>(&spec, &Case { bias: false, ..c }, &o, seed);
            }
        }
    }
}
