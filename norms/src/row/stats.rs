//! Per-row statistics: the mean (as a compensated pair) and the reciprocal denominator.
//!
//! Centred kinds compute the mean in two steps: `hi = sum(x)/n`, then the residual
//! `lo = sum(x - hi)/n` (the corrected two-pass algorithm of Chan, Golub and LeVeque). The
//! centred value is `z = (x - hi) - lo`: `x - hi` is exact or rounded relative to `z`, not to
//! `mean`, so the output keeps its accuracy when `|mean| >> std`. LayerNorm's variance is
//! `sum((x - hi)^2)/n - lo^2` from the same pass: never `E[x^2] - mean^2`.

use crate::accum::Real;
use crate::lanes;
use crate::spec::NormKind;

/// Statistics of one row (or channel), saved by the forward for the backward.
///
/// Values are in the accumulator's precision (an f32 value when the accumulator is f32),
/// stored widened to f64. They describe the row scaled by `2^-exp2` (`exp2` is 0 unless the
/// row had to be rescaled to avoid overflow or underflow):
/// `x̂ = ((x * 2^-exp2 - mean_hi) - mean_lo) * rscale`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowStats {
    pub mean_hi: f64,
    pub mean_lo: f64,
    /// `1 / D` for the scaled row.
    pub rscale: f64,
    pub exp2: i32,
    /// Unit L2 only: the norm was below eps and the clamp was applied.
    pub clamped: bool,
}

impl RowStats {
    /// The mean of the row (0 for uncentred kinds).
    pub fn mean(&self) -> f64 {
        (self.mean_hi + self.mean_lo) * 2f64.powi(self.exp2)
    }
    /// The denominator `D` the row was divided by.
    pub fn denominator(&self) -> f64 {
        2f64.powi(self.exp2) / self.rscale
    }
}

/// Everything a row kernel needs that does not change from row to row.
#[derive(Clone, Copy, Debug)]
pub struct RowCtx<A: Real> {
    pub kind: NormKind,
    pub centred: bool,
    pub eps: f64,
    /// Scale constant `C` (1 for the L2 kinds).
    pub c: A,
    pub inv_n: A,
    /// Write the forward's output with non-temporal stores (the explicit-SIMD kernels of
    /// `row::fused` only): set when the output is larger than the last-level cache, where the
    /// stores would otherwise read every destination line first (`row::stream_output`).
    pub stream_output: bool,
}

/// The row's statistics in the accumulator, before widening.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw<A> {
    pub hi: A,
    pub lo: A,
    pub s: A,
    pub clamped: bool,
    /// The value whose finiteness tells whether the row was computed without overflow
    /// (a sum over the whole row: NaN or Inf if any input is, or if the accumulator overflowed).
    pub check: A,
    /// Sum of squares, for the underflow test (0 when the kind has none).
    pub sumsq: A,
}

impl<A: Real> Raw<A> {
    pub fn widen(&self, exp2: i32) -> RowStats {
        RowStats { mean_hi: self.hi.to_f64(), mean_lo: self.lo.to_f64(), rscale: self.s.to_f64(), exp2, clamped: self.clamped }
    }
}

/// Descending order that is total: NaN sorts first, as if larger than everything. The sorts
/// of the standard library may panic on a comparison that is not a total order, which
/// `partial_cmp(..).unwrap_or(Equal)` is not once a NaN is present; a row with a NaN gets NaN
/// statistics anyway, so where the NaN lands does not matter, only that nothing panics.
pub(crate) fn desc_total<A: Real>(x: &A, y: &A) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Equal, Greater, Less};
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Equal,
        (true, false) => Less,
        (false, true) => Greater,
        (false, false) => y.partial_cmp(x).unwrap_or(Equal),
    }
}

/// Move the k largest values of `a` (non-negative, 1 <= k <= len) to `a[..k]`, sorted in
/// descending order, and return how many leading entries of `a` were examined by the final
/// selection. The rest of `a` is left in an unspecified order.
///
/// For k <= 16 the k-th largest of the 16 lane maxima is a lower bound of the k-th largest
/// value (those maxima are k elements of `a`), so only the elements at or above it, a few
/// percent of a Gaussian row, are selected among: one vectorised pass instead of a full
/// selection. The values returned are the same either way.
pub(crate) fn top_k_desc<A: Real>(a: &mut [A], k: usize) -> usize {
    let n = a.len();
    if uses_lane_maxima(n, k) {
        let t0 = kth_largest_lane_max(lanes::lane_max(a), k);
        // Compacted in place (w <= i), in blocks of 16: a block without a candidate (most
        // blocks) costs one vectorised comparison; the others are copied without a branch per
        // value (a candidate is kept by advancing w past it), since a candidate's position is
        // not predictable.
        let mut w = 0;
        for start in (0..n).step_by(16) {
            let end = (start + 16).min(n);
            if a[start..end].iter().fold(false, |any, &v| any | (v >= t0)) {
                for i in start..end {
                    let v = a[i];
                    a[w] = v;
                    w += (v >= t0) as usize;
                }
            }
        }
        return top_k_of_candidates(a, w, k);
    }
    top_k_of_candidates(a, n, k)
}

/// Whether [`top_k_desc`] pre-selects with the lane maxima (k <= 16, rows of 64 or more).
#[inline(always)]
pub(crate) fn uses_lane_maxima(n: usize, k: usize) -> bool {
    k <= lanes::LANES && n >= 4 * lanes::LANES
}

/// The k-th largest of the 16 lane maxima: a lower bound of the row's k-th largest value.
pub(crate) fn kth_largest_lane_max<A: Real>(mut maxima: [A; lanes::LANES], k: usize) -> A {
    maxima.sort_unstable_by(desc_total);
    maxima[k - 1]
}

/// The end of [`top_k_desc`] once the candidates (every value at or above a lower bound of the
/// k-th largest) are in `a[..m]`: the k largest of them to `a[..k]`, sorted descending.
/// Returns m. Fewer than k candidates only happen with NaN in the row: then `a` is NaN-filled
/// and n is returned (the row's statistics are NaN anyway).
pub(crate) fn top_k_of_candidates<A: Real>(a: &mut [A], m: usize, k: usize) -> usize {
    let desc = desc_total::<A>;
    if m < k {
        for v in a[m..].iter_mut() {
            *v = A::from_f64(f64::NAN);
        }
        return a.len();
    }
    let cand = &mut a[..m];
    if k < m {
        cand.select_nth_unstable_by(k - 1, desc);
    }
    cand[..k].sort_unstable_by(desc);
    m
}

/// Mean of the k largest values of `a` (k >= 1). They are sorted descending first, so that the
/// result does not depend on how the selection arranged them, then summed in lanes: a single
/// running sum of k sorted (often equal) values rounds the same way k times, an error of up to
/// k/2 ulps (1e-4 relative for k = 4097 in f32); lanes cut that to k/32. `a` is reordered.
pub(crate) fn topk_mean<A: Real>(a: &mut [A], k: usize) -> A {
    top_k_desc(a, k);
    mean_of_sorted_top_k(a, k)
}

/// The mean of `a[..k]` (the k largest, sorted descending by [`top_k_desc`]), summed in lanes.
#[inline(always)]
pub(crate) fn mean_of_sorted_top_k<A: Real>(a: &[A], k: usize) -> A {
    lanes::sum_map(&a[..k], |v| v) / A::from_usize(k)
}

/// Compute the statistics of `x` (already loaded into the accumulator) with the given eps.
/// `abs_scratch` has room for n values (Top-k only).
///
/// The lane reductions are here; what follows them (the scale, the clamp, the overflow check)
/// is in the `finish_*` functions, shared with the explicit-SIMD kernels of `row::fused`.
#[inline(always)]
pub(crate) fn compute<A: Real>(ctx: &RowCtx<A>, x: &[A], eps: A, abs_scratch: &mut [A]) -> Raw<A> {
    let n = x.len();
    let hi = if ctx.centred { lanes::sum_map(x, |v| v) * ctx.inv_n } else { A::zero() };
    match ctx.kind {
        NormKind::Rms | NormKind::UnitL2 => finish_l2(ctx, hi, lanes::sum_map(x, |v| v * v), eps),
        NormKind::Layer => {
            let (d, q) = lanes::sum_map2(x, |v| v - hi, |v| (v - hi) * (v - hi));
            finish_layer(ctx, hi, d, q, eps)
        }
        NormKind::L1 | NormKind::LInf | NormKind::TopK { .. } => {
            let lo = if ctx.centred { lanes::sum_map(x, |v| v - hi) * ctx.inv_n } else { A::zero() };
            let (stat, check) = match ctx.kind {
                NormKind::L1 => {
                    let r = lanes::sum_map(x, |v| ((v - hi) - lo).abs());
                    (r * ctx.inv_n, r)
                }
                NormKind::LInf => lanes::max_and_sum(x, |v| ((v - hi) - lo).abs()),
                NormKind::TopK { k } => {
                    let a = &mut abs_scratch[..n];
                    for (d, &v) in a.iter_mut().zip(x) {
                        *d = ((v - hi) - lo).abs();
                    }
                    let check = lanes::sum_map(a, |v| v);
                    (topk_mean(a, k), check)
                }
                _ => unreachable!(),
            };
            finish_scaled(ctx, hi, lo, stat, check, eps)
        }
    }
}

/// Rms and UnitL2 from the lane sum of squares `q`. `hi` is the (zero) mean of these
/// uncentred kinds, kept as [`compute`] has always returned it.
#[inline(always)]
pub(crate) fn finish_l2<A: Real>(ctx: &RowCtx<A>, hi: A, q: A, eps: A) -> Raw<A> {
    let (one, lo) = (A::one(), A::zero());
    if matches!(ctx.kind, NormKind::Rms) {
        let s = one / (q * ctx.inv_n + eps).sqrt();
        Raw { hi, lo, s, clamped: false, check: q, sumsq: q }
    } else {
        let norm = q.sqrt();
        // Clamp as F.normalize: max(norm, eps); NaN propagates through `check`.
        #[allow(clippy::neg_cmp_op_on_partial_ord)] // deliberate: a NaN norm counts as clamped
        let clamped = !(norm >= eps);
        let d = if clamped { eps } else { norm };
        Raw { hi, lo, s: one / d, clamped, check: q, sumsq: q }
    }
}

/// LayerNorm from `hi = sum(x)/n` and the lane sums `d = sum(x - hi)`, `q = sum((x - hi)^2)`:
/// `lo = d/n`, `var = q/n - lo^2` (the corrected two-pass variance, clamped at 0).
#[inline(always)]
pub(crate) fn finish_layer<A: Real>(ctx: &RowCtx<A>, hi: A, d: A, q: A, eps: A) -> Raw<A> {
    let lo = d * ctx.inv_n;
    let mut var = q * ctx.inv_n - lo * lo;
    if var < A::zero() {
        var = A::zero();
    }
    let s = A::one() / (var + eps).sqrt();
    Raw { hi, lo, s, clamped: false, check: hi + q, sumsq: q }
}

/// L1, L-inf and Top-k from their statistic (mean, max or top-k mean of `|z|`) and `check`,
/// the lane sum of `|z|`: `D = C * stat + eps`.
#[inline(always)]
pub(crate) fn finish_scaled<A: Real>(ctx: &RowCtx<A>, hi: A, lo: A, stat: A, check: A, eps: A) -> Raw<A> {
    // For L-inf and Top-k the whole-row sum in `check` only makes a NaN visible (a
    // max or a selection drops it). In a pure half accumulator that sum overflows on
    // rows whose statistic does not (two values near 65504), which is no overflow of
    // the statistic: there the statistic itself is checked, plus the NaN. The wide
    // accumulators keep the sum, whose overflow also triggers their exact rescaling.
    let check = if A::ACCUM.is_wide() || check.is_nan() || matches!(ctx.kind, NormKind::L1) { check } else { stat };
    let s = A::one() / (ctx.c * stat + eps);
    Raw { hi, lo, s, clamped: false, check: check + hi, sumsq: A::zero() }
}
