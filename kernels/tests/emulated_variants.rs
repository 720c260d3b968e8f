//! The forward variants on the emulator (kernels/README.md "Forward variants"):
//!
//! - pure-half accumulation (`nl_*_fwd_*_pure_*`) against normlab-norms' CPU path with
//!   `Accum::PureF16` (fp16 storage) / `Accum::PureBf16` (bf16): outputs, statistics and the
//!   counters must agree BIT FOR BIT (same operations in the same order), in fwd, rev and random
//!   thread orders, on odd shapes, misaligned rows, edge rows (zeros, +-65504, NaN/Inf,
//!   subnormals, rows whose sum of squares overflows fp16); and the overflow must happen where
//!   the fp32 kernels stay clean;
//! - fp8 E4M3 output with a scale (`nl_*_fwd_*_e4m3_*`) against the f64 reference times the
//!   scale, within 1 ulp of E4M3 (the kernel's error is the one rounding, at most 0.5 ulp, plus
//!   fp32 arithmetic far below it; saturation at +-448 and NaN as normlab-norms stores F8E4M3),
//!   and the conversion itself bit-exact against normlab-norms' `Element::from_f32` on every
//!   fp16 and bf16 value in [-1, 1] at several scales.

use crate::common;

use common::*;
use float8::F8E4M3;
use half::{bf16, f16};
use normlab_kernels::cpu::{self, EmuOptions, Order};
use normlab_kernels::params::RowCounts;
use normlab_kernels::plan::Device;
use normlab_kernels::{KernelError, KernelStats};
use normlab_norms::{row, Accum, ConstMode, Counters, DType, Element, NormSpec, RowStats};

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
        NormSpec::topk(20, 1e-6).with_centred(false),
        NormSpec::rms(1e-6).with_centred(true),
    ]
}

fn opts(order: Order, blocks: u32) -> EmuOptions {
    EmuOptions { order, device: Device::emulator(blocks), ..Default::default() }
}

/// The 16-bit types with their pure accumulator and storage trait.
trait P: H + Element {
    const ACCUM: Accum;
}
impl P for f16 {
    const ACCUM: Accum = Accum::PureF16;
}
impl P for bf16 {
    const ACCUM: Accum = Accum::PureBf16;
}

fn same_bits<T: H>(a: T, b: T) -> bool {
    let (x, y) = (a.to64(), b.to64());
    (x.is_nan() && y.is_nan()) || (x.to_bits() == y.to_bits())
}

fn same_f32(a: f32, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a as f64).to_bits() == b.to_bits()
}

/// Pure forward of `x` ([rows, n], at element offsets x_off / y_off in their buffers) on the
/// emulator and on the CPU; every output, statistic and per-row counter must be identical.
/// Returns the counters.
#[allow(clippy::too_many_arguments)]
fn check_pure<T: P>(spec: &NormSpec, x: &[T], n: usize, w: Option<&[T]>, b: Option<&[T]>, y_off: usize, o: &EmuOptions) -> Counters {
    let rows = x.len() / n;
    let mut yb = vec![T::from64(0.0); x.len() + y_off];
    let mut st = vec![KernelStats::default(); rows];
    let mut counts = vec![RowCounts::default(); rows];
    let (_, total) = cpu::forward_pure(spec, x, n, w, b, &mut yb[y_off..], Some(&mut st), Some(&mut counts), o).unwrap();
    let y = &yb[y_off..];
    let ctx = format!("{spec:?} {:?} rows={rows} n={n} w={} b={}", T::DT, w.is_some(), b.is_some());
    let mut want_total = Counters::default();
    for r in 0..rows {
        let xr = &x[r * n..(r + 1) * n];
        let mut yr = vec![T::from64(0.0); n];
        let mut sr = [RowStats::default()];
        let c = row::forward(spec, T::ACCUM, xr, n, w, b, &mut yr, Some(&mut sr)).unwrap();
        want_total += c;
        assert_eq!(counts[r].to_counters(), c, "{ctx}: row {r} counters (kernel vs CPU pure path)");
        for j in 0..n {
            assert!(
                same_bits(y[r * n + j], yr[j]),
                "{ctx}: row {r} col {j}: kernel {:?} vs CPU pure {:?} (x = {:?})",
                y[r * n + j],
                yr[j],
                xr[j]
            );
        }
        // Statistics: bitwise for rows that did not overflow (an overflowed row's NaN statistics
        // may come out of a different NaN-ordering in the Top-k selection; its outputs are
        // compared above).
        if c.acc_overflow == 0 {
            let k = st[r];
            let s = sr[0];
            assert!(
                same_f32(k.mean_hi, s.mean_hi) && same_f32(k.mean_lo, s.mean_lo) && same_f32(k.rscale, s.rscale),
                "{ctx}: row {r} statistics {k:?} vs CPU {s:?}"
            );
            assert_eq!((k.exp2(), k.clamped()), (0, s.clamped), "{ctx}: row {r} meta");
        }
    }
    assert_eq!(total, want_total, "{ctx}: total counters");
    total
}

fn gen_case<T: P>(seed: u64, rows: usize, n: usize, off: usize, d: Data) -> Vec<T> {
    let mut rng = Rng(seed | 1);
    gen::<T>(&mut rng, rows * n + off, d)
}

fn run_pure_shapes<T: P>(orders: &[Order]) {
    let d = Data::Normal { mean: 0.3, scale: 2.0 };
    // (rows, n, x offset, y offset, weight, bias)
    let shapes: &[(usize, usize, usize, usize, bool, bool)] = &[
        (1, 1, 0, 0, false, false),
        (3, 7, 0, 0, false, false),
        (5, 33, 3, 3, false, false),
        (13, 64, 0, 0, true, false),
        (2, 100, 1, 0, false, false),
        (9, 255, 0, 0, true, true),
        (3, 1024, 5, 5, false, false),
        (3, 1025, 0, 0, true, true),
        (2, 2000, 2, 2, false, false),
        (1, 4099, 0, 0, false, true),
    ];
    for (si, spec) in specs().iter().enumerate() {
        for (ci, &(rows, n, xo, yo, wt, bs)) in shapes.iter().enumerate() {
            if spec.validate(n).is_err() || spec.scale_constant(n).is_err() {
                continue;
            }
            let seed = 77 + (si * 100 + ci) as u64;
            let xb: Vec<T> = gen_case(seed, rows, n, xo, d);
            let w: Option<Vec<T>> = wt.then(|| gen_case(seed + 1, 1, n, 0, Data::Normal { mean: 1.0, scale: 0.5 }));
            let b: Option<Vec<T>> = bs.then(|| gen_case(seed + 2, 1, n, 0, Data::Normal { mean: 0.0, scale: 0.5 }));
            for (oi, &order) in orders.iter().enumerate() {
                let order = match order {
                    Order::Random(s) => Order::Random(s + (si * 31 + ci * 7 + oi) as u64),
                    o => o,
                };
                check_pure(spec, &xb[xo..], n, w.as_deref(), b.as_deref(), yo, &opts(order, 2));
            }
        }
    }
}

#[test]
fn pure_f16_matches_cpu_pure_path_bitwise() {
    run_pure_shapes::<f16>(&[Order::Fwd, Order::Random(5)]);
}

#[test]
fn pure_bf16_matches_cpu_pure_path_bitwise() {
    run_pure_shapes::<bf16>(&[Order::Rev, Order::Random(9)]);
}

/// Rows with special content, one per row.
fn rows_of<T: H>(n: usize, rows: &[&dyn Fn(usize) -> f64]) -> Vec<T> {
    rows.iter().flat_map(|f| (0..n).map(move |j| T::from64(f(j)))).collect()
}

#[test]
fn pure_edge_rows_match_cpu_and_count() {
    let mut rng = Rng(3);
    let z: Vec<f64> = (0..1500).map(|_| rng.normal()).collect();
    for n in [40usize, 1500] {
        let x = rows_of::<f16>(
            n,
            &[
                &|_| 0.0,
                &|j| if j % 3 == 0 { 65504.0 } else { -65504.0 },
                &|j| z[j] * 60.0,
                &|j| 6e-8 * (j % 2) as f64,
                &|j| z[j] * 1e-6,
                &|j| 1000.0 + z[j],
                &|j| if j == 5 { f64::NAN } else { z[j] },
                &|j| if j == n - 1 { f64::INFINITY } else { z[j] },
                &|j| if j == 2 { f64::NEG_INFINITY } else if j == 3 { f64::NAN } else { z[j] },
            ],
        );
        for spec in specs() {
            if spec.validate(n).is_err() {
                continue;
            }
            for order in [Order::Fwd, Order::Rev] {
                let c = check_pure(&spec, &x, n, None, None, 0, &opts(order, 2));
                assert_eq!(c.nonfinite_in, 4, "{spec:?} n={n}: 4 non-finite inputs in 3 rows");
            }
        }
        let xb = rows_of::<bf16>(
            n,
            &[
                &|_| 0.0,
                &|j| z[j] * 1e20,
                &|j| if j % 2 == 0 { 3.3e38 } else { -3.3e38 },
                &|j| z[j] * 1e-39,
                &|j| if j == 0 { f64::NEG_INFINITY } else { z[j] },
            ],
        );
        for spec in specs() {
            if spec.validate(n).is_ok() {
                check_pure(&spec, &xb, n, None, None, 0, &opts(Order::Fwd, 2));
            }
        }
    }
}

/// "Norm matters" 4.3: in pure fp16 the L2 kinds overflow on rows the fp32 kernels handle,
/// L1 survives. Rows of 64 values of magnitude 40..48 (sum of squares about 1.2e5 > 65504) and
/// the fp16 extremes.
#[test]
fn pure_f16_l2_overflows_where_f32_and_l1_do_not() {
    let n = 64;
    let x = rows_of::<f16>(
        n,
        &[&|j| if j % 2 == 0 { 40.0 + (j % 9) as f64 } else { -44.0 }, &|j| if j % 3 == 0 { 65504.0 } else { -65504.0 }],
    );
    let o = opts(Order::Fwd, 2);
    for spec in [NormSpec::rms(1e-6), NormSpec::unit_l2(1e-12), NormSpec::layer(1e-5)] {
        let c = check_pure(&spec, &x, n, None, None, 0, &o);
        assert_eq!(c.acc_overflow, 2, "{spec:?}: both rows overflow the fp16 sum of squares");
        assert_eq!(c.nonfinite_in, 0);
        // The fp32 kernel on the same rows: clean, within 1 ulp of the f64 reference.
        let (y, _) = kernel_forward(&spec, &x, n, None, None, &o);
        let (want, _) = ref_forward(&spec, &x, n, None, None);
        let (err, at) = max_ulp_err(&y, &want, &|_| 0.0);
        assert!(err <= 1.0 && y.iter().all(|v| v.to_f64().is_finite()), "{spec:?}: fp32 kernel {err} ulp at {at}");
    }
    // L1 (uncentred, so its sum |x| of the first row, 2.9e3, stays in range) survives the first row.
    let spec = NormSpec::l1(1e-6).with_centred(false);
    let mut counts = vec![RowCounts::default(); 2];
    let mut y = vec![f16::ZERO; 2 * n];
    cpu::forward_pure(&spec, &x, n, None, None, &mut y, None, Some(&mut counts), &o).unwrap();
    assert_eq!(counts[0], RowCounts::default(), "L1 in pure fp16 survives the row RMS overflows on");
    assert!(y[..n].iter().all(|v| v.is_finite()));
    check_pure(&spec, &x, n, None, None, 0, &o);
}

#[test]
fn pure_bf16_overflows_past_its_range() {
    let n = 100;
    let x = rows_of::<bf16>(n, &[&|j| if j % 2 == 0 { 2e19 } else { -3e19 }]);
    let c = check_pure(&NormSpec::rms(1e-6), &x, n, None, None, 0, &opts(Order::Rev, 1));
    assert_eq!(c.acc_overflow, 1);
}

#[test]
fn pure_zero_rows_and_typed_errors() {
    let x: Vec<f16> = vec![];
    let mut y: Vec<f16> = vec![];
    let (_, c) = cpu::forward_pure(&NormSpec::rms(1e-6), &x, 64, None, None, &mut y, None, None, &EmuOptions::default()).unwrap();
    assert!(c.is_clean());
    let x = vec![f16::ONE; 128];
    let mut y = vec![f16::ZERO; 128];
    let mut counts = vec![RowCounts::default(); 1];
    let e = cpu::forward_pure(&NormSpec::rms(1e-6), &x, 64, None, None, &mut y, None, Some(&mut counts), &EmuOptions::default()).unwrap_err();
    assert_eq!(e, KernelError::Norm(normlab_norms::NormError::Length { what: "counts", expected: 2, got: 1 }));
    let e = cpu::forward_pure(&NormSpec::topk(40, 1e-6), &x, 64, None, None, &mut y, None, None, &EmuOptions::default()).unwrap_err();
    assert_eq!(e, KernelError::TopKTooLarge { k: 40, max: 32 });
}

// ------------------------------------------------------------------------------------ E4M3

/// Error in E4M3 ulps of `got` against the exact value `want` (beyond `slack`); a reference
/// beyond 448 must give exactly +-448 (saturation), NaN must meet NaN.
fn e4m3_err(got: &[F8E4M3], want: &[f64], slack: &dyn Fn(usize) -> f64) -> (f64, usize) {
    let dt = DType::F8E4M3;
    let mut worst = (0.0f64, 0usize);
    for (i, (g, &w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        let e = if w.is_nan() || g.is_nan() {
            if w.is_nan() && g.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if w.abs() > 448.0 {
            if g == 448.0 * w.signum() {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            ((g - w).abs() - slack(i)).max(0.0) / dt.ulp(w)
        };
        if e > worst.0 {
            worst = (e, i);
        }
    }
    worst
}

/// E4M3 forward of one case against the f64 reference times the scale; returns the worst ulp.
#[allow(clippy::too_many_arguments)]
fn check_e4m3<T: H>(spec: &NormSpec, x: &[T], n: usize, w: Option<&[T]>, b: Option<&[T]>, scale: f32, y_off: usize, o: &EmuOptions) -> f64 {
    let rows = x.len() / n;
    let mut yb = vec![F8E4M3::from_bits(0x55); x.len() + y_off];
    let mut st = vec![KernelStats::default(); rows];
    cpu::forward_e4m3(spec, x, n, w, b, scale, &mut yb[y_off..], Some(&mut st), o).unwrap();
    let y = &yb[y_off..];
    let (r, _) = ref_forward(spec, x, n, w, b);
    let want: Vec<f64> = r.iter().map(|v| v * scale as f64).collect();
    // With a bias the fp32 sum x̂ w + b may cancel (as the 16-bit forward's allowance).
    let slack: Box<dyn Fn(usize) -> f64> = if let Some(b) = b {
        let (xh, _) = ref_forward::<T>(spec, x, n, None, None);
        let w64 = w.map(to64);
        let b64 = to64(b);
        Box::new(move |i| {
            let j = i % n;
            2f64.powi(-20) * ((xh[i] * w64.as_ref().map_or(1.0, |w| w[j])).abs() + b64[j].abs()) * scale as f64
        })
    } else {
        Box::new(|_| 0.0)
    };
    let (err, at) = e4m3_err(y, &want, &*slack);
    assert!(
        err <= 1.0,
        "{spec:?} {:?} rows={rows} n={n} scale={scale}: {err} E4M3 ulp at row {} col {}: got {:?}, want {}",
        T::DT,
        at / n,
        at % n,
        y[at],
        want[at]
    );
    // The statistics are the 16-bit forward's: the denominator within 1e-5 of the reference.
    let (_, ref_st) = ref_forward::<T>(spec, x, n, None, None);
    for (r, (k, s)) in st.iter().zip(&ref_st).enumerate() {
        let (kd, rd) = (2f64.powi(k.exp2()) / k.rscale as f64, s.denominator());
        assert!(
            (rd.is_nan() && kd.is_nan()) || (kd - rd).abs() <= 1e-5 * rd.abs(),
            "{spec:?} row {r}: D = {kd} vs reference {rd}"
        );
    }
    err
}

fn run_e4m3<T: H>(orders: &[Order]) -> f64 {
    let d = Data::Normal { mean: 0.2, scale: 1.5 };
    let shapes: &[(usize, usize, usize, usize, bool, bool)] = &[
        (1, 1, 0, 0, false, false),
        (3, 7, 0, 0, false, false),
        (5, 33, 3, 3, true, false),
        (13, 64, 0, 0, false, false),
        (4, 200, 1, 0, false, false),
        (9, 255, 0, 5, true, true),
        (3, 1024, 8, 4, false, false),
        (3, 1025, 0, 0, true, false),
        (1, 4099, 0, 0, true, true),
    ];
    let mut worst = 0.0f64;
    for (si, spec) in specs().iter().enumerate() {
        for (ci, &(rows, n, xo, yo, wt, bs)) in shapes.iter().enumerate() {
            if spec.validate(n).is_err() || spec.scale_constant(n).is_err() {
                continue;
            }
            let mut rng = Rng(1000 + (si * 100 + ci) as u64);
            let xb: Vec<T> = gen(&mut rng, rows * n + xo, d);
            let w: Option<Vec<T>> = wt.then(|| gen(&mut rng, n, Data::Normal { mean: 1.0, scale: 0.5 }));
            let b: Option<Vec<T>> = bs.then(|| gen(&mut rng, n, Data::Normal { mean: 0.0, scale: 0.5 }));
            for (oi, &order) in orders.iter().enumerate() {
                for scale in [1.0f32, 16.0, 0.37, 300.0] {
                    let e = check_e4m3(spec, &xb[xo..], n, w.as_deref(), b.as_deref(), scale, yo, &opts(order, 2 + oi as u32));
                    worst = worst.max(e);
                }
            }
        }
    }
    worst
}

#[test]
fn e4m3_f16_within_one_ulp_of_reference() {
    let worst = run_e4m3::<f16>(&[Order::Fwd, Order::Random(3)]);
    eprintln!("E4M3 from f16: worst {worst:.3} ulp");
}

#[test]
fn e4m3_bf16_within_one_ulp_of_reference() {
    let worst = run_e4m3::<bf16>(&[Order::Rev]);
    eprintln!("E4M3 from bf16: worst {worst:.3} ulp");
}

#[test]
fn e4m3_edge_rows() {
    let mut rng = Rng(12);
    let z: Vec<f64> = (0..300).map(|_| rng.normal()).collect();
    for n in [37usize, 300] {
        let x = rows_of::<f16>(
            n,
            &[
                &|_| 0.0,
                &|j| if j % 3 == 0 { 65504.0 } else { -65504.0 },
                &|j| z[j] * 20000.0,
                &|j| 6e-8 * (j % 2) as f64,
                &|j| if j == 5 { f64::NAN } else { z[j] },
                &|j| if j == n - 1 { f64::INFINITY } else { z[j] },
            ],
        );
        for spec in specs() {
            if spec.validate(n).is_err() {
                continue;
            }
            for scale in [1.0f32, 64.0, 1e-3] {
                check_e4m3(&spec, &x, n, None, None, scale, 0, &opts(Order::Rev, 2));
            }
        }
    }
}

/// The conversion itself, bit-exact: with L-inf (uncentred, C = 1, eps = 0) on a row whose
/// largest magnitude is 1, y_fp32 = x exactly, and with a power-of-two scale so is y * scale;
/// every fp16 (bf16) value in [-1, 1] must then be stored as normlab-norms stores it
/// (`<F8E4M3 as Element>::from_f32`): ties to even, the E4M3 subnormals, the 448 / 464
/// saturation boundary, signed zeros.
fn conversion_is_exact<T: H>(all: Vec<T>) {
    let spec = NormSpec::linf(0.0).with_centred(false).with_constant(ConstMode::One);
    let n = all.len();
    assert!(all.iter().any(|v| v.to64() == 1.0));
    for scale in [0.25f32, 1.0, 64.0, 512.0, 1024.0, 2f32.powi(20)] {
        let mut y = vec![F8E4M3::from_bits(0x55); n];
        cpu::forward_e4m3(&spec, &all, n, None, None, scale, &mut y, None, &opts(Order::Fwd, 1)).unwrap();
        for (v, g) in all.iter().zip(&y) {
            let want = <F8E4M3 as Element>::from_f32(v.to64() as f32 * scale);
            assert_eq!(g.to_bits(), want.to_bits(), "{:?} {} * {scale}: kernel {g:?}, norms {want:?}", T::DT, v.to64());
        }
    }
}

#[test]
fn e4m3_conversion_matches_norms_bitwise() {
    conversion_is_exact((0..=u16::MAX).map(f16::from_bits).filter(|v| v.to_f64().abs() <= 1.0).collect::<Vec<_>>());
    conversion_is_exact((0..=u16::MAX).map(bf16::from_bits).filter(|v| v.to_f64().abs() <= 1.0).collect::<Vec<_>>());
}

#[test]
fn e4m3_typed_errors() {
    let x = vec![f16::ONE; 64];
    let mut y = vec![F8E4M3::from_bits(0); 64];
    for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
        let e = cpu::forward_e4m3(&NormSpec::rms(1e-6), &x, 64, None, None, bad, &mut y, None, &EmuOptions::default()).unwrap_err();
        assert!(matches!(e, KernelError::InvalidScale { .. }), "{bad}: {e:?}");
    }
    let e = cpu::forward_e4m3(&NormSpec::rms(1e-6), &x, 64, None, None, 1.0, &mut y[..10], None, &EmuOptions::default()).unwrap_err();
    assert_eq!(e, KernelError::Norm(normlab_norms::NormError::Length { what: "output", expected: 64, got: 10 }));
}

#[test]
fn variant_list_matches_cpu_launcher() {
    assert_eq!(cpu::kernel_names(), normlab_kernels::list::all_names());
    assert_eq!(normlab_kernels::list::variant_kernels().len(), 6 * 2 * 2 * 2);
}
