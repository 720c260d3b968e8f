//! The composed norms (`OpPath::Composed`: what a non-CPU device runs for f32/f64 storage)
//! against the norm op on the CPU: values and the gradients of x, weight and bias for every kind
//! and variant of `ops_common::specs()`, with and without affine, odd widths and a strided input;
//! f64 and f32 storage with the matching accumulator, bf16 with the f32 accumulator. Then the
//! typed refusals of `norm_on`.

use crate::ops_common;

use candle_core::{DType, Device, Tensor, Var};
use normlab::norms::{Accum, NormKind, NormSpec};
use normlab::ops::{norm_on, OpPath, Telemetry};
use ops_common::*;

fn vals(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap()
}

/// `max |a - b| / max |b|`.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let m = b.iter().fold(0f64, |m, v| m.max(v.abs()));
    let d = a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((x - y).abs()));
    if m == 0.0 {
        d
    } else {
        d / m
    }
}

/// Composed vs op, relative to the tensor's max. Both compute the same expressions in the work
/// dtype; they differ in the order of the sums (lanes vs candle's reductions) and in the
/// backward's form (one pass vs autograd), each a few ulp of the work dtype: f64 1e-14 (2^-52 is
/// 2.2e-16; observed below 1e-15), f32 2e-6 (16 ulp at the max; observed below 3e-7). bf16 (f32
/// statistics, one rounding into bf16 on both paths): an f32 value near a rounding boundary may
/// round to the two neighbours, one bf16 ulp (at most 2^-7 of the max: 8e-3; observed 0).
fn tol(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-14,
        DType::F32 => 2e-6,
        _ => 8e-3,
    }
}

fn accum_of(dt: DType) -> Accum {
    if dt == DType::F64 {
        Accum::F64
    } else {
        Accum::F32
    }
}

/// One spec, shape and affine combination: values and every gradient. Returns the worst
/// relative difference.
fn check(spec: &NormSpec, dt: DType, shape: &[usize], transposed: bool, weight: bool, bias: bool, seed: u64) -> f64 {
    let n = *shape.last().unwrap();
    let len: usize = shape.iter().product();
    let mut rng = Rng::new(seed);
    let dev = Device::Cpu;
    let var = |v: Vec<f64>, s: &[usize]| Var::from_tensor(&Tensor::from_vec(v, s, &dev).unwrap().to_dtype(dt).unwrap()).unwrap();
    // The strided case stores x transposed and normalises its transpose's rows.
    let stored: Vec<usize> = if transposed { vec![n, len / n] } else { shape.to_vec() };
    let xv = var(rng.vec(len, 1.5).iter().map(|v| v + 0.3).collect(), &stored);
    let x = if transposed { xv.t().unwrap() } else { xv.as_tensor().clone() };
    let wv = var(rng.vec(n, 1.0), &[n]);
    let bv = var(rng.vec(n, 1.0), &[n]);
    let g = Tensor::from_vec(rng.vec(len, 1.0), x.dims(), &dev).unwrap();
    let accum = accum_of(dt);
    let tel = Telemetry::new();
    let run = |path: OpPath| {
        let y = norm_on(path, &x, spec, accum, weight.then_some(wv.as_tensor()), bias.then_some(bv.as_tensor()), Some(&tel)).unwrap();
        let grads = (y.to_dtype(DType::F64).unwrap() * &g).unwrap().sum_all().unwrap().backward().unwrap();
        let mut out = vec![("y", vals(&y))];
        out.push(("dx", vals(grads.get(&xv).unwrap())));
        if weight {
            out.push(("dweight", vals(grads.get(&wv).unwrap())));
        }
        if bias {
            out.push(("dbias", vals(grads.get(&bv).unwrap())));
        }
        (y.dtype(), out)
    };
    let (dt_op, op) = run(OpPath::Fused);
    let (dt_c, composed) = run(OpPath::Composed);
    assert_eq!(dt_op, dt_c);
    let mut worst = 0f64;
    for ((what, a), (_, b)) in op.iter().zip(&composed) {
        let e = rel(b, a);
        assert!(e <= tol(dt), "{spec:?} {dt:?} {shape:?} transposed={transposed} w={weight} b={bias}: {what} differs by {e:e} (relative to the max)");
        worst = worst.max(e);
    }
    worst
}

#[test]
fn composed_norms_match_the_op() {
    for dt in [DType::F64, DType::F32, DType::BF16] {
        let mut worst = vec![];
        for spec in specs() {
            let mut w = 0f64;
            for (i, shape) in [vec![6, 7], vec![2, 3, 33]].iter().enumerate() {
                for (weight, bias) in [(false, false), (true, false), (true, true)] {
                    w = w.max(check(&spec, dt, shape, false, weight, bias, 11 + i as u64));
                }
            }
            w = w.max(check(&spec, dt, &[9, 17], true, true, false, 5));
            worst.push(format!("{}{} {w:.1e}", spec.kind.name(), if spec.centred { "(c)" } else { "" }));
        }
        println!("{dt:?}: worst relative difference per spec: {}", worst.join(", "));
    }
}

/// The models' top-k at a width where the k largest are chosen among many (the composed path
/// sorts the row): k = 1, k = n / 2 and k = n, uncentred, as at the norm sites.
#[test]
fn composed_top_k_selects_the_same_elements() {
    for k in [1, 24, 48] {
        let spec = NormSpec::new(NormKind::TopK { k }, 1e-6).with_centred(false);
        for dt in [DType::F64, DType::F32] {
            check(&spec, dt, &[5, 48], false, true, false, 3 + k as u64);
        }
    }
}

/// What the composed path refuses, with messages naming the accumulator and the device.
#[test]
fn pure_accumulators_are_refused_on_the_composed_path() {
    let x = Tensor::ones((2, 8), DType::BF16, &Device::Cpu).unwrap();
    for accum in [Accum::PureBf16, Accum::PureF16] {
        let e = norm_on(OpPath::Composed, &x, &NormSpec::rms(1e-6), accum, None, None, None).unwrap_err().to_string();
        assert!(e.contains(accum.name()) && e.contains("not supported on cpu"), "{e}");
        // The op itself (Auto on the CPU) runs them.
        norm_on(OpPath::Auto, &x, &NormSpec::rms(1e-6), accum, None, None, None).unwrap();
    }
}
