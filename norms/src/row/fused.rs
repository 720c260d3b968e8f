//! The row forward with f32 accumulation over f32, f16 or bf16 storage, in explicit SIMD:
//! the same numbers as the generic kernel (`kernel.rs`), bit for bit, with fewer instructions.
//!
//! # Why a second implementation
//! The generic kernel widens a row into an f32 scratch row, makes one autovectorised pass per
//! statistic, normalizes into a second scratch row, narrows that into the output and counts
//! the output's non-finite values: five to seven passes for a row that sits in L1, and on two
//! cores the 16-bit forwards were limited by those instructions, not by memory. Here each pass
//! reads the storage directly (widening f16 is one instruction per 8 values, as cheap as a
//! load), several sums that the autovectoriser would not fuse share one pass, and the
//! normalization, the rounding into the storage type and the non-finite check are one pass.
//!
//! # Why the results are identical
//! Every statistic is the same 16-lane reduction as `crate::lanes` (lane j takes elements
//! j, j + 16, ... in order, [`F32x16`] holds the 16 lanes, a row's tail updates only its
//! lanes), with the same operations in the same order and the same final combine; the scalar
//! steps after the reductions are the very functions of `stats.rs` (`finish_*`); the
//! normalization is the same expression per element; and the roundings into f16/bf16 are
//! bit-identical to `convert`'s. Rows that need more than that (an overflowing or underflowing
//! statistic, a non-finite input) go through the generic kernel, which rescales them.
//! `fused::tests` compares both paths bit for bit.

use super::kernel::{needs_rescue, Scratch};
use super::rank_select;
use super::simd::{load_partial, sfence, store_partial, F32x16, Storage, W};
use super::stats::{self, Raw, RowCtx, RowStats};
use crate::accum::Real;
use crate::counters::Counters;
use crate::element::Element;
use crate::lanes;
use crate::spec::NormKind;

/// Run `$body` with `$i` = 0, 16, 32, ... below `$full` (a multiple of 16), two groups per
/// iteration: the loop control (three instructions) is then paid once per 32 values, which
/// matters when the body is ten instructions (AVX-512). A macro, not a closure: the body must be
/// inlined into the function compiled for the CPU's features, which a closure called from
/// several places may not be.
macro_rules! each_group {
    ($full:expr, |$i:ident| $body:block) => {{
        let full: usize = $full;
        let pairs = full - full % (2 * W);
        let mut $i = 0usize;
        while $i < pairs {
            $body;
            $i += W;
            $body;
            $i += W;
        }
        if $i < full {
            $body;
        }
    }};
}

/// Which explicit-SIMD implementation runs, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// The generic kernel only.
    Generic,
    /// Two AVX registers per 16 lanes (AVX2, FMA, F16C).
    Avx2,
    /// One AVX-512 register per 16 lanes (AVX-512F, plus the AVX2 set).
    Avx512,
}

impl Level {
    /// The best level this CPU supports, or the one named by `NORMLAB_CPU_SIMD` (`avx512`,
    /// `avx2`, `generic`) when the CPU supports that one: for comparing the implementations on
    /// the same machine. Detected once.
    pub(crate) fn detect() -> Level {
        use std::sync::OnceLock;
        static LEVEL: OnceLock<Level> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            let best = Level::best_supported();
            match std::env::var("NORMLAB_CPU_SIMD").ok().as_deref().map(str::trim) {
                Some("generic") => Level::Generic,
                Some("avx2") if best != Level::Generic => Level::Avx2,
                _ => best,
            }
        })
    }

    fn best_supported() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if super::has_avx2() {
                return if is_x86_feature_detected!("avx512f") { Level::Avx512 } else { Level::Avx2 };
            }
        }
        Level::Generic
    }
}

/// Forward of consecutive rows (one parallel task) by the fused kernels, when they apply: the
/// accumulator is f32, the storage f32, f16 or bf16, and the CPU has AVX2. `None` otherwise
/// (the caller runs the generic kernel).
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_rows<T: Element, A: Real>(
    level: Level,
    ctx: &RowCtx<A>,
    xc: &[T],
    yc: &mut [T],
    sc: &mut [RowStats],
    w: Option<&[A]>,
    b: Option<&[A]>,
    scr: &mut Scratch<A>,
) -> Option<Counters> {
    if level == Level::Generic || !same::<A, f32>() {
        return None;
    }
    // SAFETY (all casts below): A is f32 and T is the storage type named (checked by TypeId);
    // the casts change no type.
    let ctx = unsafe { &*(ctx as *const RowCtx<A> as *const RowCtx<f32>) };
    let w = w.map(|w| unsafe { cast::<A, f32>(w) });
    let b = b.map(|b| unsafe { cast::<A, f32>(b) });
    let scr = unsafe { &mut *(scr as *mut Scratch<A> as *mut Scratch<f32>) };
    let (x, y) = (xc, yc);
    Some(if same::<T, f32>() {
        rows_at::<f32>(level, ctx, unsafe { cast(x) }, unsafe { cast_mut(y) }, sc, w, b, scr)
    } else if same::<T, half::f16>() {
        rows_at::<half::f16>(level, ctx, unsafe { cast(x) }, unsafe { cast_mut(y) }, sc, w, b, scr)
    } else if same::<T, half::bf16>() {
        rows_at::<half::bf16>(level, ctx, unsafe { cast(x) }, unsafe { cast_mut(y) }, sc, w, b, scr)
    } else {
        return None;
    })
}

fn same<T: 'static, U: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<U>()
}

/// # Safety
/// `T` and `U` are the same type.
unsafe fn cast<T, U>(v: &[T]) -> &[U] {
    std::slice::from_raw_parts(v.as_ptr() as *const U, v.len())
}

/// # Safety
/// `T` and `U` are the same type.
unsafe fn cast_mut<T, U>(v: &mut [T]) -> &mut [U] {
    std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut U, v.len())
}

/// [`rows`] compiled for the given level (which the CPU supports: [`Level::detect`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows_at<S: Storage>(
    level: Level,
    ctx: &RowCtx<f32>,
    xc: &[S],
    yc: &mut [S],
    sc: &mut [RowStats],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    scr: &mut Scratch<f32>,
) -> Counters {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma,f16c,popcnt")]
        unsafe fn avx2<S: Storage>(
            ctx: &RowCtx<f32>, xc: &[S], yc: &mut [S], sc: &mut [RowStats], w: Option<&[f32]>, b: Option<&[f32]>, scr: &mut Scratch<f32>,
        ) -> Counters {
            // bf16 widens and rounds without shuffles when the even and odd lanes are apart.
            if same::<S, half::bf16>() {
                rows::<super::simd::avx2_even_odd::Avx2EvenOdd, S>(ctx, xc, yc, sc, w, b, scr)
            } else {
                rows::<super::simd::avx2::Avx2, S>(ctx, xc, yc, sc, w, b, scr)
            }
        }
        #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
        unsafe fn avx512<S: Storage>(
            ctx: &RowCtx<f32>, xc: &[S], yc: &mut [S], sc: &mut [RowStats], w: Option<&[f32]>, b: Option<&[f32]>, scr: &mut Scratch<f32>,
        ) -> Counters {
            rows::<super::simd::avx512::Avx512, S>(ctx, xc, yc, sc, w, b, scr)
        }
        match level {
            // SAFETY: the level's features were detected at run time.
            Level::Avx512 => return unsafe { avx512(ctx, xc, yc, sc, w, b, scr) },
            Level::Avx2 => return unsafe { avx2(ctx, xc, yc, sc, w, b, scr) },
            Level::Generic => {}
        }
    }
    super::forward_rows::<S, f32>(ctx, xc, yc, sc, w, b, scr)
}

/// The rows of one task: each by [`row`], or by the generic kernel when it needs a rescue.
#[inline(always)]
unsafe fn rows<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    xc: &[S],
    yc: &mut [S],
    sc: &mut [RowStats],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    scr: &mut Scratch<f32>,
) -> Counters {
    let n = scr.a.len();
    let mut c = Counters::default();
    let w_max = match w {
        Some(w) => max_abs::<V>(w),
        None => 1.0,
    };
    let b_max = match b {
        Some(b) => max_abs::<V>(b),
        None => 0.0,
    };
    let affine_max = (w_max, b_max);
    // The sum of the row's values (`hi` before the division by n), when the row before
    // computed it ([`fold_with_next`]).
    let mut sum_ahead = None;
    for (r, ((yr, xr), st)) in yc.chunks_mut(n).zip(xc.chunks(n)).zip(sc.iter_mut()).enumerate() {
        // Streamed rows store their groups from the first aligned address (`store_row`).
        let head = if ctx.stream_output && n >= W { stream_head(yr.as_ptr()) } else { 0 };
        let affine = scr.lanes.affine::<V>(w, b, head);
        let next = if ctx.centred { xc.get((r + 1) * n..(r + 2) * n) } else { None };
        let (done, next_sum) = row::<V, S>(ctx, xr, yr, &affine, affine_max, &mut scr.a, &mut scr.b, sum_ahead.take(), next);
        sum_ahead = next_sum;
        match done {
            Some((stats, bad)) => {
                *st = stats;
                c.nonfinite_out += bad;
            }
            None => {
                #[cfg(test)]
                RESCUED.with(|r| r.set(r.get() + 1));
                c += super::forward_rows::<S, f32>(ctx, xr, yr, std::slice::from_mut(st), w, b, scr)
            }
        }
    }
    if ctx.stream_output {
        // The task's streaming stores must be visible before the task is seen to end.
        sfence();
    }
    c
}

#[cfg(test)]
thread_local! {
    /// Rows this thread handed to the generic kernel: the tests check that ordinary rows take
    /// the fused path (a rescue gives the same bits, so only this count shows a fast path
    /// that quietly never runs).
    static RESCUED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A worker's copy of the affine weight and bias in register order ([`F32x16::store_lanes`]),
/// for the groups of [`store_groups`], which start `head` values into the row. With a layout
/// that reorders lanes, reading them in memory order would cost shuffles in every row's store
/// pass; the copy is made once per worker (a [`Scratch`] lives for one call), and again only
/// for a row whose `head` differs, as streamed rows can when their byte length is not a
/// multiple of 32. Unused (empty) with the other layouts.
pub(crate) struct LaneAffine<A> {
    head: Option<usize>,
    w: Vec<A>,
    b: Vec<A>,
}

impl<A> Default for LaneAffine<A> {
    fn default() -> Self {
        LaneAffine { head: None, w: Vec::new(), b: Vec::new() }
    }
}

impl LaneAffine<f32> {
    /// The affine terms of a row whose groups start at `head`.
    #[inline(always)]
    unsafe fn affine<'a, V: F32x16>(&'a mut self, w: Option<&'a [f32]>, b: Option<&'a [f32]>, head: usize) -> RowAffine<'a> {
        let (w, b) = (w.unwrap_or(&[]), b.unwrap_or(&[]));
        if !V::REORDERS {
            return RowAffine { head, w, b, wl: w.get(head..).unwrap_or(&[]), bl: b.get(head..).unwrap_or(&[]) };
        }
        if self.head != Some(head) {
            in_lane_order::<V>(w, head, &mut self.w);
            in_lane_order::<V>(b, head, &mut self.b);
            self.head = Some(head);
        }
        RowAffine { head, w, b, wl: &self.w, bl: &self.b }
    }
}

/// The whole groups of 16 of `v[head..]` into `out`, each in register order.
#[inline(always)]
unsafe fn in_lane_order<V: F32x16>(v: &[f32], head: usize, out: &mut Vec<f32>) {
    let groups = v.len().saturating_sub(head) / W;
    out.clear();
    out.resize(groups * W, 0.0);
    for g in 0..groups {
        V::load_f32(v.as_ptr().add(head + g * W)).store_lanes(out.as_mut_ptr().add(g * W));
    }
}

/// The affine terms of a row (empty when absent): `w` and `b` in memory order, `wl` and `bl`
/// those from the row's `head` on, in register order ([`LaneAffine`]). `head`: where the
/// row's groups start ([`store_row`]).
#[derive(Clone, Copy)]
struct RowAffine<'a> {
    head: usize,
    w: &'a [f32],
    b: &'a [f32],
    wl: &'a [f32],
    bl: &'a [f32],
}

/// The largest `|v|` of a weight or bias (infinity if some value is NaN or infinite).
#[inline(always)]
unsafe fn max_abs<V: F32x16>(v: &[f32]) -> f64 {
    let full = v.len() - v.len() % W;
    let mut big = V::splat(0.0);
    let mut i = 0;
    while i < full {
        big = big.max_abs_bits(V::load_f32(v.as_ptr().add(i)));
        i += W;
    }
    let bits = big.to_array().iter().chain(&v[full..]).map(|m| m.to_bits() & 0x7FFF_FFFF).max().unwrap_or(0);
    if bits >= 0x7F80_0000 {
        f64::INFINITY
    } else {
        f32::from_bits(bits) as f64
    }
}

/// One row: statistics, then the normalized output with the number of non-finite values in
/// it; `None` (nothing written) when the statistics need the generic kernel's rescue.
/// `affine_max`: the largest `|w_j|` (1 without a weight) and `|b_j|` (0 without a bias).
/// `sum`: the sum of the row's values if already known (centred rows); `next`: the next row of
/// the task, whose sum is then computed along (returned second: [`fold_with_next`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn row<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    y: &mut [S],
    affine: &RowAffine,
    affine_max: (f64, f64),
    abs: &mut [f32],
    marks: &mut [f32],
    sum: Option<f32>,
    next: Option<&[S]>,
) -> (Option<(RowStats, u64)>, Option<f32>) {
    let (raw, z_max, next_sum) = raw_stats::<V, S>(ctx, x, abs, marks, sum, next);
    if needs_rescue(ctx, &raw) {
        return (None, next_sum);
    }
    let check = !outputs_surely_finite::<S>(z_max, raw.s, affine_max);
    let bad = normalize_store::<V, S>(ctx, x, y, &raw, affine, check);
    (Some((raw.widen(0), bad)), next_sum)
}

/// Whether every output `((z * s) * w) + b` of a row is finite in the storage type, given an
/// upper bound of `|z|` over the row: then the store pass need not look for non-finite values.
/// Each f32 operation rounds its exact result up by a factor of at most `1 + 2^-24` (or to the
/// next subnormal, far below the bound's slack), so `(z_max * s * w_max) * (1 + 2^-20) + b_max`,
/// enlarged once more, bounds every computed `|output|`; a bound of at most the type's largest
/// finite value rounds to a finite value. A NaN or infinite weight or bias makes the bound
/// infinite (checked).
fn outputs_surely_finite<S: Storage>(z_max: f64, s: f32, (w_max, b_max): (f64, f64)) -> bool {
    let bound = (z_max * s as f64 * w_max * (1.0 + 2f64.powi(-20)) + b_max) * (1.0 + 2f64.powi(-20));
    bound <= f32::from_bits(S::MAX_FINITE_BITS) as f64
}

/// Relative slack of a lane sum of n non-negative f32 terms: the exact sum of the (rounded)
/// terms is at most the computed one times this. Each lane adds at most n/16 + 1 terms, the
/// combine four more levels, each rounding by at most `1 + 2^-24`, and forming a term (a
/// square) rounds once more: `(1 + 2^-24)^(n/16 + 6) < 1 + (n + 128) 2^-23`.
fn sum_slack(n: usize) -> f64 {
    1.0 + (n as f64 + 128.0) * 2f64.powi(-23)
}

/// Whether a centred row's `check` (the lane sum of `|z|`, `hi` added) is surely finite, so
/// that it need not be computed: `check` only decides the rescue (`kernel::needs_rescue`), and
/// it is non-finite only when a value is NaN or infinite (then `hi` or `lo` is too: their sums
/// see every value) or when the sum overflows, which `n max|z|` with the sum's slack bounds.
/// A row that fails this gets the sum, so the decision is always `stats::compute`'s.
fn check_sum_unneeded(hi: f32, lo: f32, z_max: f32, n: usize) -> bool {
    let bound = (n as f64 * z_max as f64 * sum_slack(n) + (hi as f64).abs()) * 2.0;
    hi.is_finite() && lo.is_finite() && bound <= f32::MAX as f64
}

/// Absolute slack of the bounds: covers squares that underflowed (each below 2^-149, so at most
/// `sqrt(n) 2^-74.5` on a root for any n < 2^69).
const ABS_SLACK: f64 = 1.0 / (1u64 << 40) as f64;

/// `stats::compute` over the storage: the same reductions, fused where two sums read the
/// same values, and the same `finish_*`. Also returns an upper bound of `|z|` over the row
/// (`z` the centred value the output is made of; meaningful when the statistics are finite),
/// from the statistics at hand: the root of the sum of squares, the sum or the maximum of `|z|`.
///
/// Centred, `hi` is the sum of the values (`row_sum` when the caller has it) over n, and the
/// pass that sums `x - hi` also sums `next` when given (the next row: [`fold_with_next`]),
/// returned third.
#[inline(always)]
unsafe fn raw_stats<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    abs: &mut [f32],
    marks: &mut [f32],
    row_sum: Option<f32>,
    next: Option<&[S]>,
) -> (Raw<f32>, f64, Option<f32>) {
    let eps = ctx.eps as f32;
    let inv_n = ctx.inv_n;
    let n = x.len();
    let hi = if ctx.centred { row_sum.unwrap_or_else(|| sum::<V, S>(x, |v| v)) * inv_n } else { 0.0 };
    let mut next_sum = None;
    let (raw, z_max) = match ctx.kind {
        NormKind::Rms | NormKind::UnitL2 => {
            let q = sum::<V, S>(x, |v| v * v);
            (stats::finish_l2(ctx, hi, q, eps), (q as f64 * sum_slack(n)).sqrt() + ABS_SLACK)
        }
        NormKind::Layer => {
            let h = V::splat(hi);
            let zero = V::splat(0.0);
            let ([d, q], ahead) = fold_with_next::<V, S, 2>(x, [zero; 2], |v, [d, q]| {
                let t = v - h;
                [d + t, q + t * t]
            }, next);
            next_sum = ahead;
            let raw = stats::finish_layer(ctx, hi, lanes::combine(d.to_array()), lanes::combine(q.to_array()), eps);
            // |t| <= sqrt(sum t^2) for t = x - hi, and z = t - lo rounds once.
            let t_max = (raw.sumsq as f64 * sum_slack(n)).sqrt() + ABS_SLACK;
            (raw, (t_max + (raw.lo as f64).abs()) * (1.0 + 2f64.powi(-22)))
        }
        NormKind::TopK { k } if stats::uses_lane_maxima(n, k) => {
            let (lo, stat, check, ahead) = top_k_lane_maxima::<V, S>(ctx, x, k, hi, abs, marks, next);
            next_sum = ahead;
            (stats::finish_scaled(ctx, hi, lo, stat, check, eps), check as f64 * sum_slack(n) + ABS_SLACK)
        }
        NormKind::LInf if ctx.centred => {
            let (lo, maxima, ahead) = lo_and_lane_max_abs::<V, S>(ctx, x, hi, next);
            next_sum = ahead;
            let stat = lanes::max_of(maxima.to_array());
            // `check`, the lane sum of |z|, is only needed where it may be non-finite.
            let check = if check_sum_unneeded(hi, lo, stat, n) {
                stat
            } else {
                let (h, l) = (V::splat(hi), V::splat(lo));
                sum::<V, S>(x, |v| ((v - h) - l).abs())
            };
            (stats::finish_scaled(ctx, hi, lo, stat, check, eps), stat as f64)
        }
        NormKind::L1 | NormKind::LInf | NormKind::TopK { .. } => {
            let lo = if ctx.centred {
                let h = V::splat(hi);
                let ([d], ahead) = fold_with_next::<V, S, 1>(x, [V::splat(0.0)], |v, [d]| [d + (v - h)], next);
                next_sum = ahead;
                lanes::combine(d.to_array()) * inv_n
            } else {
                0.0
            };
            let (stat, check) = if ctx.centred {
                let (h, l) = (V::splat(hi), V::splat(lo));
                abs_statistic::<V, S>(ctx, x, |v| ((v - h) - l).abs(), abs)
            } else {
                // `(v - 0) - 0` is `v` exactly (signed zeros and NaN included): skip it.
                abs_statistic::<V, S>(ctx, x, |v| v.abs(), abs)
            };
            // The maximum of |z| itself for L-inf, else |z| <= sum |z| (`check`).
            let z_max = if ctx.kind == NormKind::LInf { stat as f64 } else { check as f64 * sum_slack(n) + ABS_SLACK };
            (stats::finish_scaled(ctx, hi, lo, stat, check, eps), z_max)
        }
    };
    (raw, z_max, next_sum)
}

/// `(statistic, check)` of L1, L-inf or Top-k from `|z| = z_abs(v)`: the mean, the maximum or
/// the top-k mean of `|z|`, and the lane sum of `|z|`.
#[inline(always)]
unsafe fn abs_statistic<V: F32x16, S: Storage>(ctx: &RowCtx<f32>, x: &[S], z_abs: impl Fn(V) -> V, abs: &mut [f32]) -> (f32, f32) {
    match ctx.kind {
        NormKind::L1 => {
            let r = sum::<V, S>(x, z_abs);
            (r * ctx.inv_n, r)
        }
        NormKind::LInf => {
            let [m, s] = fold::<V, S, 2>(x, |v, [m, s]| {
                let a = z_abs(v);
                [V::max_gt(a, m), s + a]
            });
            (lanes::max_of(m.to_array()), lanes::combine(s.to_array()))
        }
        NormKind::TopK { k } => top_k_statistic::<V, S>(x, k, z_abs, &mut abs[..x.len()]),
        _ => unreachable!("abs_statistic is for L1, L-inf and Top-k"),
    }
}

/// Top-k's `(mean of the k largest |z|, lane sum of |z|)` on rows where the lane maxima are
/// not used (k > 16 or short rows): `|z|` written to `abs` while it is summed, then the
/// selection of `stats::topk_mean`.
#[inline(always)]
unsafe fn top_k_statistic<V: F32x16, S: Storage>(x: &[S], k: usize, z_abs: impl Fn(V) -> V, abs: &mut [f32]) -> (f32, f32) {
    let n = x.len();
    let full = n - n % W;
    let (xp, ap) = (x.as_ptr(), abs.as_mut_ptr());
    let mut s = V::splat(0.0);
    each_group!(full, |i| {
        let a = z_abs(S::load(xp.add(i)));
        a.store_f32(ap.add(i));
        s = s + a;
    });
    if full < n {
        let a = z_abs(load_partial::<V, S>(&x[full..]));
        let t = a.to_array();
        abs[full..].copy_from_slice(&t[..n - full]);
        s = V::select_first(n - full, s + a, s);
    }
    (stats::topk_mean(&mut abs[..n], k), lanes::combine(s.to_array()))
}

/// Top-k's `(lo, mean of the k largest |z|, check)` where the lane maxima bound the selection
/// (`stats::uses_lane_maxima`), with `hi` computed: the values `stats::compute` gives, with one
/// pass over the row beyond L-inf's. `check` is the lane sum of `|z|`, or, where that sum is
/// surely finite (`check_sum_unneeded`), the largest `|z|`: the same rescue decision, as for
/// L-inf.
///
/// The k-th largest of the 16 lane maxima, `t0`, bounds the row's k-th largest `|z|` from
/// below, so only the few values at or above it (about 11 in a Gaussian row of 1024 or 4096 at
/// k = 8) are candidates. A pass marks the places that may hold one ([`mark_pairs`]), and
/// [`top_k_of_marked`] gathers the marked values `>= t0` and selects the k largest of them,
/// sorted as `stats::top_k_desc` does. The mean of those k values does not depend on how they
/// were found.
///
/// The lane maxima come from the pass before. Centred, that is the pass that sums `t = x - hi`
/// for `lo` ([`lo_and_lane_max_abs`]), and the marking pass tests `|t|` against a bound `c` just
/// under `t0` ([`bound_before_difference`]) rather than computing `z = t - lo`, and sums
/// nothing when the sum is not needed. f16 and bf16 rows whose mean is small beside `c` test
/// `|x|` itself, their magnitude bits as integers without widening (`F32x16::mark_pairs_16`,
/// against the same kind of bound from `c` and `hi`, rounded down into the type). Uncentred
/// (`z = x`), or where no such bound helps, one pass takes the maxima of `|x|`, and the
/// marking pass tests and sums `|z|` itself. Either way the maxima are those of `|z|` itself,
/// never NaN (`max_gt`/`min_lt` skip it; a row with a NaN or an infinity has a non-finite sum
/// and is rescued anyway).
#[inline(always)]
unsafe fn top_k_lane_maxima<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    k: usize,
    hi: f32,
    cand: &mut [f32],
    marks: &mut [f32],
    next: Option<&[S]>,
) -> (f32, f32, f32, Option<f32>) {
    let n = x.len();
    assert!(cand.len() >= n && marks.len() * 2 >= n / (2 * W) + 8, "top-k scratch too small");
    let mp = marks.as_mut_ptr() as *mut u16;
    let (lo, stat, check, next_sum) = if ctx.centred {
        let h = V::splat(hi);
        let (lo, maxima, next_sum) = lo_and_lane_max_abs::<V, S>(ctx, x, hi, next);
        let t0 = maxima.kth_largest_magnitude(k);
        let z_max = lanes::max_of(maxima.to_array());
        let l = V::splat(lo);
        let check = match bound_before_difference(t0, lo) {
            Some(c) if check_sum_unneeded(hi, lo, z_max, n) => {
                // 16-bit storage: its magnitude bits against a bound of |x| itself, where there
                // is one, without widening; else |t| against c.
                let done = match bound_before_difference(c, hi).and_then(S::magnitude_floor_bits) {
                    Some(bound) => V::mark_pairs_16(x.as_ptr() as *const u16, n / W, bound, mp),
                    None => false,
                };
                if !done {
                    mark_pairs::<V, S, false>(x, |v| (v - h).abs(), c, mp);
                }
                z_max
            }
            _ => mark_pairs::<V, S, true>(x, |v| ((v - h) - l).abs(), t0, mp),
        };
        let stat = top_k_of_marked::<V, S>(x, |v| ((v - h) - l).abs(), |v| ((v - hi) - lo).abs(), t0, k, cand, mp);
        (lo, stat, check, next_sum)
    } else {
        let [m] = fold::<V, S, 1>(x, |v, [m]| [V::max_gt(v.abs(), m)]);
        let t0 = m.kth_largest_magnitude(k);
        let check = mark_pairs::<V, S, true>(x, |v| v.abs(), t0, mp);
        (0.0, top_k_of_marked::<V, S>(x, |v| v.abs(), |v| v.abs(), t0, k, cand, mp), check, None)
    };
    (lo, stat, check, next_sum)
}

/// A bound `m > 0` such that every f32 `u` with `|fl(u - v)| >= a` has `|u| >= m`: rounding to
/// nearest gives `|u - v| >= a (1 - 2^-24) - 2^-150`, so `|u| >= a (1 - 2^-24) - 2^-150 - |v|`;
/// computed in f64 with larger slacks (its own rounding is far smaller) and rounded down to
/// f32. None when that is not positive (`a` zero or small beside `v`; also for a NaN or
/// infinite `a`, where the row is rescued).
///
/// Top-k uses it twice ([`top_k_lane_maxima`]): with `(t0, lo)`, a bound on `|t|` for every
/// candidate (`|z| >= t0`, `z = fl(t - lo)`); with `(c, hi)`, a bound on `|x|` for every value
/// with `|t| >= c`, `t = fl(x - hi)`.
fn bound_before_difference(a: f32, v: f32) -> Option<f32> {
    let b = (a as f64) * (1.0 - 2f64.powi(-22)) - (v as f64).abs() - 2f64.powi(-148);
    let m = b as f32;
    let m = if m as f64 > b { f32::from_bits(m.to_bits() - 1) } else { m };
    (b.is_finite() && m > 0.0 && m.is_finite()).then_some(m)
}

/// `lo` of a centred row (`hi` given) and each lane's largest `|z|`, from the one pass that
/// sums `t = x - hi`: it also keeps each lane's largest and smallest `t`, and since
/// `z = fl(t - lo)` is monotone in `t` and rounding is symmetric, a lane's largest `|z|` is
/// exactly `max(fl(t_max - lo), fl(lo - t_min))`. Never NaN (`max_gt`/`min_lt` skip it; a row
/// with a NaN or an infinity has a non-finite `hi` or `lo`, which the callers check).
#[inline(always)]
unsafe fn lo_and_lane_max_abs<V: F32x16, S: Storage>(ctx: &RowCtx<f32>, x: &[S], hi: f32, next: Option<&[S]>) -> (f32, V, Option<f32>) {
    let zero = V::splat(0.0);
    let h = V::splat(hi);
    let init = [zero, V::splat(f32::NEG_INFINITY), V::splat(f32::INFINITY)];
    let ([d, t_max, t_min], next_sum) = fold_with_next::<V, S, 3>(x, init, |v, [d, mx, mn]| {
        let t = v - h;
        [d + t, V::max_gt(t, mx), V::min_lt(t, mn)]
    }, next);
    let lo = lanes::combine(d.to_array()) * ctx.inv_n;
    let l = V::splat(lo);
    // Clamped at +0: a lane whose values were all NaN has no maximum (and a NaN row is
    // rescued), and `max_gt` turns -0 into +0, as the maxima of `|z|` start.
    (lo, V::max_gt(V::max_gt(t_max - l, l - t_min), zero), next_sum)
}

/// The marking pass of [`top_k_lane_maxima`]: `a = f(v)` for each group `v` of 16 values, and
/// per two groups (32 values), the mask `F32x16::ge_mask` of the larger of their `a` against
/// `c`, at `marks` (one u16 per pair, stored as little-endian words of four; room for
/// n/32 + 8). With `SUM`, returns the lane sum of `a` over the row (the same sum, in the same
/// order, as `lanes::sum_map`), else 0.
///
/// Candidates are rare and scattered (about 11 per Gaussian row of 1024 or 4096 at k = 8):
/// compacting them in the pass, branch-free, cost two vector instructions per 16 values, and a
/// branch per hit would be mispredicted about once per hit. So the pass only records masks,
/// one per 32 values (a maximum per 16 values instead of a comparison, a move of the mask to a
/// general register and a store), and [`gather_marked`] tests both values of each marked
/// lane.
#[inline(always)]
unsafe fn mark_pairs<V: F32x16, S: Storage, const SUM: bool>(x: &[S], f: impl Fn(V) -> V, c: f32, marks: *mut u16) -> f32 {
    let n = x.len();
    let full = n - n % W;
    let pairs = full / (2 * W);
    let xp = x.as_ptr();
    let cv = V::splat(c);
    let mut s = V::splat(0.0);
    // The mask of pair p (a macro, not a closure: a closure called from several places was
    // not inlined, and its SIMD operations became calls).
    macro_rules! pair {
        ($p:expr) => {{
            let i = 2 * W * $p;
            let (a0, a1) = (f(S::load(xp.add(i))), f(S::load(xp.add(i + W))));
            if SUM {
                s = s + a0;
                s = s + a1;
            }
            V::max_gt(a0, a1).ge_mask(cv) as u64
        }};
    }
    // Four masks per store: the word `gather_marked` loads (a load that spans several recent
    // stores waits for them to reach the cache).
    let mut p = 0;
    while p + 4 <= pairs {
        let word = pair!(p) | pair!(p + 1) << 16 | pair!(p + 2) << 32 | pair!(p + 3) << 48;
        (marks.add(p) as *mut u64).write_unaligned(word);
        p += 4;
    }
    while p < pairs {
        *marks.add(p) = pair!(p) as u16;
        p += 1;
    }
    if 2 * W * pairs < full {
        let a = f(S::load(xp.add(2 * W * pairs)));
        if SUM {
            s = s + a;
        }
        *marks.add(pairs) = a.ge_mask(cv) as u16;
    }
    if SUM && full < n {
        let a = f(load_partial::<V, S>(&x[full..]));
        s = V::select_first(n - full, s + a, s);
    }
    if SUM {
        lanes::combine(s.to_array())
    } else {
        0.0
    }
}

/// The mean of the k largest `|z|` of a row from the marks of [`mark_pairs`] (which cover at
/// least every value of the whole groups with `|z| >= t0`; `t0` at most the k-th largest `|z|`):
/// the marked values `>= t0` ([`gather_marked`]) and those of the tail (`z_abs`) gathered into
/// `cand`, and the k largest of them selected and sorted as `stats::top_k_desc` does
/// (`F32x16::top_k_of_few` when they are few).
#[inline(always)]
unsafe fn top_k_of_marked<V: F32x16, S: Storage>(
    x: &[S],
    z_abs: impl Fn(V) -> V,
    z_one: impl Fn(f32) -> f32,
    t0: f32,
    k: usize,
    cand: &mut [f32],
    marks: *mut u16,
) -> f32 {
    let n = x.len();
    let full = n - n % W;
    let mut kept = gather_marked::<S>(&x[..full], marks, z_one, t0, cand);
    if full < n {
        let a = z_abs(load_partial::<V, S>(&x[full..]));
        for &v in &a.to_array()[..n - full] {
            if v >= t0 {
                cand[kept] = v;
                kept += 1;
            }
        }
    }
    if k <= kept && kept <= rank_select::FEW {
        // The candidates passed an ordered `>=`: magnitudes, no NaN.
        V::top_k_of_few(cand, kept, k);
    } else {
        stats::top_k_of_candidates(&mut cand[..n], kept, k);
    }
    stats::mean_of_sorted_top_k(cand, k)
}

/// `|z| = z_one(x_j)` of both values (j and j + 16) of each marked lane of the pair masks at
/// `marks` ([`mark_pairs`] over `x`, whole groups only), kept in `cand` when `>= t0`; returns
/// how many. `z_one` performs the f32 operations of the passes on one value: the same bits.
/// The masks past the last pair, up to a multiple of four, are cleared here.
///
/// Four masks make a word: bit 16 q + b of word w stands for values 128 w + 32 q + b and 16
/// more (little-endian, x86 only). Marked values are scattered at random, and many words hold
/// none: a branch on each word would be mispredicted often. So the words with a mark are
/// listed first (a store and an add per word, no branch), and only those are visited. Each
/// value tested is written to `cand[kept]` and counted only if kept: no branch on the test.
#[inline(always)]
unsafe fn gather_marked<S: Storage>(x: &[S], marks: *mut u16, z_one: impl Fn(f32) -> f32, t0: f32, cand: &mut [f32]) -> usize {
    let full = x.len();
    let masks = full.div_ceil(2 * W);
    let words = masks.div_ceil(4);
    for m in masks..4 * words {
        *marks.add(m) = 0;
    }
    let word = |w: usize| (marks.add(4 * w) as *const u64).read_unaligned();
    let last = cand.len() - 1;
    let mut kept = 0usize;
    // The two values of the lowest marked lane of `bits` (word w). The second is past the
    // row's whole groups only in a lone last group: then it is the first again, not counted.
    let mut take = |w: usize, bits: u64| {
        let b = bits.trailing_zeros() as usize;
        let j = 128 * w + 2 * (b & !15) + (b & 15);
        let z = z_one(x.get_unchecked(j).to_f32());
        *cand.get_unchecked_mut(kept.min(last)) = z;
        kept += (z >= t0) as usize;
        let second = j + W < full;
        let z = z_one(x.get_unchecked(if second { j + W } else { j }).to_f32());
        *cand.get_unchecked_mut(kept.min(last)) = z;
        kept += (second && z >= t0) as usize;
    };
    let mut listed = [0u16; 64];
    for start in (0..words).step_by(listed.len()) {
        let end = words.min(start + listed.len());
        let mut hit_words = 0usize;
        for w in start..end {
            *listed.get_unchecked_mut(hit_words) = (w - start) as u16;
            hit_words += (word(w) != 0) as usize;
        }
        for &l in listed.get_unchecked(..hit_words) {
            let w = start + l as usize;
            let mut bits = word(w);
            while bits != 0 {
                take(w, bits);
                bits &= bits - 1;
            }
        }
    }
    kept
}

/// `lanes::sum_map(x, f)` over the storage.
#[inline(always)]
unsafe fn sum<V: F32x16, S: Storage>(x: &[S], f: impl Fn(V) -> V) -> f32 {
    let [s] = fold::<V, S, 1>(x, |v, [s]| [s + f(v)]);
    lanes::combine(s.to_array())
}

/// K lane accumulators (each starting at +0, as in `lanes`) updated by `step` with 16
/// values at a time; the row's tail (fewer than 16 values) updates only its own lanes.
#[inline(always)]
unsafe fn fold<V: F32x16, S: Storage, const K: usize>(x: &[S], step: impl Fn(V, [V; K]) -> [V; K]) -> [V; K] {
    fold_from::<V, S, K>(x, [V::splat(0.0); K], step)
}

/// [`fold_from`] over `x`, and along with it, when `next` (a row of the same length) is given,
/// the sum of `next`'s values exactly as [`sum`] with `|v| v` computes it (returned second).
///
/// Why: the first pass over a centred row only sums it (for `hi`), and that sum is one
/// dependent add per register per 16 values: the pass is bound by the add's latency, not by
/// the work. So the next row's sum is computed in this row's second pass (also a chain of
/// adds, on independent registers), where it costs little; the next row then starts at its
/// second pass. Its values are read a row ahead of their use, which also starts their fetch
/// from memory early. Same values, same lanes, same order: the same bits.
#[inline(always)]
unsafe fn fold_with_next<V: F32x16, S: Storage, const K: usize>(
    x: &[S],
    init: [V; K],
    step: impl Fn(V, [V; K]) -> [V; K],
    next: Option<&[S]>,
) -> ([V; K], Option<f32>) {
    let Some(nx) = next else {
        return (fold_from::<V, S, K>(x, init, step), None);
    };
    assert_eq!(nx.len(), x.len(), "the next row has another length");
    let n = x.len();
    let full = n - n % W;
    let (p, q) = (x.as_ptr(), nx.as_ptr());
    let mut acc = init;
    let mut s = V::splat(0.0);
    each_group!(full, |i| {
        acc = step(S::load(p.add(i)), acc);
        s = s + S::load(q.add(i));
    });
    if full < n {
        let next = step(load_partial::<V, S>(&x[full..]), acc);
        for j in 0..K {
            acc[j] = V::select_first(n - full, next[j], acc[j]);
        }
        s = V::select_first(n - full, s + load_partial::<V, S>(&nx[full..]), s);
    }
    (acc, Some(lanes::combine(s.to_array())))
}

/// [`fold`] from the given initial accumulators.
#[inline(always)]
unsafe fn fold_from<V: F32x16, S: Storage, const K: usize>(x: &[S], init: [V; K], step: impl Fn(V, [V; K]) -> [V; K]) -> [V; K] {
    let n = x.len();
    let full = n - n % W;
    let p = x.as_ptr();
    let mut acc = init;
    each_group!(full, |i| {
        acc = step(S::load(p.add(i)), acc);
    });
    if full < n {
        let next = step(load_partial::<V, S>(&x[full..]), acc);
        for j in 0..K {
            acc[j] = V::select_first(n - full, next[j], acc[j]);
        }
    }
    acc
}

/// The output row `y = ((x - hi) - lo) * s * w + b` (centred) or `x * s * w + b`, rounded once
/// into the storage type; returns the number of non-finite outputs. One pass: the affine
/// terms present, and whether non-finite outputs are possible at all (`check`), are chosen
/// here, outside the loop.
#[inline(always)]
unsafe fn normalize_store<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    y: &mut [S],
    raw: &Raw<f32>,
    affine: &RowAffine,
    check: bool,
) -> u64 {
    let p = Affine { hi: raw.hi, lo: raw.lo, s: raw.s, terms: *affine };
    let (has_w, has_b) = (!affine.w.is_empty(), !affine.b.is_empty());
    let stream = ctx.stream_output;
    if check {
        store_row_variant::<V, S, true>(ctx.centred, has_w, has_b, x, y, &p, stream)
    } else {
        store_row_variant::<V, S, false>(ctx.centred, has_w, has_b, x, y, &p, stream)
    }
}

/// [`store_row`] for the centring and affine terms given at run time.
#[inline(always)]
unsafe fn store_row_variant<V: F32x16, S: Storage, const CHECK: bool>(
    centred: bool,
    has_w: bool,
    has_b: bool,
    x: &[S],
    y: &mut [S],
    p: &Affine,
    stream: bool,
) -> u64 {
    match (centred, has_w, has_b) {
        (false, false, false) => store_row::<V, S, false, false, false, CHECK>(x, y, p, stream),
        (false, true, false) => store_row::<V, S, false, true, false, CHECK>(x, y, p, stream),
        (false, false, true) => store_row::<V, S, false, false, true, CHECK>(x, y, p, stream),
        (false, true, true) => store_row::<V, S, false, true, true, CHECK>(x, y, p, stream),
        (true, false, false) => store_row::<V, S, true, false, false, CHECK>(x, y, p, stream),
        (true, true, false) => store_row::<V, S, true, true, false, CHECK>(x, y, p, stream),
        (true, false, true) => store_row::<V, S, true, false, true, CHECK>(x, y, p, stream),
        (true, true, true) => store_row::<V, S, true, true, true, CHECK>(x, y, p, stream),
    }
}

/// What the output of a row is made of.
struct Affine<'a> {
    hi: f32,
    lo: f32,
    s: f32,
    terms: RowAffine<'a>,
}

/// Values before the first address of `y` aligned to a group's size (16 values): where the
/// streaming stores of a row can start. Fewer than 16.
fn stream_head<S>(y: *const S) -> usize {
    let group = W * std::mem::size_of::<S>();
    let mis = y as usize % group;
    if mis == 0 {
        0
    } else {
        (group - mis) / std::mem::size_of::<S>()
    }
}

/// [`normalize_store`] for one choice of centring, weight and bias. `CHECK`: whether some
/// output may be non-finite (else none is, and the groups are stored without looking).
/// `stream`: store the 16-value groups with non-temporal stores; they then start at the first
/// aligned address of `y` (`head` values in, which the caller found: [`stream_head`]).
///
/// A row of 16 or more values has no partial group: the values before the first group (the
/// misaligned head when streaming) are covered by an ordinary store of the row's first 16
/// values, and those after the last group (the tail) by one of its last 16. Those stores
/// overlap the groups' and write the same bits there (the output is element-wise), and cost
/// two full-width stores instead of two copies through a buffer.
#[inline(always)]
unsafe fn store_row<V: F32x16, S: Storage, const CENTRED: bool, const HAS_W: bool, const HAS_B: bool, const CHECK: bool>(
    x: &[S],
    y: &mut [S],
    p: &Affine,
    stream: bool,
) -> u64 {
    let n = x.len();
    if n < W {
        return store_short::<V, S, CENTRED, HAS_W, HAS_B>(x, y, p);
    }
    let head = p.terms.head;
    debug_assert_eq!(head, if stream { stream_head(y.as_ptr()) } else { 0 });
    let full = head + (n - head) / W * W;
    let mut maybe_bad = false;
    if head > 0 {
        maybe_bad |= store_group_at::<V, S, CENTRED, HAS_W, HAS_B>(x, y, p, 0);
    }
    if full < n {
        maybe_bad |= store_group_at::<V, S, CENTRED, HAS_W, HAS_B>(x, y, p, n - W);
    }
    let (xg, yg) = (&x[head..full], &mut y[head..full]);
    // Non-finite outputs (NaN included) are rare: only when some value was large enough to be
    // one is the row stored again with the NaN-exact rounding (bf16), and counted exactly from
    // the stored bits.
    maybe_bad |= if stream {
        store_groups::<V, S, CENTRED, HAS_W, HAS_B, CHECK, false, true>(xg, yg, p)
    } else {
        store_groups::<V, S, CENTRED, HAS_W, HAS_B, CHECK, false, false>(xg, yg, p)
    };
    if !maybe_bad {
        return 0;
    }
    if S::NON_NAN_STORE_IS_PARTIAL {
        if stream {
            store_groups::<V, S, CENTRED, HAS_W, HAS_B, true, true, true>(xg, yg, p);
        } else {
            store_groups::<V, S, CENTRED, HAS_W, HAS_B, true, true, false>(xg, yg, p);
        }
    }
    S::count_nonfinite(y)
}

/// The 16 outputs from value `at` of the row (`at + 16 <= n`), by an ordinary store with the
/// NaN-exact rounding, as [`store_groups`] stores a group. Returns whether some of them may be
/// non-finite.
#[inline(always)]
unsafe fn store_group_at<V: F32x16, S: Storage, const CENTRED: bool, const HAS_W: bool, const HAS_B: bool>(
    x: &[S],
    y: &mut [S],
    p: &Affine,
    at: usize,
) -> bool {
    let g = at..at + W;
    let (x, y) = (&x[g.clone()], &mut y[g.clone()]);
    let zero = V::splat(0.0);
    let wv = if HAS_W { V::load_f32(p.terms.w[g.clone()].as_ptr()) } else { zero };
    let bv = if HAS_B { V::load_f32(p.terms.b[g].as_ptr()) } else { zero };
    let r = output::<V, CENTRED, HAS_W, HAS_B>(S::load(x.as_ptr()), wv, bv, p);
    S::store(r, y.as_mut_ptr());
    zero.max_abs_bits(r).to_array().iter().any(|&m| m.to_bits() > S::MAX_FINITE_BITS)
}

/// A row of fewer than 16 values, through a zero-padded register; returns the number of
/// non-finite outputs, counted from the bits.
#[inline(always)]
unsafe fn store_short<V: F32x16, S: Storage, const CENTRED: bool, const HAS_W: bool, const HAS_B: bool>(x: &[S], y: &mut [S], p: &Affine) -> u64 {
    let zero = V::splat(0.0);
    let wv = if HAS_W { load_partial::<V, f32>(p.terms.w) } else { zero };
    let bv = if HAS_B { load_partial::<V, f32>(p.terms.b) } else { zero };
    let r = output::<V, CENTRED, HAS_W, HAS_B>(load_partial::<V, S>(x), wv, bv, p);
    store_partial::<V, S>(r, y);
    // The padding lanes were computed but not stored.
    S::count_nonfinite(y)
}

/// The output of 16 values, the expression of `kernel::normalize_to` operation for operation.
#[inline(always)]
unsafe fn output<V: F32x16, const CENTRED: bool, const HAS_W: bool, const HAS_B: bool>(v: V, w: V, b: V, p: &Affine) -> V {
    let s = V::splat(p.s);
    let mut r = if CENTRED { ((v - V::splat(p.hi)) - V::splat(p.lo)) * s } else { v * s };
    if HAS_W {
        r = r * w;
    }
    if HAS_B {
        r = r + b;
    }
    r
}

/// The whole 16-value groups of [`store_row`]; returns whether some `|y|` may be non-finite
/// in the storage type (or is NaN), if `CHECK` (else false). `EXACT_NAN`: round NaN exactly
/// too (without `CHECK` there is no NaN). `NT`: non-temporal stores (`y` aligned to a group).
#[inline(always)]
unsafe fn store_groups<
    V: F32x16,
    S: Storage,
    const CENTRED: bool,
    const HAS_W: bool,
    const HAS_B: bool,
    const CHECK: bool,
    const EXACT_NAN: bool,
    const NT: bool,
>(
    x: &[S],
    y: &mut [S],
    p: &Affine,
) -> bool {
    let full = x.len() - x.len() % W;
    let zero = V::splat(0.0);
    // The weight and bias of these groups, in register order.
    let (wl, bl) = (p.terms.wl, p.terms.bl);
    assert!((!HAS_W || wl.len() >= full) && (!HAS_B || bl.len() >= full), "affine terms shorter than the row");
    let (xp, yp, wp, bp) = (x.as_ptr(), y.as_mut_ptr(), wl.as_ptr(), bl.as_ptr());
    let mut big = zero;
    each_group!(full, |i| {
        let wv = if HAS_W { V::load_lanes(wp.add(i)) } else { zero };
        let bv = if HAS_B { V::load_lanes(bp.add(i)) } else { zero };
        let r = output::<V, CENTRED, HAS_W, HAS_B>(S::load(xp.add(i)), wv, bv, p);
        if CHECK {
            big = big.max_abs_bits(r);
        }
        match (EXACT_NAN, NT) {
            (true, false) => S::store(r, yp.add(i)),
            (false, false) => S::store_non_nan(r, yp.add(i)),
            (true, true) => S::store_nt(r, yp.add(i)),
            (false, true) => S::store_non_nan_nt(r, yp.add(i)),
        }
    });
    CHECK && big.to_array().iter().any(|&m| m.to_bits() > S::MAX_FINITE_BITS)
}

#[cfg(test)]
mod tests;
