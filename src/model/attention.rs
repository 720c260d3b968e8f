//! Causal softmax attention with the softmax in f32 (or f64 when the model computes in f64).
//!
//! `scores = q k^T` per head, `p = softmax(scale * scores)` over the keys `s <= t` (the causal
//! mask and the score scale are applied inside the op, so neither a `-inf` mask tensor nor a
//! scaled copy of the scores is built), `y = p v`. The softmax is a custom op: forward with the
//! row maximum subtracted, in f32/f64, rows in parallel (each row is reduced sequentially, so the
//! result does not depend on the thread count); backward in one pass per row from the saved
//! output: `dz = p * (dy - sum(dy * p))`, `dscores = scale * dz`, and for a learnable per-head
//! scale `dscale_h = sum over the head's rows of sum(scores * dz)` (row sums added in row order).
//! The scale is either one constant or a learnable value per head (anGPT's g).
//! These ops have only a `cpu_fwd`: on other devices [`causal_attention`] runs the composed
//! form of the same softmax (`crate::model::composed`), chosen by its [`OpPath`] argument.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::ops::OpPath;

/// Softmax over the last dimension of `[.., H, T, T]` of `scale * x` with key positions `s > t`
/// masked out (probability 0). `Const` scales by one constant; `PerHead` (as a `CustomOp2`)
/// takes the scale of head `h` from a second argument `[H]`.
struct CausalSoftmax {
    scale: f64,
}

struct CausalSoftmaxPerHead;

/// The backward of either form: arguments `(x, p, dy)` and, per head, the scales.
struct CausalSoftmaxBwd {
    /// The scale of each head (one entry for a constant scale).
    scales: Vec<f64>,
    heads: usize,
    /// Also return `dscale` per head (appended after dx).
    want_dscale: bool,
}

/// Forward on rows of `t_k` keys; row `r` is query position `r % t_q` of head `(r / t_q) % heads`.
fn causal_softmax<T: num_traits_float::Float>(src: &[T], t_q: usize, t_k: usize, heads: usize, scales: &[T]) -> Vec<T> {
    let mut dst = vec![T::zero(); src.len()];
    dst.par_chunks_mut(t_k).zip(src.par_chunks(t_k)).enumerate().for_each(|(row, (d, s))| {
        // Query position t sees keys 0..=t (self-attention: t_q == t_k).
        let keep = (row % t_q + 1).min(t_k);
        let c = scales[if scales.len() == 1 { 0 } else { (row / t_q) % heads }];
        let mut max = T::neg_infinity();
        for (o, &v) in d[..keep].iter_mut().zip(&s[..keep]) {
            *o = v * c;
            if *o > max {
                max = *o;
            }
        }
        let mut sum = T::zero();
        for o in d[..keep].iter_mut() {
            *o = (*o - max).exp();
            sum = sum + *o;
        }
        let inv = T::one() / sum;
        d[..keep].iter_mut().for_each(|o| *o = *o * inv);
    });
    dst
}

/// Backward: `[dx (len) | dscale (heads, when wanted)]`.
fn causal_softmax_bwd<T: num_traits_float::Float>(x: &[T], p: &[T], dy: &[T], t_q: usize, t_k: usize, op: &CausalSoftmaxBwd) -> Vec<T> {
    let len = x.len();
    let mut out = vec![T::zero(); len + if op.want_dscale { op.heads } else { 0 }];
    let (dx, ds) = out.split_at_mut(len);
    let scales: Vec<T> = op.scales.iter().map(|&c| T::from_f64(c)).collect();
    // Per row: dx, and sum(x * dz) for the scale's gradient.
    let row_sums: Vec<T> = dx
        .par_chunks_mut(t_k)
        .zip(x.par_chunks(t_k).zip(p.par_chunks(t_k)).zip(dy.par_chunks(t_k)))
        .enumerate()
        .map(|(row, (d, ((xr, pr), gr)))| {
            let keep = (row % t_q + 1).min(t_k);
            let c = scales[if scales.len() == 1 { 0 } else { (row / t_q) % op.heads }];
            let mut dot = T::zero();
            for k in 0..keep {
                dot = dot + gr[k] * pr[k];
            }
            let mut acc = T::zero();
            for k in 0..keep {
                let dz = pr[k] * (gr[k] - dot);
                d[k] = c * dz;
                acc = acc + xr[k] * dz;
            }
            acc
        })
        .collect();
    if op.want_dscale {
        for (row, v) in row_sums.into_iter().enumerate() {
            let h = (row / t_q) % op.heads;
            ds[h] = ds[h] + v;
        }
    }
    out
}

/// The float operations the softmax needs, for f32 and f64 only.
mod num_traits_float {
    pub trait Float: Copy + PartialOrd + std::ops::Add<Output = Self> + std::ops::Sub<Output = Self> + std::ops::Mul<Output = Self> + std::ops::Div<Output = Self> + Send + Sync {
        fn zero() -> Self;
        fn one() -> Self;
        fn neg_infinity() -> Self;
        fn exp(self) -> Self;
        fn from_f64(v: f64) -> Self;
    }
    macro_rules! imp {
        ($t:ty) => {
            impl Float for $t {
                fn zero() -> Self {
                    0.0
                }
                fn one() -> Self {
                    1.0
                }
                fn neg_infinity() -> Self {
                    <$t>::NEG_INFINITY
                }
                fn exp(self) -> Self {
                    <$t>::exp(self)
                }
                fn from_f64(v: f64) -> Self {
                    v as $t
                }
            }
        };
    }
    imp!(f32);
    imp!(f64);
}

/// `(t_q, t_k, heads)` of a `[.., H, T, T]` layout, and its contiguous range.
fn dims(layout: &Layout, what: &str) -> Result<(usize, usize, usize, usize, usize)> {
    let d = layout.dims();
    if d.len() < 3 {
        candle_core::bail!("causal softmax: needs [.., H, T, T], got {d:?} ({what})");
    }
    let (o1, o2) = layout.contiguous_offsets().ok_or_else(|| candle_core::Error::msg(format!("causal softmax: {what} must be contiguous")))?;
    Ok((d[d.len() - 2], d[d.len() - 1], d[d.len() - 3], o1, o2))
}

fn forward(storage: &CpuStorage, layout: &Layout, scales: &[f64]) -> Result<(CpuStorage, Shape)> {
    let (t_q, t_k, heads, o1, o2) = dims(layout, "input")?;
    let out = match storage.dtype() {
        DType::F32 => {
            let sc: Vec<f32> = scales.iter().map(|&c| c as f32).collect();
            CpuStorage::F32(causal_softmax(&storage.as_slice::<f32>()?[o1..o2], t_q, t_k, heads, &sc))
        }
        DType::F64 => CpuStorage::F64(causal_softmax(&storage.as_slice::<f64>()?[o1..o2], t_q, t_k, heads, scales)),
        dt => candle_core::bail!("causal softmax: statistics run in f32 or f64, got {dt:?}"),
    };
    Ok((out, layout.shape().clone()))
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "normlab-causal-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        forward(storage, layout, &[self.scale])
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let heads = arg.dims()[arg.rank() - 3];
        let op = CausalSoftmaxBwd { scales: vec![self.scale], heads, want_dscale: false };
        Ok(Some(arg.apply_op3_no_bwd(res, &grad.contiguous()?, &op)?.reshape(arg.shape())?))
    }
}

impl CustomOp2 for CausalSoftmaxPerHead {
    fn name(&self) -> &'static str {
        "normlab-causal-softmax-per-head"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let heads = dims(l1, "input")?.2;
        let scales = head_scales(s2, l2, heads)?;
        forward(s1, l1, &scales)
    }

    fn bwd(&self, arg: &Tensor, g: &Tensor, res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let heads = arg.dims()[arg.rank() - 3];
        let scales = g.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        let want = g.track_op();
        let op = CausalSoftmaxBwd { scales, heads, want_dscale: want };
        let packed = arg.apply_op3_no_bwd(res, &grad.contiguous()?, &op)?;
        let len = arg.elem_count();
        let dx = packed.narrow(0, 0, len)?.reshape(arg.shape())?;
        let dg = if want { Some(packed.narrow(0, len, heads)?.to_dtype(g.dtype())?) } else { None };
        Ok((Some(dx), dg))
    }
}

/// The per-head scales `[H]` (f32 or f64) as f64.
fn head_scales(s: &CpuStorage, l: &Layout, heads: usize) -> Result<Vec<f64>> {
    if l.dims() != [heads] {
        candle_core::bail!("causal softmax: per-head scale of shape {:?} for {heads} heads", l.dims());
    }
    let (o1, o2) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::msg("causal softmax: scale must be contiguous"))?;
    Ok(match s.dtype() {
        DType::F32 => s.as_slice::<f32>()?[o1..o2].iter().map(|&v| v as f64).collect(),
        DType::F64 => s.as_slice::<f64>()?[o1..o2].to_vec(),
        dt => candle_core::bail!("causal softmax: scale in f32 or f64, got {dt:?}"),
    })
}

impl candle_core::CustomOp3 for CausalSoftmaxBwd {
    fn name(&self) -> &'static str {
        "normlab-causal-softmax-bwd"
    }

    /// Arguments: the scores x, the probabilities p, the output gradient dy (contiguous).
    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout, ps: &CpuStorage, pl: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (t_q, t_k, _, x1, x2) = dims(xl, "scores")?;
        let (_, _, _, p1, p2) = dims(pl, "probabilities")?;
        let (_, _, _, g1, g2) = dims(gl, "gradient")?;
        let len = x2 - x1;
        let out = match (xs.dtype(), ps.dtype(), gs.dtype()) {
            (DType::F32, DType::F32, DType::F32) => CpuStorage::F32(causal_softmax_bwd(
                &xs.as_slice::<f32>()?[x1..x2],
                &ps.as_slice::<f32>()?[p1..p2],
                &gs.as_slice::<f32>()?[g1..g2],
                t_q,
                t_k,
                self,
            )),
            (DType::F64, DType::F64, DType::F64) => CpuStorage::F64(causal_softmax_bwd(
                &xs.as_slice::<f64>()?[x1..x2],
                &ps.as_slice::<f64>()?[p1..p2],
                &gs.as_slice::<f64>()?[g1..g2],
                t_q,
                t_k,
                self,
            )),
            dts => candle_core::bail!("causal softmax backward: dtypes {dts:?} (f32 or f64, all the same)"),
        };
        Ok((out, Shape::from(len + if self.want_dscale { self.heads } else { 0 })))
    }
}

/// How the scores are scaled.
pub(crate) enum ScoreScale<'a> {
    /// One constant for every head.
    Const(f64),
    /// One value per head, a tensor `[H]` (learnable: anGPT's g).
    PerHead(&'a Tensor),
}

/// Causal attention of `q`, `k`, `v` `[B, T, H, d_h]` (compute dtype); returns `[B, T, H d_h]`.
/// Scores are formed in the compute dtype, then scaled, masked and normalised in f32 (f64 when
/// computing in f64); the probabilities are cast back for `p v`. The softmax is the custom op
/// above, or, where `ops` says so (any non-CPU device under `OpPath::Auto`), the same function
/// composed from candle ops (`crate::model::composed::causal_attention`).
pub(crate) fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: ScoreScale, ops: OpPath) -> Result<Tensor> {
    if ops.composed_on(&q.device().location()) {
        return crate::model::composed::causal_attention(q, k, v, scale);
    }
    let (b, t, h, d_h) = q.dims4()?;
    let dtype = q.dtype();
    let stats = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
    let q = q.transpose(1, 2)?.contiguous()?;
    let k = k.transpose(1, 2)?.contiguous()?;
    let v = v.transpose(1, 2)?.contiguous()?;
    let scores = q.matmul(&k.t()?)?.to_dtype(stats)?.contiguous()?;
    let p = match scale {
        ScoreScale::Const(c) => scores.apply_op1(CausalSoftmax { scale: c })?,
        ScoreScale::PerHead(g) => scores.apply_op2(&g.to_dtype(stats)?.contiguous()?, CausalSoftmaxPerHead)?,
    };
    p.to_dtype(dtype)?.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h * d_h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn causal_softmax_masks_the_future_and_sums_to_one() {
        let (t, h) = (6, 2);
        let v: Vec<f32> = (0..h * t * t).map(|i| (0.9 * i as f32).sin() * 3.0).collect();
        let x = Tensor::from_vec(v.clone(), (1, h, t, t), &Device::Cpu).unwrap();
        let g = Tensor::new(&[0.5f32, 2.0], &Device::Cpu).unwrap();
        for per_head in [false, true] {
            let p = if per_head { x.apply_op2(&g, CausalSoftmaxPerHead) } else { x.apply_op1(CausalSoftmax { scale: 0.5 }) };
            let p: Vec<f32> = p.unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for row in 0..h * t {
                let q = row % t;
                let c = if per_head && row >= t { 2.0 } else { 0.5 };
                let s: Vec<f32> = v[row * t..(row + 1) * t].iter().map(|a| a * c).collect();
                let m = s[..=q].iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let z: f64 = s[..=q].iter().map(|&a| ((a - m) as f64).exp()).sum();
                for k in 0..t {
                    let want = if k <= q { ((s[k] - m) as f64).exp() / z } else { 0.0 };
                    assert!((p[row * t + k] as f64 - want).abs() < 1e-6, "per head {per_head}: row {row} key {k}");
                }
            }
        }
    }

    /// Gradients of the scores and of the per-head scales against central differences (f64),
    /// for a constant and a per-head scale, two batches, three heads.
    #[test]
    fn causal_softmax_gradient_matches_finite_differences() {
        let (b, h, t) = (2, 3, 4);
        let n = b * h * t * t;
        let v: Vec<f64> = (0..n).map(|i| (1.7 * i as f64).cos() * 2.0).collect();
        let w: Vec<f64> = (0..n).map(|i| (0.3 * i as f64).sin()).collect();
        let wt = Tensor::from_vec(w, (b, h, t, t), &Device::Cpu).unwrap();
        let gv = vec![0.7f64, -1.3, 2.2];
        let f = |v: &[f64], g: &[f64], per_head: bool| -> f64 {
            let x = Tensor::from_vec(v.to_vec(), (b, h, t, t), &Device::Cpu).unwrap();
            let gt = Tensor::from_vec(g.to_vec(), h, &Device::Cpu).unwrap();
            let p = if per_head { x.apply_op2(&gt, CausalSoftmaxPerHead).unwrap() } else { x.apply_op1(CausalSoftmax { scale: 1.9 }).unwrap() };
            (p * &wt).unwrap().sum_all().unwrap().to_scalar().unwrap()
        };
        for per_head in [false, true] {
            let x = Var::from_tensor(&Tensor::from_vec(v.clone(), (b, h, t, t), &Device::Cpu).unwrap()).unwrap();
            let g = Var::from_tensor(&Tensor::from_vec(gv.clone(), h, &Device::Cpu).unwrap()).unwrap();
            let p = if per_head { x.apply_op2(&g, CausalSoftmaxPerHead).unwrap() } else { x.apply_op1(CausalSoftmax { scale: 1.9 }).unwrap() };
            let grads = (p * &wt).unwrap().sum_all().unwrap().backward().unwrap();
            let gx: Vec<f64> = grads.get(&x).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for i in (0..n).step_by(5) {
                let (mut a, mut c) = (v.clone(), v.clone());
                a[i] += 1e-6;
                c[i] -= 1e-6;
                let fd = (f(&a, &gv, per_head) - f(&c, &gv, per_head)) / 2e-6;
                assert!((fd - gx[i]).abs() < 1e-8, "per head {per_head}, x[{i}]: {fd} vs {}", gx[i]);
            }
            if per_head {
                let gg: Vec<f64> = grads.get(&g).unwrap().to_vec1().unwrap();
                for j in 0..h {
                    let (mut a, mut c) = (gv.clone(), gv.clone());
                    a[j] += 1e-6;
                    c[j] -= 1e-6;
                    let fd = (f(&v, &a, true) - f(&v, &c, true)) / 2e-6;
                    assert!((fd - gg[j]).abs() < 1e-8, "g[{j}]: {fd} vs {}", gg[j]);
                }
            } else {
                assert!(grads.get(&g).is_none());
            }
        }
    }
}
