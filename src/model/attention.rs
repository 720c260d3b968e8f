//! Causal softmax attention with the softmax in f32 (or f64 when the model computes in f64).
//!
//! `scores = scale * q k^T` per head, `p = softmax` over the keys `s <= t` (a causal mask applied
//! inside the op, so no `-inf` mask tensor is built), `y = p v`. The softmax is a custom op:
//! forward with the row maximum subtracted, in f32/f64, rows in parallel (each row is reduced
//! sequentially, so the result does not depend on the thread count); backward
//! `dx = p * (dy - sum(dy * p))` from the saved output.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;

/// Softmax over the last dimension of `[.., T, T]` with key positions `s > t` masked out.
struct CausalSoftmax;

fn causal_softmax<T: num_traits_float::Float>(src: &[T], t_q: usize, t_k: usize) -> Vec<T> {
    let mut dst = vec![T::zero(); src.len()];
    dst.par_chunks_mut(t_k).zip(src.par_chunks(t_k)).enumerate().for_each(|(row, (d, s))| {
        // Query position t sees keys 0..=t (self-attention: t_q == t_k).
        let keep = (row % t_q + 1).min(t_k);
        let mut max = T::neg_infinity();
        for &v in &s[..keep] {
            if v > max {
                max = v;
            }
        }
        let mut sum = T::zero();
        for (o, &v) in d[..keep].iter_mut().zip(&s[..keep]) {
            *o = (v - max).exp();
            sum = sum + *o;
        }
        let inv = T::one() / sum;
        d[..keep].iter_mut().for_each(|o| *o = *o * inv);
    });
    dst
}

/// The float operations the softmax needs, for f32 and f64 only.
mod num_traits_float {
    pub trait Float: Copy + PartialOrd + std::ops::Add<Output = Self> + std::ops::Sub<Output = Self> + std::ops::Mul<Output = Self> + std::ops::Div<Output = Self> + Send + Sync {
        fn zero() -> Self;
        fn one() -> Self;
        fn neg_infinity() -> Self;
        fn exp(self) -> Self;
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
            }
        };
    }
    imp!(f32);
    imp!(f64);
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "normlab-causal-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let dims = layout.dims();
        if dims.len() < 2 {
            candle_core::bail!("causal softmax: needs [.., T, T], got {dims:?}");
        }
        let (t_q, t_k) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        let (o1, o2) = layout.contiguous_offsets().ok_or_else(|| candle_core::Error::msg("causal softmax: input must be contiguous"))?;
        let out = match storage.dtype() {
            DType::F32 => CpuStorage::F32(causal_softmax(&storage.as_slice::<f32>()?[o1..o2], t_q, t_k)),
            DType::F64 => CpuStorage::F64(causal_softmax(&storage.as_slice::<f64>()?[o1..o2], t_q, t_k)),
            dt => candle_core::bail!("causal softmax: statistics run in f32 or f64, got {dt:?}"),
        };
        Ok((out, layout.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let dot = (grad * res)?.sum_keepdim(D::Minus1)?;
        Ok(Some(res.mul(&grad.broadcast_sub(&dot)?)?))
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
/// computing in f64); the probabilities are cast back for `p v`.
pub(crate) fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: ScoreScale) -> Result<Tensor> {
    let (b, t, h, d_h) = q.dims4()?;
    let dtype = q.dtype();
    let stats = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
    let q = q.transpose(1, 2)?.contiguous()?;
    let k = k.transpose(1, 2)?.contiguous()?;
    let v = v.transpose(1, 2)?.contiguous()?;
    let scores = q.matmul(&k.t()?)?.to_dtype(stats)?;
    let scores = match scale {
        ScoreScale::Const(c) => scores.affine(c, 0.0)?,
        ScoreScale::PerHead(g) => scores.broadcast_mul(&g.to_dtype(stats)?.reshape((1, h, 1, 1))?)?,
    };
    let p = scores.contiguous()?.apply_op1(CausalSoftmax)?.to_dtype(dtype)?;
    p.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h * d_h))
}
