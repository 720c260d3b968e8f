//! The norms composed from candle primitives, for devices the norm custom op cannot run on.
//!
//! Why it exists: the norm op (`forward.rs`) has a `cpu_fwd`, and a `cuda_fwd` only for f16/bf16
//! storage with the f32 accumulator (the CUDA kernels' types). f32 training on CUDA (and the f64
//! path) reaches the norms with f32 (f64) tensors, so `crate::ops::path::norm_route` sends those
//! here: reductions, broadcast arithmetic, `maximum`, `arg_sort_last_dim` and `gather`, which
//! candle implements on every device with autograd. Selected by [`crate::ops::OpPath`]
//! (`Composed` forces it on the CPU, where the tests compare it with the op).
//!
//! The formulas are `normlab_norms`' (`spec.rs`, `row/stats.rs`), in the accumulator's dtype
//! `work` (f32 or f64; the input, weight and bias are cast to it, the output cast back once):
//!
//! ```text
//! centred: hi = mean(x), lo = mean(x - hi), z = (x - hi) - lo   (compensated two-pass mean)
//! Rms     D = sqrt(mean(z^2) + eps)
//! Layer   D = sqrt(max(mean((x - hi)^2) - lo^2, 0) + eps)
//! UnitL2  D = max(||z||_2, eps)
//! L1      D = C * mean|z| + eps
//! LInf    D = C * max|z| + eps
//! TopK    D = C * mean of the k largest |z| + eps
//! y = z * (1/D) * w + b
//! ```
//!
//! with `C = spec.scale_constant(n)` (`ConstMode`). The gradients are candle's autograd of these
//! expressions, the same functions as the op's one-pass backward, with these differences:
//! - reduction order (candle's sums vs the op's fixed lanes): a few ulp of the work dtype;
//! - ties of Top-k on CUDA: candle's CUDA arg-sort is not stable, so among equal `|z|` at the
//!   k-th place it may select another index than the op (lowest indices first; the CPU sort is
//!   stable and agrees). L-inf picks the lowest index explicitly, and `|z|` has the op's
//!   gradient `sign(z)` with `sign(0) = 0` (candle's `abs` would take +1 at 0);
//! - no overflow/underflow rescue: the op rescales a row by a power of two when its f32 sum of
//!   squares (or sum of `|z|`) overflows, or underflows below f32's smallest normal with an eps
//!   below it; composed, such a row gives inf/0 statistics as plain f32 arithmetic does (rows
//!   with `|x|` around 1e19 or, with `eps = 0`, around 1e-19);
//! - no telemetry: the non-finite counters are not collected (as on the CUDA kernels); a row
//!   with a NaN or infinite input still gets NaN statistics, as in the op.

use candle_core::{DType, Result, Tensor, D};
use normlab_norms::{NormKind, NormSpec};

use crate::ops::error::OpsError;

/// `|z|` whose gradient is `sign(z)` with `sign(0) = 0`, as in the op's backward (candle's
/// `abs` backward takes +1 at 0). The value is exact: `z` times -1, 0 or 1.
fn abs(z: &Tensor) -> Result<Tensor> {
    z.mul(&z.sign()?.detach())
}

/// `stat` made NaN on the rows whose `|z|` sum is not finite (a NaN or infinite input), which a
/// maximum or a selection may skip: the op's rows with a non-finite input get NaN statistics.
fn nan_guard(abs_z: &Tensor, stat: Tensor) -> Result<Tensor> {
    let check = abs_z.sum_keepdim(D::Minus1)?;
    // check * 0 is 0 where the sum is finite and NaN where it is not (inf * 0, NaN * 0).
    stat + (&check * 0.0)?
}

/// `y = norm(x) * weight + bias` over the last dimension of `x`, statistics in `work` (f32 or
/// f64), the result in `x`'s dtype. Arguments are checked by the caller (`crate::ops::norm_on`).
pub(crate) fn norm(x: &Tensor, spec: &NormSpec, work: DType, weight: Option<&Tensor>, bias: Option<&Tensor>) -> Result<Tensor> {
    let n = *x.dims().last().ok_or(OpsError::Scalar)?;
    let c = spec.scale_constant(n).map_err(OpsError::from)?;
    let eps = spec.eps;
    let xw = x.to_dtype(work)?;
    let last = D::Minus1;
    let (z, hi_lo) = if spec.centred {
        let hi = xw.mean_keepdim(last)?;
        let d = xw.broadcast_sub(&hi)?;
        let lo = d.mean_keepdim(last)?;
        (d.broadcast_sub(&lo)?, Some((d, lo)))
    } else {
        (xw, None)
    };
    let rscale = match spec.kind {
        NormKind::Rms => z.sqr()?.mean_keepdim(last)?.affine(1.0, eps)?.sqrt()?.recip()?,
        NormKind::Layer => {
            let (d, lo) = hi_lo.as_ref().ok_or_else(|| candle_core::Error::msg("composed norm: an uncentred LayerNorm (refused by NormSpec::validate)"))?;
            let var = (d.sqr()?.mean_keepdim(last)? - lo.sqr()?)?.relu()?;
            var.affine(1.0, eps)?.sqrt()?.recip()?
        }
        NormKind::UnitL2 => z.sqr()?.sum_keepdim(last)?.sqrt()?.maximum(eps)?.recip()?,
        NormKind::L1 => abs(&z)?.mean_keepdim(last)?.affine(c, eps)?.recip()?,
        NormKind::LInf => {
            let a = abs(&z)?;
            let ad = a.detach();
            // The first index holding the maximum (the op's tie rule): among the positions
            // where |z| equals the row's maximum, the largest `n - i`, which no two share, so
            // the choice does not depend on how a device's argmax breaks ties. `gather` then
            // reads that one element: the gradient goes to it alone.
            let hit = ad.broadcast_eq(&ad.max_keepdim(last)?)?.to_dtype(work)?;
            let rank = Tensor::arange(0u32, n as u32, x.device())?.to_dtype(work)?.affine(-1.0, n as f64)?;
            let idx = hit.broadcast_mul(&rank)?.argmax_keepdim(last)?;
            let stat = a.contiguous()?.gather(&idx, last)?;
            nan_guard(&ad, stat)?.affine(c, eps)?.recip()?
        }
        NormKind::TopK { k } => {
            let a = abs(&z)?;
            let ad = a.detach();
            // The indices of the k largest |z| (no gradient; a stable sort on the CPU, so ties go
            // to the lowest indices as in the op; CUDA's bitonic sort is not stable), then the
            // values themselves by `gather`, whose backward reaches exactly those k elements.
            let idx = ad.contiguous()?.arg_sort_last_dim(false)?.narrow(last, 0, k)?.contiguous()?;
            let stat = a.contiguous()?.gather(&idx, last)?.mean_keepdim(last)?;
            nan_guard(&ad, stat)?.affine(c, eps)?.recip()?
        }
    };
    let mut y = z.broadcast_mul(&rscale)?;
    if let Some(w) = weight {
        y = y.broadcast_mul(&w.to_dtype(work)?)?;
    }
    if let Some(b) = bias {
        y = y.broadcast_add(&b.to_dtype(work)?)?;
    }
    y.to_dtype(x.dtype())
}
