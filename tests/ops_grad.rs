//! candle autograd through the ops equals the analytic gradients of `row::backward`, for x,
//! weight and bias, every kind and dtype; f64 finite differences agree; gradients flow back
//! through strided views; statistics are per call.

use crate::ops_common;

use candle_core::{DType, Device, Module, Result, Tensor, Var, WithDType};
use normlab::norms::{Accum, Element, NormKind, NormSpec};
use normlab::ops::{norm, L1Norm, LayerNorm, Norm, RmsNorm, Telemetry};
use ops_common::*;

fn fit(spec: NormSpec, n: usize) -> NormSpec {
    match spec.kind {
        NormKind::TopK { k } if k > n => NormSpec { kind: NormKind::TopK { k: n }, ..spec },
        _ => spec,
    }
}

/// `loss = sum(norm(x) * g)` by autograd, against `row::backward` with dy = g.
fn check_autograd<T: Element + WithDType>(spec: &NormSpec, shape: &[usize], scale: f64, weight: bool, bias: bool, seed: u64) -> Result<()> {
    let n = *shape.last().unwrap();
    let spec = fit(*spec, n);
    let len: usize = shape.iter().product();
    let mut rng = Rng::new(seed);
    let mut xf = rng.vec(len, scale);
    if scale.is_nan() {
        // A non-finite row: NaN gradients, propagated identically.
        xf = rng.vec(len, 1.0);
        xf[0] = f64::NAN;
    }
    let x: Vec<T> = cast(&xf);
    let w: Vec<T> = cast(&rng.vec(n, 1.0));
    let b: Vec<T> = cast(&rng.vec(n, 1.0));
    let g: Vec<T> = cast(&rng.vec(len, 1.0));
    let xv = Var::from_tensor(&tensor(&x, shape)?)?;
    let wv = Var::from_tensor(&tensor(&w, &[n])?)?;
    let bv = Var::from_tensor(&tensor(&b, &[n])?)?;
    let gt = tensor(&g, shape)?;
    if spec.scale_constant(n).is_err() {
        // No constant for this width (the authors' c(n) needs n >= 2): the op must say so.
        assert!(norm(&xv, &spec, Accum::F32, None, None, None).is_err(), "{spec:?} n = {n}");
        return Ok(());
    }
    let tel = Telemetry::new();
    let y = norm(&xv, &spec, Accum::F32, weight.then_some(&*wv), bias.then_some(&*bv), Some(&tel))?;
    let grads = (y * &gt)?.sum_all()?.backward()?;
    let (dx, dw, db) = ref_backward(&spec, Accum::F32, &x, &g, n, weight.then_some(&w[..]), weight, bias);
    let what = format!("{spec:?} {:?} {shape:?} scale={scale} w={weight} b={bias}", <T as WithDType>::DTYPE);
    let got = |v: &Var| -> Result<Vec<T>> { values::<T>(grads.get(v).unwrap_or_else(|| panic!("{what}: no gradient"))) };
    assert_all(&format!("dx {what}"), &got(&xv)?, &dx, same);
    if weight {
        assert_all(&format!("dweight {what}"), &got(&wv)?, &dw, same);
    }
    if bias {
        assert_all(&format!("dbias {what}"), &got(&bv)?, &db, same);
    }
    let s = tel.snapshot();
    assert_eq!((s.forward_calls, s.backward_calls), (1, 1), "{what}");
    Ok(())
}

#[test]
fn autograd_equals_reference_backward_every_kind_and_dtype() -> Result<()> {
    let mut seed = 0;
    for spec in specs() {
        for shape in [&[5usize, 33][..], &[2, 3, 8], &[1, 1], &[4, 1, 100]] {
            for (weight, bias) in [(true, true), (true, false), (false, true), (false, false)] {
                for scale in [3.0, 1e-3, 1e4, f64::NAN] {
                    seed += 1;
                    check_autograd::<f32>(&spec, shape, scale, weight, bias, seed)?;
                    check_autograd::<half::f16>(&spec, shape, scale, weight, bias, seed)?;
                    check_autograd::<half::bf16>(&spec, shape, scale, weight, bias, seed)?;
                }
            }
        }
    }
    Ok(())
}

/// loss(x, w, b) = sum(norm(x) * g) in f64 through the candle op.
fn loss(spec: &NormSpec, x: &[f64], w: &[f64], b: &[f64], g: &Tensor, n: usize) -> Result<f64> {
    let rows = x.len() / n;
    let y = norm(&tensor(x, &[rows, n])?, spec, Accum::F64, Some(&tensor(w, &[n])?), Some(&tensor(b, &[n])?), None)?;
    (y * g)?.sum_all()?.to_scalar::<f64>()
}

#[test]
fn finite_differences_f64_every_kind() -> Result<()> {
    let (rows, n) = (3, 7);
    for (i, spec) in specs().into_iter().enumerate() {
        let mut rng = Rng::new(100 + i as u64);
        let x = rng.vec(rows * n, 2.0);
        let w = rng.vec(n, 1.0);
        let b = rng.vec(n, 1.0);
        let g = tensor(&rng.vec(rows * n, 1.0), &[rows, n])?;
        let xv = Var::from_tensor(&tensor(&x, &[rows, n])?)?;
        let wv = Var::from_tensor(&tensor(&w, &[n])?)?;
        let bv = Var::from_tensor(&tensor(&b, &[n])?)?;
        let y = norm(&xv, &spec, Accum::F64, Some(&wv), Some(&bv), None)?;
        let grads = (y * &g)?.sum_all()?.backward()?;
        let analytic = [&xv, &wv, &bv].map(|v| values::<f64>(grads.get(v).expect("gradient")).unwrap());
        for (which, a) in analytic.iter().enumerate() {
            for j in 0..a.len() {
                let (mut xp, mut wp, mut bp) = (x.clone(), w.clone(), b.clone());
                let (mut xm, mut wm, mut bm) = (x.clone(), w.clone(), b.clone());
                let (p, m) = match which {
                    0 => (&mut xp[j], &mut xm[j]),
                    1 => (&mut wp[j], &mut wm[j]),
                    _ => (&mut bp[j], &mut bm[j]),
                };
                let h = 1e-6 * p.abs().max(1.0);
                *p += h;
                *m -= h;
                let fd = (loss(&spec, &xp, &wp, &bp, &g, n)? - loss(&spec, &xm, &wm, &bm, &g, n)?) / (2.0 * h);
                let err = (fd - a[j]).abs();
                assert!(err <= 1e-6 * (1.0 + a[j].abs()), "{spec:?} arg {which}[{j}]: autograd {}, finite difference {fd}", a[j]);
            }
        }
    }
    Ok(())
}

#[test]
fn gradients_flow_back_through_strided_views() -> Result<()> {
    let dev = Device::Cpu;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for spec in specs() {
            let base = Var::from_tensor(&Tensor::randn(0f32, 1., (6, 4), &dev)?.to_dtype(dtype)?)?;
            let wbig = Var::from_tensor(&Tensor::randn(0f32, 1., 9, &dev)?.to_dtype(dtype)?)?;
            let g = Tensor::randn(0f32, 1., (4, 6), &dev)?.to_dtype(dtype)?;
            let spec = fit(spec, 6);
            // Strided: x = base^T (last dim strided), weight = a narrow of a longer vector.
            let y = norm(&base.t()?, &spec, Accum::F32, Some(&wbig.narrow(0, 2, 6)?), None, None)?;
            let gs = (y * &g)?.sum_all()?.backward()?;
            // Contiguous copies as fresh leaves.
            let xc = Var::from_tensor(&base.t()?.contiguous()?)?;
            let wc = Var::from_tensor(&wbig.narrow(0, 2, 6)?.contiguous()?)?;
            let y = norm(&xc, &spec, Accum::F32, Some(&wc), None, None)?;
            let gc = (y * &g)?.sum_all()?.backward()?;
            let a = gs.get(&base).expect("dx").t()?.contiguous()?.to_dtype(DType::F64)?;
            let b = gc.get(&xc).expect("dx").to_dtype(DType::F64)?;
            assert_eq!(values::<f64>(&a)?, values::<f64>(&b)?, "dx {spec:?} {dtype:?}");
            let a = gs.get(&wbig).expect("dw").narrow(0, 2, 6)?.to_dtype(DType::F64)?;
            let b = gc.get(&wc).expect("dw").to_dtype(DType::F64)?;
            assert_eq!(values::<f64>(&a)?, values::<f64>(&b)?, "dw {spec:?} {dtype:?}");
            let outside = values::<f64>(&gs.get(&wbig).unwrap().to_dtype(DType::F64)?)?;
            assert!(outside[..2].iter().chain(&outside[8..]).all(|v| *v == 0.0));
        }
    }
    Ok(())
}

#[test]
fn a_module_called_twice_keeps_each_calls_statistics() -> Result<()> {
    // Two calls of the same module in one graph: each backward must use its own forward's stats.
    let m = L1Norm::new(5, 1e-5).with_weight(&Tensor::new(&[1f32, 2., 3., 4., 5.], &Device::Cpu)?);
    let mut rng = Rng::new(7);
    let x1: Vec<f32> = cast(&rng.vec(10, 1.0));
    let x2: Vec<f32> = cast(&rng.vec(10, 50.0));
    let (v1, v2) = (Var::from_tensor(&tensor(&x1, &[2, 5])?)?, Var::from_tensor(&tensor(&x2, &[2, 5])?)?);
    let loss = ((m.forward(&v1)?.sqr()?.sum_all()? * 1.0)? + m.forward(&v2)?.sum_all()?)?;
    let grads = loss.backward()?;
    for (v, x) in [(&v1, &x1), (&v2, &x2)] {
        let y = m.forward(&tensor(x, &[2, 5])?)?;
        let dy: Vec<f32> = if std::ptr::eq(v, &v1) { values::<f32>(&(y * 2.0)?)? } else { vec![1.0; 10] };
        let w = values::<f32>(m.weight().unwrap())?;
        let (dx, _, _) = ref_backward(m.spec(), Accum::F32, x, &dy, 5, Some(&w), false, false);
        assert_all("dx", &values::<f32>(grads.get(v).unwrap())?, &dx, same);
    }
    Ok(())
}

#[test]
fn gradients_match_candle_nn_differentiable_composites() -> Result<()> {
    // An independent implementation: candle-nn's slow (composite, differentiable) norms.
    let dev = Device::Cpu;
    let x = Var::from_tensor(&Tensor::randn(0f32, 2., (3, 16), &dev)?)?;
    let w = Var::from_tensor(&Tensor::randn(1f32, 0.1, 16, &dev)?)?;
    let b = Var::from_tensor(&Tensor::randn(0f32, 0.1, 16, &dev)?)?;
    let g = Tensor::randn(0f32, 1., (3, 16), &dev)?;
    let ours = |m: &Norm| -> Result<_> { (m.forward(&x)? * &g)?.sum_all()?.backward() };
    let theirs = |y: Tensor| -> Result<_> { (y * &g)?.sum_all()?.backward() };
    let cases = [
        (ours(&RmsNorm::new(16, 1e-5).with_weight(&w).into_inner())?, theirs(candle_nn::ops::rms_norm_slow(&x, &w, 1e-5)?)?, false),
        (
            ours(&LayerNorm::new(16, 1e-5).with_weight(&w).with_bias(&b).into_inner())?,
            theirs(candle_nn::ops::layer_norm_slow(&x, &w, &b, 1e-5)?)?,
            true,
        ),
    ];
    for (a, c, has_bias) in cases {
        let vars: Vec<&Var> = if has_bias { vec![&x, &w, &b] } else { vec![&x, &w] };
        for v in vars {
            let d = (a.get(v).unwrap() - c.get(v).expect("candle-nn composite gradient"))?.abs()?.max_all()?.to_scalar::<f32>()?;
            let scale = c.get(v).unwrap().abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(d <= 1e-5 * scale.max(1.0), "max difference {d} (scale {scale})");
        }
    }
    Ok(())
}

#[test]
fn candle_nn_fused_rms_norm_stops_gradients_ours_does_not() -> Result<()> {
    // Documents the candle 0.11 behaviour this module exists for (candle issue #2168).
    let dev = Device::Cpu;
    let x = Var::from_tensor(&Tensor::randn(0f32, 1., (2, 8), &dev)?)?;
    let w = Var::ones(8, DType::F32, &dev)?;
    let fused = candle_nn::RmsNorm::new(w.as_tensor().clone(), 1e-5).forward(&x)?;
    let grads = fused.sum_all()?.backward()?;
    assert!(grads.get(&x).is_none(), "candle-nn's fused RmsNorm now propagates gradients: update the docs");
    let ours = RmsNorm::new(8, 1e-5).with_weight(&w).forward(&x)?;
    let grads = ours.sqr()?.sum_all()?.backward()?;
    assert!(grads.get(&x).is_some() && grads.get(&w).is_some());
    Ok(())
}
