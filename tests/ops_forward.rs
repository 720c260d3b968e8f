//! The candle forward equals `normlab_norms::row::forward` bitwise, for every kind, dtype,
//! shape and magnitude; strided inputs equal their contiguous copies; telemetry counts.

use crate::ops_common;

use candle_core::{DType, Device, Module, Result, Tensor, WithDType};
use normlab::norms::{Accum, Element, NormKind, NormSpec};
use normlab::ops::{norm, LayerNorm, RmsNorm, Telemetry};
use ops_common::{assert_all, bitwise, cast, ref_forward, specs, tensor, values, Rng};
use proptest::prelude::*;

/// Special content put into the first row.
#[derive(Clone, Copy, Debug)]
enum Special {
    None,
    Zeros,
    Nan,
    Inf,
}

#[derive(Clone, Debug)]
struct Case {
    spec: NormSpec,
    rows: usize,
    n: usize,
    rank3: bool,
    scale: f64,
    special: Special,
    weight: bool,
    bias: bool,
    seed: u64,
}

/// A spec valid for width n (Top-k's k clamped to n).
fn fit(spec: NormSpec, n: usize) -> NormSpec {
    match spec.kind {
        NormKind::TopK { k } if k > n => NormSpec { kind: NormKind::TopK { k: n }, ..spec },
        _ => spec,
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        0..specs().len(),
        1usize..5,
        prop::sample::select(vec![1usize, 2, 3, 7, 8, 31, 33, 100, 257]),
        any::<bool>(),
        prop::sample::select(vec![1e-4, 1.0, 300.0, 2e4]),
        prop::sample::select(vec![Special::None, Special::None, Special::Zeros, Special::Nan, Special::Inf]),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(s, rows, n, rank3, scale, special, weight, bias, seed)| Case {
            spec: fit(specs()[s], n),
            rows,
            n,
            rank3,
            scale,
            special,
            weight,
            bias,
            seed,
        })
}

/// Run one case in dtype T through the candle op and the reference; compare bitwise.
fn check<T: Element + WithDType>(c: &Case, accum: Accum) -> Result<()> {
    let mut rng = Rng::new(c.seed);
    let mut xf = rng.vec(c.rows * c.n, c.scale);
    match c.special {
        Special::None => {}
        Special::Zeros => xf[..c.n].iter_mut().for_each(|v| *v = 0.0),
        Special::Nan => xf[c.n / 2] = f64::NAN,
        Special::Inf => xf[0] = f64::NEG_INFINITY,
    }
    let x: Vec<T> = cast(&xf);
    let w: Vec<T> = cast(&rng.vec(c.n, 1.0));
    let b: Vec<T> = cast(&rng.vec(c.n, 1.0));
    let shape: Vec<usize> = if c.rank3 { vec![c.rows, 1, c.n] } else { vec![c.rows, c.n] };
    let xt = tensor(&x, &shape)?;
    let wt = tensor(&w, &[c.n])?;
    let bt = tensor(&b, &[c.n])?;
    if c.spec.scale_constant(c.n).is_err() {
        // No constant for this width (the authors' c(n) needs n >= 2): the op must say so.
        assert!(norm(&xt, &c.spec, accum, None, None, None).is_err(), "{c:?}");
        return Ok(());
    }
    let tel = Telemetry::new();
    let y = norm(&xt, &c.spec, accum, c.weight.then_some(&wt), c.bias.then_some(&bt), Some(&tel))?;
    assert_eq!(y.dims(), &shape[..]);
    assert_eq!(y.dtype(), <T as WithDType>::DTYPE);
    let (want, _, counters) = ref_forward(&c.spec, accum, &x, c.n, c.weight.then_some(&w[..]), c.bias.then_some(&b[..]));
    assert_all(&format!("{c:?} {:?}", <T as WithDType>::DTYPE), &values::<T>(&y)?, &want, bitwise);
    let snap = tel.snapshot();
    assert_eq!(snap.forward, counters);
    assert_eq!(snap.forward_calls, 1);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn forward_equals_reference_f32(c in case()) {
        check::<f32>(&c, Accum::F32).unwrap();
    }

    #[test]
    fn forward_equals_reference_f16(c in case()) {
        check::<half::f16>(&c, Accum::F32).unwrap();
    }

    #[test]
    fn forward_equals_reference_bf16(c in case()) {
        check::<half::bf16>(&c, Accum::F32).unwrap();
    }
}

#[test]
fn forward_equals_reference_f64_and_pure_half_accumulators() -> Result<()> {
    for (i, spec) in specs().into_iter().enumerate() {
        let c = Case { spec, rows: 3, n: 19, rank3: false, scale: 2.0, special: Special::None, weight: true, bias: true, seed: i as u64 };
        check::<f64>(&c, Accum::F64)?;
        check::<half::f16>(&c, Accum::PureF16)?;
        check::<half::bf16>(&c, Accum::PureBf16)?;
    }
    Ok(())
}

/// Values of a tensor as f64.
fn f64s(t: &Tensor) -> Result<Vec<f64>> {
    values::<f64>(&t.to_dtype(DType::F64)?)
}

#[test]
fn strided_inputs_equal_their_contiguous_copy() -> Result<()> {
    let dev = Device::Cpu;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for spec in specs() {
            let base = Tensor::randn(0f32, 1., (9, 5), &dev)?.to_dtype(dtype)?;
            let w = Tensor::randn(0f32, 1., 12, &dev)?.to_dtype(dtype)?;
            let wn = w.narrow(0, 3, 5)?; // contiguous at an offset
            // Transpose: [5, 9], last dim strided.
            let xt = base.t()?;
            assert!(!xt.is_contiguous());
            let a = norm(&xt, &fit(spec, 9), Accum::F32, None, None, None)?;
            let b = norm(&xt.contiguous()?, &fit(spec, 9), Accum::F32, None, None, None)?;
            assert_eq!(f64s(&a)?.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), f64s(&b)?.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            // Narrow of the last dim (rows strided), narrow of the rows (offset), strided weight.
            for x in [base.narrow(1, 0, 5)?.narrow(0, 2, 6)?, base.narrow(0, 1, 7)?] {
                let a = norm(&x, &spec, Accum::F32, Some(&wn), Some(&wn), None)?;
                let b = norm(&x.contiguous()?, &spec, Accum::F32, Some(&wn.contiguous()?), Some(&wn.contiguous()?), None)?;
                assert_eq!(f64s(&a)?, f64s(&b)?, "{spec:?} {dtype:?}");
            }
            let x = Tensor::randn(0f32, 1., (2, 4, 5), &dev)?.to_dtype(dtype)?.narrow(2, 1, 3)?;
            assert!(!x.is_contiguous());
            let a = norm(&x, &fit(spec, 3), Accum::F32, None, None, None)?;
            let b = norm(&x.contiguous()?, &fit(spec, 3), Accum::F32, None, None, None)?;
            assert_eq!(f64s(&a)?, f64s(&b)?);
        }
    }
    Ok(())
}

#[test]
fn telemetry_counts_nonfinite_input_and_pure_f16_overflow() -> Result<()> {
    let dev = Device::Cpu;
    let tel = Telemetry::new();
    let m = RmsNorm::new(4, 1e-6).with_telemetry(tel.clone());
    let x = Tensor::new(&[[1f32, f32::NAN, 2., 3.], [1., 2., 3., 4.]], &dev)?;
    let y = m.forward(&x)?;
    let y = values::<f32>(&y)?;
    assert!(y[..4].iter().all(|v| v.is_nan()) && y[4..].iter().all(|v| v.is_finite()));
    let s = tel.take();
    assert_eq!((s.forward.nonfinite_in, s.forward.nonfinite_out, s.forward_calls), (1, 4, 1));
    assert!(tel.snapshot().forward.is_clean() && tel.snapshot().forward_calls == 0, "take resets");

    // 300^2 = 90000 overflows f16: pure-f16 accumulation counts it, f32 accumulation does not.
    let x = Tensor::new(&[[300f32, 300., 300., 300.]], &dev)?.to_dtype(DType::F16)?;
    let pure = RmsNorm::new(4, 1e-6).with_accum(Accum::PureF16);
    pure.forward(&x)?;
    assert_eq!(pure.counters().forward.acc_overflow, 1);
    let wide = RmsNorm::new(4, 1e-6);
    let y = wide.forward(&x)?;
    assert!(wide.counters().is_clean());
    assert_eq!(values::<half::f16>(&y)?, vec![half::f16::ONE; 4]);
    Ok(())
}

#[test]
fn module_shares_telemetry_and_handles_rank_one() -> Result<()> {
    let tel = Telemetry::new();
    let a = LayerNorm::new(3, 1e-5).with_telemetry(tel.clone());
    let b = RmsNorm::new(3, 1e-5).with_telemetry(tel.clone());
    let x = Tensor::new(&[1f32, 2., 4.], &Device::Cpu)?;
    let y = b.forward(&a.forward(&x)?)?;
    assert_eq!(y.dims(), &[3]);
    assert_eq!(tel.snapshot().forward_calls, 2);
    Ok(())
}
