//! The model's fused ops composed from candle primitives, for devices the custom ops cannot
//! run on.
//!
//! Why it exists: causal softmax attention (`attention.rs`) and the scale, LERP and SwiGLU of
//! `fused.rs` are candle custom ops with only a `cpu_fwd`, so on CUDA (or any non-CPU device)
//! every model would fail in its first forward. These are the same functions written with
//! candle's matmul, `exp`, max/sum reductions, broadcast arithmetic, `where_cond` and `silu`,
//! which candle implements with autograd on every device. The dispatch is in each op's own
//! entry point (`fused::{scale, lerp, swiglu}`, `attention::causal_attention`) by
//! [`crate::ops::OpPath::composed_on`]: the custom ops on a CPU device, this module elsewhere,
//! or everywhere with `OpPath::Composed` (the tests compare both paths on the CPU).
//!
//! Numerics. Like the custom ops, every function computes in f32 for f32/f16/bf16 tensors (f64
//! for f64): half inputs are cast up, computed, and the result cast back once, so the vector
//! gradients (`ds`, `dc_h`, `dc_x`, `dg`) are summed in f32 and rounded once, and the softmax
//! statistics are f32. Where it rounds more than the fused ops (differences of a few ulp of the
//! work dtype; the tests bound them):
//! - every candle op rounds its own result: the softmax is `exp(s - max)`, a sum, a reciprocal
//!   and a product (the fused op: the same steps, so the same roundings, but sequential sums);
//!   SwiGLU's `silu(z) = z / (1 + exp(-z))` then `u * silu(z)` (fused: `u * (z * sigmoid(z))`);
//! - the backward is candle's autograd of those expressions: the softmax gradient goes through
//!   the reciprocal and the sum (fused: `p * (dy - sum(dy p))` in one pass), each gradient
//!   of a broadcast product is rounded in the work dtype before being summed, and sums run in
//!   candle's order (fused: fixed blocks of rows).
//!
//! On a half dtype the up-cast's backward rounds each input's gradient into the half dtype once
//! (as the fused backward does); the roundings above all happen in f32 before it.
//!
//! Cost: more passes over the activations, and on half dtypes the f32 copies the backward keeps
//! (the reason the CPU path is fused: see `fused.rs`); the attention materialises several
//! `[B, H, T, T]` f32 tensors (scores, masked, exp, probabilities).

use candle_core::{DType, Result, Tensor, D};

use crate::model::attention::ScoreScale;
use crate::model::fused::Axis;

/// The dtype the ops compute in: f64 for f64, f32 otherwise.
fn work(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// `x * s` along `axis` (`s` 1-D; `First` needs a matrix, checked by the caller).
pub(crate) fn scale(x: &Tensor, s: &Tensor, axis: Axis) -> Result<Tensor> {
    let w = work(x.dtype());
    let s = s.to_dtype(w)?;
    let s = match axis {
        Axis::Last => s,
        Axis::First => s.reshape((s.elem_count(), 1))?,
    };
    x.to_dtype(w)?.broadcast_mul(&s)?.to_dtype(x.dtype())
}

/// `c_h * h + c_x * x` with per-feature coefficients over the last dimension.
pub(crate) fn lerp(h: &Tensor, x: &Tensor, c_h: &Tensor, c_x: &Tensor) -> Result<Tensor> {
    if h.dims() != x.dims() {
        candle_core::bail!("lerp: shapes {:?} and {:?} differ", h.dims(), x.dims());
    }
    let w = work(h.dtype());
    let a = h.to_dtype(w)?.broadcast_mul(&c_h.to_dtype(w)?)?;
    let b = x.to_dtype(w)?.broadcast_mul(&c_x.to_dtype(w)?)?;
    (a + b)?.to_dtype(h.dtype())
}

/// `u * SiLU(z)` on `uz = [u | z]` (last dimension `2r`).
pub(crate) fn swiglu(uz: &Tensor) -> Result<Tensor> {
    let two_r = *uz.dims().last().ok_or_else(|| candle_core::Error::msg("swiglu: scalar input"))?;
    if two_r % 2 != 0 {
        candle_core::bail!("swiglu: the last dimension {two_r} of {:?} is odd", uz.dims());
    }
    let r = two_r / 2;
    let w = work(uz.dtype());
    let uzw = uz.to_dtype(w)?;
    let u = uzw.narrow(D::Minus1, 0, r)?;
    let z = uzw.narrow(D::Minus1, r, r)?;
    (u * z.silu()?)?.to_dtype(uz.dtype())
}

/// Causal attention of `q`, `k`, `v` `[B, T, H, d_h]`: `softmax(scale * q k^T)` over the keys
/// `s <= t`, in f32 (f64 on the f64 path), times `v`; returns `[B, T, H d_h]`. The mask is a
/// `where_cond` to `-inf` (`exp` gives exactly 0 there, and no gradient reaches the masked
/// scores); the row maximum is subtracted detached (the softmax does not depend on it).
pub(crate) fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: ScoreScale) -> Result<Tensor> {
    let (b, t, h, d_h) = q.dims4()?;
    let dtype = q.dtype();
    let stats = work(dtype);
    let dev = q.device();
    let q = q.transpose(1, 2)?.contiguous()?;
    let k = k.transpose(1, 2)?.contiguous()?;
    let v = v.transpose(1, 2)?.contiguous()?;
    let scores = q.matmul(&k.t()?)?.to_dtype(stats)?;
    let scaled = match scale {
        ScoreScale::Const(c) => scores.affine(c, 0.0)?,
        ScoreScale::PerHead(g) => {
            if g.dims() != [h] {
                candle_core::bail!("causal softmax: per-head scale of shape {:?} for {h} heads", g.dims());
            }
            scores.broadcast_mul(&g.to_dtype(stats)?.reshape((1, h, 1, 1))?)?
        }
    };
    let shape = scaled.shape().clone();
    // keep[t, s] = (t >= s): query position t sees keys 0..=t.
    let pos = Tensor::arange(0u32, t as u32, dev)?;
    let keep = pos.reshape((t, 1))?.broadcast_ge(&pos.reshape((1, t))?)?.broadcast_as(shape.clone())?;
    let neg = Tensor::new(f64::NEG_INFINITY, dev)?.to_dtype(stats)?.broadcast_as(shape)?;
    let masked = keep.where_cond(&scaled, &neg)?;
    let max = masked.max_keepdim(D::Minus1)?.detach();
    let e = masked.broadcast_sub(&max)?.exp()?;
    let p = e.broadcast_mul(&e.sum_keepdim(D::Minus1)?.recip()?)?;
    p.to_dtype(dtype)?.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h * d_h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::attention::causal_attention as attention;
    use crate::model::fused;
    use crate::ops::OpPath;
    use candle_core::{Device, Var};

    fn vals(t: &Tensor) -> Vec<f64> {
        t.flatten_all().unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap()
    }

    fn var(v: Vec<f64>, shape: &[usize], dt: DType) -> Var {
        Var::from_tensor(&Tensor::from_vec(v, shape, &Device::Cpu).unwrap().to_dtype(dt).unwrap()).unwrap()
    }

    fn wave(n: usize, a: f64, b: f64, amp: f64) -> Vec<f64> {
        (0..n).map(|i| amp * (a * i as f64 + b).sin()).collect()
    }

    /// `max |a - b| / max |b|` (0 when both are 0).
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

    /// The tolerance of a composed-vs-fused comparison, relative to the tensor's max: a few ulp
    /// of the work dtype (f64: 1e-13; f32: 1e-5, the ops differ in sum order and in the
    /// softmax's backward formula, each a few f32 ulp), and one ulp of the half dtype where the
    /// two round an f32 value that lies near a rounding boundary to its two neighbours.
    fn tol(dt: DType) -> f64 {
        match dt {
            DType::F64 => 1e-13,
            DType::F32 => 1e-5,
            _ => 8e-3,
        }
    }

    /// Values and every gradient of `f` on both paths; `inputs` are the tracked arguments,
    /// `w` weights the output into a scalar loss. Returns the worst relative difference.
    fn compare(what: &str, dt: DType, inputs: &[(&str, &Var)], w: &Tensor, f: impl Fn(OpPath) -> Tensor) -> f64 {
        let (a, b) = (f(OpPath::Fused), f(OpPath::Composed));
        assert_eq!(a.dims(), b.dims(), "{what}");
        assert_eq!(a.dtype(), b.dtype(), "{what}");
        let mut worst = rel(&vals(&b), &vals(&a));
        assert!(worst <= tol(dt), "{what} {dt:?}: values differ by {worst:e} (relative to the max)");
        let ga = (a.to_dtype(DType::F64).unwrap() * w).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (b.to_dtype(DType::F64).unwrap() * w).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, v) in inputs {
            let (x, y) = (ga.get(v).unwrap_or_else(|| panic!("{what}: fused, no gradient for {name}")), gb.get(v).unwrap_or_else(|| panic!("{what}: composed, no gradient for {name}")));
            assert_eq!(x.dtype(), y.dtype(), "{what} d{name}");
            let e = rel(&vals(y), &vals(x));
            assert!(e <= tol(dt), "{what} {dt:?}: d{name} differs by {e:e} (relative to the max)");
            worst = worst.max(e);
        }
        worst
    }

    /// Causal attention, both score scales, against the fused op: output and the gradients of
    /// q, k, v and the per-head gain; odd sizes (T 7, 3 heads, d_h 6), f64, f32 and bf16.
    #[test]
    fn attention_matches_the_fused_op() {
        let (b, t, h, d_h) = (2, 7, 3, 6);
        let n = b * t * h * d_h;
        for dt in [DType::F64, DType::F32, DType::BF16] {
            let q = var(wave(n, 0.37, 0.1, 1.5), &[b, t, h, d_h], dt);
            let k = var(wave(n, 0.71, 0.5, 1.5), &[b, t, h, d_h], dt);
            let v = var(wave(n, 0.23, 0.9, 1.0), &[b, t, h, d_h], dt);
            let g = var(vec![0.8, 2.5, -1.3], &[h], dt);
            let w = Tensor::from_vec(wave(b * t * h * d_h, 0.13, 0.7, 1.0), (b, t, h * d_h), &Device::Cpu).unwrap();
            let c = compare("attention const", dt, &[("q", &q), ("k", &k), ("v", &v)], &w, |ops| attention(&q, &k, &v, ScoreScale::Const(0.7), ops).unwrap());
            let p = compare("attention per head", dt, &[("q", &q), ("k", &k), ("v", &v), ("g", &g)], &w, |ops| attention(&q, &k, &v, ScoreScale::PerHead(&g), ops).unwrap());
            println!("attention {dt:?}: worst relative difference {c:.2e} (constant scale), {p:.2e} (per-head gain)");
        }
    }

    /// Scale (both axes, strided input), LERP and SwiGLU (odd r) against the fused ops.
    #[test]
    fn elementwise_ops_match_the_fused_ops() {
        let (rows, n, r) = (67, 5, 7);
        for dt in [DType::F64, DType::F32, DType::BF16] {
            let m = var(wave(n * rows, 0.5, 0.3, 2.0), &[n, rows], dt);
            let mt = m.t().unwrap();
            let s = var(wave(n, 2.1, 0.4, 1.0), &[n], dt);
            let sr = var(wave(rows, 1.7, 0.9, 1.0), &[rows], dt);
            let w = Tensor::from_vec(wave(rows * n, 0.29, 0.0, 1.0), (rows, n), &Device::Cpu).unwrap();
            let a = compare("scale last", dt, &[("x", &m), ("s", &s)], &w, |ops| fused::scale(&mt, &s, fused::Axis::Last, ops).unwrap());
            let b = compare("scale first", dt, &[("x", &m), ("s", &sr)], &w, |ops| fused::scale(&mt, &sr, fused::Axis::First, ops).unwrap());

            let hh = var(wave(3 * rows * n, 0.37, 0.1, 1.0), &[3, rows, n], dt);
            let xx = var(wave(3 * rows * n, 0.71, 0.5, 1.0), &[3, rows, n], dt);
            let ch = var(wave(n, 1.3, 0.2, 1.0), &[n], dt);
            let cx = var(wave(n, 0.9, 1.1, 1.0), &[n], dt);
            let w3 = Tensor::from_vec(wave(3 * rows * n, 0.13, 0.7, 1.0), (3, rows, n), &Device::Cpu).unwrap();
            let l = compare("lerp", dt, &[("h", &hh), ("x", &xx), ("c_h", &ch), ("c_x", &cx)], &w3, |ops| fused::lerp(&hh, &xx, &ch, &cx, ops).unwrap());

            let uz = var(wave(3 * rows * 2 * r, 0.43, 0.3, 3.0), &[3, rows, 2 * r], dt);
            let wr = Tensor::from_vec(wave(3 * rows * r, 0.31, 0.2, 1.0), (3, rows, r), &Device::Cpu).unwrap();
            let g = compare("swiglu", dt, &[("uz", &uz)], &wr, |ops| fused::swiglu(&uz, ops).unwrap());
            println!("{dt:?}: worst relative difference scale {a:.2e} / {b:.2e}, lerp {l:.2e}, swiglu {g:.2e}");
        }
    }

    /// The composed attention really masks and scales: a future key changes nothing, the
    /// score scale changes the output (the checks a planted bug in either would fail).
    #[test]
    fn composed_attention_is_causal_and_scaled() {
        let (b, t, h, d_h) = (1, 5, 2, 4);
        let n = b * t * h * d_h;
        let q = Tensor::from_vec(wave(n, 0.37, 0.1, 1.5), (b, t, h, d_h), &Device::Cpu).unwrap();
        let k = Tensor::from_vec(wave(n, 0.71, 0.5, 1.5), (b, t, h, d_h), &Device::Cpu).unwrap();
        let v = Tensor::from_vec(wave(n, 0.23, 0.9, 1.0), (b, t, h, d_h), &Device::Cpu).unwrap();
        let y = vals(&causal_attention(&q, &k, &v, ScoreScale::Const(0.5)).unwrap());
        // Change the last key and value: positions before it see the same output.
        let last = |x: &Tensor| Tensor::cat(&[x.narrow(1, 0, t - 1).unwrap(), x.narrow(1, t - 1, 1).unwrap().affine(3.0, 1.0).unwrap()], 1).unwrap();
        let y2 = vals(&causal_attention(&q, &last(&k), &last(&v), ScoreScale::Const(0.5)).unwrap());
        let row = h * d_h;
        assert_eq!(&y[..(t - 1) * row], &y2[..(t - 1) * row]);
        assert_ne!(&y[(t - 1) * row..], &y2[(t - 1) * row..]);
        let y3 = vals(&causal_attention(&q, &k, &v, ScoreScale::Const(2.0)).unwrap());
        assert!(rel(&y3, &y) > 1e-2);
        // Position 0 sees only itself: its output is v[0] whatever the scale.
        assert!(rel(&y3[..row], &vals(&v)[..row]) < 1e-6);
    }
}
