//! One row at a time: statistics with overflow rescue, the normalized output, the backward.
//! Used by the row forms (a row of the last axis) and the batch forms (a gathered channel).

use super::stats::{compute, RowCtx, RowStats};
use crate::accum::Real;
use crate::counters::Counters;
use crate::spec::NormKind;

/// Scratch memory for one worker.
pub(crate) struct Scratch<A> {
    pub a: Vec<A>,
    pub b: Vec<A>,
    pub c: Vec<A>,
    /// The fused kernels' copy of the affine terms in register order (empty until needed).
    pub lanes: super::fused::LaneAffine<A>,
}

impl<A: Real> Scratch<A> {
    pub fn new(n: usize) -> Self {
        Scratch { a: vec![A::zero(); n], b: vec![A::zero(); n], c: vec![A::zero(); n], lanes: Default::default() }
    }
}

/// eps as seen by a row scaled by 2^-e: inside a sqrt of a mean square for Rms/Layer, on the
/// scale itself for the others.
fn scaled_eps(kind: NormKind, eps: f64, e: i32) -> f64 {
    match kind {
        NormKind::Rms | NormKind::Layer => eps * 2f64.powi(-2 * e),
        _ => eps * 2f64.powi(-e),
    }
}

/// Multiply every value by `2^-e` exactly. `2^-e` itself may be out of the accumulator's
/// range (2^134 for an f32 row whose largest magnitude is a subnormal 1e-40: the single
/// factor was `inf`), so it is applied as two factors `2^a * 2^b` with `a + b = -e` on the same
/// side of 1, each in range; the intermediate lies between the value and the result, so only
/// the final product can round (when it is subnormal).
pub(crate) fn scale_by_pow2<A: Real>(x: &mut [A], e: i32) {
    let ne = e.saturating_neg();
    let a = ne / 2;
    let (f1, f2) = (A::from_f64(2f64.powi(a)), A::from_f64(2f64.powi(ne - a)));
    x.iter_mut().for_each(|v| *v = *v * f1 * f2);
}

/// Statistics of the loaded row `x` (n values in the accumulator). `nonfinite_inputs` counts
/// the non-finite elements of the row in its storage type; it is only called when the
/// statistics came out non-finite. May rescale `x` in place by a power of two (recorded in
/// `exp2`). A row with a non-finite input gets NaN statistics.
#[inline(always)]
pub(crate) fn row_stats<A: Real>(
    ctx: &RowCtx<A>,
    x: &mut [A],
    abs_scratch: &mut [A],
    nonfinite_inputs: impl FnOnce() -> u64,
    counters: &mut Counters,
) -> RowStats {
    let raw = compute(ctx, x, A::from_f64(ctx.eps), abs_scratch);
    let wide = A::ACCUM.is_wide();
    if !needs_rescue(ctx, &raw) {
        return raw.widen(0);
    }
    let overflowed = !raw.check.is_finite() || !raw.s.is_finite();
    if overflowed {
        let bad = nonfinite_inputs();
        if bad > 0 {
            counters.nonfinite_in += bad;
            return RowStats { mean_hi: f64::NAN, mean_lo: f64::NAN, rscale: f64::NAN, exp2: 0, clamped: false };
        }
        if !wide {
            // A half accumulator overflowed: that is what it computes. Count it and keep it.
            counters.acc_overflow += 1;
            return raw.widen(0);
        }
    }
    // Rescue: scale the row by an exact power of two so its largest magnitude is in [1, 2).
    let m = x.iter().fold(0.0f64, |m, v| m.max(v.to_f64().abs()));
    if m == 0.0 || !m.is_finite() {
        return raw.widen(0);
    }
    let e = m.log2().floor() as i32;
    scale_by_pow2(x, e);
    let eps_s = scaled_eps(ctx.kind, ctx.eps, e);
    if !A::from_f64(eps_s).is_finite() {
        // eps dominates completely: D = sqrt(eps) (Rms/Layer) or eps; undo and use it.
        let raw2 = compute(ctx, x, A::from_f64(f64::MAX), abs_scratch);
        let d = match ctx.kind {
            NormKind::Rms | NormKind::Layer => ctx.eps.sqrt(),
            _ => ctx.eps,
        };
        let mut st = raw2.widen(e);
        st.rscale = A::from_f64(2f64.powi(e) / d).to_f64();
        st.clamped = matches!(ctx.kind, NormKind::UnitL2);
        return st;
    }
    let raw = compute(ctx, x, A::from_f64(eps_s), abs_scratch);
    raw.widen(e)
}

/// Write the normalized row into `x` (which holds the row as scaled by `row_stats`).
/// In-place, affine-free form of [`normalize_to`]: `x <- ((x - mean_hi) - mean_lo) * rscale`.
/// The batch forms use it (their affine is per channel, applied around it).
#[inline(always)]
pub(crate) fn normalize<A: Real>(ctx: &RowCtx<A>, x: &mut [A], st: &RowStats) {
    let s = A::from_f64(st.rscale);
    if ctx.centred {
        let (hi, lo) = (A::from_f64(st.mean_hi), A::from_f64(st.mean_lo));
        x.iter_mut().for_each(|v| *v = ((*v - hi) - lo) * s);
    } else {
        x.iter_mut().for_each(|v| *v = *v * s);
    }
}

/// Like [`row_stats`], but leaves `x` untouched: when the row must be rescaled, the scaled copy
/// is written to `rescue` and `true` is returned (read the row from `rescue` then).
#[inline(always)]
pub(crate) fn stats_view<A: Real>(
    ctx: &RowCtx<A>,
    x: &[A],
    abs_scratch: &mut [A],
    rescue: &mut [A],
    nonfinite_inputs: impl FnOnce() -> u64,
    counters: &mut Counters,
) -> (RowStats, bool) {
    let raw = compute(ctx, x, A::from_f64(ctx.eps), abs_scratch);
    if !needs_rescue(ctx, &raw) {
        return (raw.widen(0), false);
    }
    let buf = &mut rescue[..x.len()];
    buf.copy_from_slice(x);
    let st = row_stats(ctx, buf, abs_scratch, nonfinite_inputs, counters);
    (st, st.exp2 != 0)
}

#[inline(always)]
pub(crate) fn needs_rescue<A: Real>(ctx: &RowCtx<A>, raw: &super::stats::Raw<A>) -> bool {
    let overflowed = !raw.check.is_finite() || !raw.s.is_finite();
    let underflow_eps = match ctx.kind {
        NormKind::UnitL2 => A::TINY.sqrt(),
        _ => A::TINY,
    };
    let underflowed =
        A::ACCUM.is_wide() && raw.sumsq.to_f64() < A::TINY && ctx.eps < underflow_eps && raw.sumsq.to_f64() >= 0.0;
    overflowed || underflowed
}

/// The normalized row `dst = ((src - mean_hi) - mean_lo) * rscale * w + b`, `src` being the
/// row as scaled by the statistics.
#[inline(always)]
pub(crate) fn normalize_to<A: Real>(ctx: &RowCtx<A>, src: &[A], dst: &mut [A], st: &RowStats, w: Option<&[A]>, b: Option<&[A]>) {
    let s = A::from_f64(st.rscale);
    let dst = &mut dst[..src.len()];
    if ctx.centred {
        let hi = A::from_f64(st.mean_hi);
        let lo = A::from_f64(st.mean_lo);
        match (w, b) {
            (None, None) => dst.iter_mut().zip(src).for_each(|(d, &v)| *d = ((v - hi) - lo) * s),
            (Some(w), None) => dst.iter_mut().zip(src.iter().zip(w)).for_each(|(d, (&v, &w))| *d = ((v - hi) - lo) * s * w),
            (None, Some(b)) => dst.iter_mut().zip(src.iter().zip(b)).for_each(|(d, (&v, &b))| *d = ((v - hi) - lo) * s + b),
            (Some(w), Some(b)) => dst
                .iter_mut()
                .zip(src.iter().zip(w.iter().zip(b)))
                .for_each(|(d, (&v, (&w, &b)))| *d = ((v - hi) - lo) * s * w + b),
        }
    } else {
        match (w, b) {
            (None, None) => dst.iter_mut().zip(src).for_each(|(d, &v)| *d = v * s),
            (Some(w), None) => dst.iter_mut().zip(src.iter().zip(w)).for_each(|(d, (&v, &w))| *d = v * s * w),
            (None, Some(b)) => dst.iter_mut().zip(src.iter().zip(b)).for_each(|(d, (&v, &b))| *d = v * s + b),
            (Some(w), Some(b)) => {
                dst.iter_mut().zip(src.iter().zip(w.iter().zip(b))).for_each(|(d, (&v, (&w, &b)))| *d = v * s * w + b)
            }
        }
    }
}

#[inline(always)]
pub(super) fn sign<A: Real>(v: A) -> A {
    if v > A::zero() {
        A::one()
    } else if v < A::zero() {
        -A::one()
    } else {
        A::zero()
    }
}

/// Index set of the k largest |z_i|, ties to the lowest index, as a 0/1 mask in `mask`.
/// `abs_scratch` is overwritten.
#[inline(always)]
pub(crate) fn topk_mask<A: Real>(z: &[A], k: usize, abs_scratch: &mut [A], mask: &mut [bool]) {
    let n = z.len();
    let a = &mut abs_scratch[..n];
    for (d, &v) in a.iter_mut().zip(z) {
        *d = v.abs();
    }
    // The k-th largest value is the threshold.
    super::stats::top_k_desc(a, k);
    let t = a[k - 1];
    // Usually every value at the threshold is one of the k (a single value sits there): then
    // the mask is |z| >= t, one pass. Only real ties at the threshold need the search for
    // the lowest indices below. (A NaN threshold counts nothing and takes the search too.)
    let (above, at) = z.iter().fold((0usize, 0usize), |(gt, eq), v| (gt + (v.abs() > t) as usize, eq + (v.abs() == t) as usize));
    if above + at == k {
        for (m, v) in mask[..n].iter_mut().zip(z) {
            *m = v.abs() >= t;
        }
        return;
    }
    let mut taken = 0;
    for (i, m) in mask[..n].iter_mut().enumerate() {
        *m = z[i].abs() > t;
        taken += *m as usize;
    }
    for (i, m) in mask[..n].iter_mut().enumerate() {
        if taken == k {
            break;
        }
        if !*m && z[i].abs() == t {
            *m = true;
            taken += 1;
        }
    }
}

/// Backward of one row. `x` holds the loaded input (it is overwritten with x̂), `g` holds dy
/// (overwritten with dx, not yet scaled by 2^-exp2). Accumulates `dy * x̂` into `dw` and `dy`
/// into `db` when given. `mask` is Top-k scratch.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn row_backward<A: Real>(
    ctx: &RowCtx<A>,
    x: &mut [A],
    g: &mut [A],
    st: &RowStats,
    w: Option<&[A]>,
    dw: Option<&mut [A]>,
    db: Option<&mut [A]>,
    abs_scratch: &mut [A],
    mask: &mut [bool],
) {
    let s = A::from_f64(st.rscale);
    let hi = A::from_f64(st.mean_hi);
    let lo = A::from_f64(st.mean_lo);
    if st.exp2 != 0 {
        scale_by_pow2(x, st.exp2);
    }
    if ctx.centred {
        x.iter_mut().for_each(|v| *v = (*v - hi) - lo);
    }
    // Selections are made on |z|, exactly as the forward computed it.
    let argmax = match ctx.kind {
        NormKind::LInf => {
            // argmax |z|, lowest index on ties: a vectorised max, then the first index holding it.
            let best = crate::lanes::max_map(x, |v| v.abs());
            x.iter().position(|v| v.abs() == best).unwrap_or(0)
        }
        NormKind::TopK { k } => {
            topk_mask(x, k, abs_scratch, mask);
            0
        }
        _ => 0,
    };
    x.iter_mut().for_each(|v| *v = *v * s);
    if let Some(dw) = dw {
        dw.iter_mut().zip(x.iter().zip(g.iter())).for_each(|(a, (&xh, &dy))| *a = *a + dy * xh);
    }
    if let Some(db) = db {
        db.iter_mut().zip(g.iter()).for_each(|(a, &dy)| *a = *a + dy);
    }
    if let Some(w) = w {
        g.iter_mut().zip(w).for_each(|(v, &w)| *v = *v * w);
    }
    let dot = crate::lanes::sum_zip(g, x, |a, b| a * b);
    // dz_i = s * (g_i - dot * dD/dz_i)
    match ctx.kind {
        NormKind::Rms | NormKind::Layer => {
            let c = dot * ctx.inv_n;
            g.iter_mut().zip(x.iter()).for_each(|(v, &xh)| *v = s * (*v - xh * c));
        }
        NormKind::UnitL2 => {
            if st.clamped {
                g.iter_mut().for_each(|v| *v = s * *v);
            } else {
                g.iter_mut().zip(x.iter()).for_each(|(v, &xh)| *v = s * (*v - xh * dot));
            }
        }
        NormKind::L1 => {
            let c = dot * ctx.c * ctx.inv_n;
            g.iter_mut().zip(x.iter()).for_each(|(v, &xh)| *v = s * (*v - sign(xh) * c));
        }
        NormKind::LInf => {
            let m = argmax;
            let c = dot * ctx.c;
            let xm = x[m];
            g.iter_mut().for_each(|v| *v = s * *v);
            g[m] = g[m] - s * (sign(xm) * c);
        }
        NormKind::TopK { k } => {
            let c = dot * ctx.c / A::from_usize(k);
            g.iter_mut()
                .zip(x.iter().zip(mask.iter()))
                .for_each(|(v, (&xh, &sel))| *v = if sel { s * (*v - sign(xh) * c) } else { s * *v });
        }
    }
    if ctx.centred {
        let mean = crate::lanes::sum_map(g, |v| v) * ctx.inv_n;
        g.iter_mut().for_each(|v| *v = *v - mean);
    }
}
