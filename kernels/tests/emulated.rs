//! The CUDA kernels executed on the CPU by the SIMT emulator, against normlab-norms' f64
//! reference path: every kind, fp16 and bf16, forward and backward, odd shapes (n = 1, tails,
//! one row, many rows, wide rows, zero rows, misaligned rows), edge magnitudes (all-zero rows,
//! near fp16 max, bf16 extremes, NaN/Inf rows, large mean offsets), in fwd, rev and random
//! thread orders.
//!
//! Bounds: forward outputs within 1 ulp of the output type (plus an fp32-level allowance
//! `2^-20 (|x̂ w| + |b|)` only when a bias is added, where the sum can cancel); backward dx within
//! 1 ulp plus `2^-16` of the row's largest |dx| (the backward subtracts nearly equal fp32 terms);
//! weight/bias gradients within 1 ulp plus `2^-18` of the sum of the absolute row terms.

mod common;

use common::*;
use half::{bf16, f16};
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
    let slack: Box<dyn Fn(usize) -> f64> = if c.bias {
        let (xh, _) = ref_forward::<T>(spec, x, c.n, None, None);
        let w64 = w.as_deref().map(to64);
        let b64 = to64(b.as_deref().unwrap());
        Box::new(move |i| {
            let j = i % c.n;
            let wj = w64.as_ref().map_or(1.0, |w| w[j]);
            2f64.powi(-20) * ((xh[i] * wj).abs() + b64[j].abs())
        })
    } else {
        Box::new(|_| 0.0)
    };
    let (err, at) = max_ulp_err(y, &want, &*slack);
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
        case(9, 255, d),
        case(6, 1024, d),
        case(3, 1025, d),
        case(2, 2000, Data::Ints(5)),
        case(1, 4099, d),
        Case { x_off: 3, y_off: 3, ..case(7, 61, d) },
        Case { x_off: 1, y_off: 0, ..case(4, 200, d) },
        Case { x_off: 5, y_off: 5, ..case(3, 1500, d) },
        Case { weight: true, ..case(7, 96, d) },
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
