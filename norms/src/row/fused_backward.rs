//! The row backward with f32 accumulation over f32, f16 or bf16 storage, in explicit SIMD:
//! the same numbers as the generic row backward (`kernel::row_backward` through
//! `row::backward_row`), bit for bit, in three or four passes over a row instead of a dozen.
//!
//! # Why a second implementation
//! The generic backward widens `x` and `dy` into scratch rows and makes one autovectorised
//! pass per step (centre, scale, weight gradient, bias gradient, weighting, dot product,
//! gradient, mean, subtraction, narrowing, non-finite count), and Top-k selects by sorting
//! the row's candidates and building a mask of booleans. Rows sit in L1, so those
//! instructions, not memory, set its speed: on one thread of the AVX-512 guest, rows of
//! 1024 f32 in cache took 0.77 us (RMSNorm) to 1.89 us (Top-k, k = 8) against 0.15 and
//! 0.33 us for the fused forward (`examples/backward_wall.rs`, `examples/forward_wall.rs`).
//! Here the passes read the storage directly and each does several steps:
//! 1. `z` (centred), `x̂ = z s`, `g = dy w` and the lanes of `g · x̂`; the lanes' largest
//!    `|z|` (L-inf, Top-k) and the largest bits of `|z|` and `|dy|` (rows with a non-finite
//!    value go to the generic kernel, before anything is written);
//! 2. L-inf's argmax or Top-k's selection, from the lane maxima and the few values reaching
//!    them (`z` recomputed from `x`, a comparison per 16 values, and a sort of about 11);
//! 3. the weight and bias gradients and `dz`, written out when nothing follows (uncentred);
//!    L-inf's and Top-k's selected values set after it;
//! 4. centred: `dz - mean(dz)`, rounded into the storage type.
//!
//! The sums are chains of dependent additions (16 lanes, in element order, for the same
//! bits), so pass 1 does its other work beside the dot product's chain, and pass 3 beside
//! the chain of `dz`'s sum.
//!
//! # Why the results are identical
//! Every element goes through the same IEEE single operations, in the same order, as in
//! `kernel::row_backward` ([`F32x16`] never fuses a multiply-add); the two reductions
//! (`g · x̂` and the sum of `dz`) are the same 16-lane sums as `crate::lanes` (lane j takes
//! elements j, j + 16, ..., a tail only its lanes) with the same final combine; L-inf's argmax
//! is the first index of the largest `|z|` and Top-k's set is the k largest `|z|` with ties to
//! the lowest indices, as there; and the rounding into f16/bf16 is `Storage::store`, the same
//! bits as `Element::store_f32`. Rows the generic kernel treats specially go to it: a rescaled
//! row (`exp2 != 0`), non-finite statistics, a non-finite `z` or `dy` (a NaN's payload could
//! depend on the order of an operation's operands, which the compiler may swap in either
//! path), Top-k with k above 16 or more than [`CANDIDATES`] candidates; a non-finite weight
//! sends every row there ([`level_for`]). `fused_backward::tests` compares both paths bit for bit.

use super::fused::{cast, cast_mut, same, Level};
use super::kernel::{sign, Scratch};
use super::simd::{load_partial, store_partial, F32x16, Storage, W};
use super::stats::{RowCtx, RowStats};
use crate::accum::Real;
use crate::counters::Counters;
use crate::element::Element;
use crate::lanes;
use crate::spec::NormKind;

/// The most Top-k candidates (values at or above the k-th largest lane maximum) a row may
/// have here; about 11 in a Gaussian row of 1024 or 4096 at k = 8, all of them in a row of
/// one repeated value. Past it, the row goes to the generic kernel.
pub(crate) const CANDIDATES: usize = 64;

/// One gradient block's rows and what they write: the arguments of [`rows`], passed through
/// the per-level entry points of [`rows_at`] in one piece.
struct Block<'a, S> {
    ctx: &'a RowCtx<f32>,
    x: &'a [S],
    dy: &'a [S],
    dx: &'a mut [S],
    stats: &'a [RowStats],
    w: Option<&'a [f32]>,
    dw: Option<&'a mut [f32]>,
    db: Option<&'a mut [f32]>,
}

/// The level a backward with weight `w` runs [`backward_rows`] at: the CPU's
/// (`Level::detect`), or `Level::Generic` when the weight has a non-finite value (module
/// doc). Checked once per call, not per block: a block can be a single row.
pub(crate) fn level_for<A: Real>(w: Option<&[A]>) -> Level {
    match w {
        Some(w) if !w.iter().all(|v| v.to_f64().is_finite()) => Level::Generic,
        _ => Level::detect(),
    }
}

/// Backward of consecutive rows (one gradient block) by the explicit-SIMD kernel, when it
/// applies: the accumulator is f32, the storage f32, f16 or bf16, and `level` (from
/// [`level_for`], which sees the weight) is not generic. Adds to `dw` and `db` as the generic
/// kernel does. `None` otherwise, having touched nothing (the caller runs the generic kernel).
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_rows<T: Element, A: Real>(
    level: Level,
    ctx: &RowCtx<A>,
    xc: &[T],
    dyc: &[T],
    dxc: &mut [T],
    sc: &[RowStats],
    w: Option<&[A]>,
    dw: Option<&mut [A]>,
    db: Option<&mut [A]>,
    scr: &mut Scratch<A>,
    mask: &mut [bool],
) -> Option<Counters> {
    if level == Level::Generic || !same::<A, f32>() {
        return None;
    }
    // SAFETY (all casts below): A is f32 and T is the storage type named (checked by TypeId);
    // the casts change no type.
    let ctx = unsafe { &*(ctx as *const RowCtx<A> as *const RowCtx<f32>) };
    let w = w.map(|w| unsafe { cast::<A, f32>(w) });
    let dw = dw.map(|d| unsafe { cast_mut::<A, f32>(d) });
    let db = db.map(|d| unsafe { cast_mut::<A, f32>(d) });
    let scr = unsafe { &mut *(scr as *mut Scratch<A> as *mut Scratch<f32>) };
    macro_rules! block {
        ($s:ty) => {
            Block::<$s> { ctx, x: unsafe { cast(xc) }, dy: unsafe { cast(dyc) }, dx: unsafe { cast_mut(dxc) }, stats: sc, w, dw, db }
        };
    }
    Some(if same::<T, f32>() {
        rows_at::<f32>(level, block!(f32), scr, mask)
    } else if same::<T, half::f16>() {
        rows_at::<half::f16>(level, block!(half::f16), scr, mask)
    } else if same::<T, half::bf16>() {
        rows_at::<half::bf16>(level, block!(half::bf16), scr, mask)
    } else {
        return None;
    })
}

/// [`rows`] compiled for the given level (which the CPU supports: `Level::detect`). bf16
/// rows run the plain AVX2 layout: the even-odd one of the forward (`simd::avx2_even_odd`)
/// would need its weight and gradients in register order.
fn rows_at<S: Storage>(level: Level, block: Block<S>, scr: &mut Scratch<f32>, mask: &mut [bool]) -> Counters {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma,f16c,popcnt")]
        unsafe fn avx2<S: Storage>(block: Block<S>, scr: &mut Scratch<f32>, mask: &mut [bool]) -> Counters {
            rows::<super::simd::avx2::Avx2, S>(block, scr, mask)
        }
        #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
        unsafe fn avx512<S: Storage>(block: Block<S>, scr: &mut Scratch<f32>, mask: &mut [bool]) -> Counters {
            rows::<super::simd::avx512::Avx512, S>(block, scr, mask)
        }
        match level {
            // SAFETY: the level's features were detected at run time.
            Level::Avx512 | Level::Avx512Bf16 => return unsafe { avx512(block, scr, mask) },
            Level::Avx2 => return unsafe { avx2(block, scr, mask) },
            Level::Generic => {}
        }
    }
    generic_rows(block, scr, mask)
}

/// Every row of `block` by the generic kernel (a level without explicit SIMD).
fn generic_rows<S: Storage>(block: Block<S>, scr: &mut Scratch<f32>, mask: &mut [bool]) -> Counters {
    let Block { ctx, x, dy, dx, stats, w, dw, db } = block;
    super::backward_rows::<S, f32>(ctx, x, dy, dx, stats, w, dw, db, scr, mask)
}

#[cfg(feature = "test-hooks")]
thread_local! {
    /// Rows this thread's fused backward computed itself ([`rows`]); the tests check that
    /// ordinary rows do (the generic kernel gives the same bits, so only this count shows a
    /// fast path that quietly never runs).
    pub(crate) static FUSED_ROWS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The rows of one block: each by [`row`], or by the generic kernel where `row` declines.
#[inline(always)]
unsafe fn rows<V: F32x16, S: Storage>(block: Block<S>, scr: &mut Scratch<f32>, mask: &mut [bool]) -> Counters {
    let Block { ctx, x, dy, dx, stats, w, mut dw, mut db } = block;
    let n = scr.a.len();
    let mut c = Counters::default();
    for (r, st) in stats.iter().enumerate() {
        let span = r * n..(r + 1) * n;
        let (xr, dyr, dxr) = (&x[span.clone()], &dy[span.clone()], &mut dx[span]);
        c.nonfinite_out += match row::<V, S>(ctx, xr, dyr, dxr, st, w, dw.as_deref_mut(), db.as_deref_mut(), scr) {
            Some(bad) => {
                #[cfg(feature = "test-hooks")]
                FUSED_ROWS.with(|q| q.set(q.get() + 1));
                bad
            }
            None => super::backward_row::<S, f32>(ctx, xr, dyr, dxr, st, w, dw.as_deref_mut(), db.as_deref_mut(), scr, mask),
        };
    }
    c
}

/// Whether some lane of `bits` ([`F32x16::max_abs_bits`]) exceeds `max` (the bits of the
/// largest finite value).
#[inline(always)]
fn any_above<V: F32x16>(bits: V, max: u32) -> bool {
    bits.to_array().iter().any(|b| b.to_bits() > max)
}

/// The indices that L-inf's or Top-k's `dD/dz` is nonzero at, in increasing order: L-inf's
/// argmax, Top-k's k.
struct Selected {
    at: [u32; W],
    count: usize,
}

/// One row's backward, the same bits as `row::backward_row`; returns the number of
/// non-finite values in `dx`, or `None` (nothing written, `dw` and `db` untouched) for a row
/// the generic kernel must take (module doc).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn row<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    dy: &[S],
    dx: &mut [S],
    st: &RowStats,
    w: Option<&[f32]>,
    dw: Option<&mut [f32]>,
    db: Option<&mut [f32]>,
    scr: &mut Scratch<f32>,
) -> Option<u64> {
    let n = x.len();
    // As the generic kernel reads them (`A::from_f64`).
    let (s, hi, lo) = (st.rscale as f32, st.mean_hi as f32, st.mean_lo as f32);
    if st.exp2 != 0 || !(s.is_finite() && hi.is_finite() && lo.is_finite()) {
        return None;
    }
    let z = Centring { centred: ctx.centred, hi, lo };
    // Scratch rows: x̂; g, then dz. Only reached through these pointers below.
    let xhp = scr.a[..n].as_mut_ptr();
    let gp = scr.b[..n].as_mut_ptr();

    // Pass 1: x̂, g, the lanes of g · x̂, and of |z| and |dy| what the checks need.
    let (dot, zmax, bits) = match ctx.kind {
        NormKind::LInf | NormKind::TopK { .. } => first_pass::<V, S, true>(x, dy, w, z, s, xhp, gp),
        _ => first_pass::<V, S, false>(x, dy, w, z, s, xhp, gp),
    };
    if any_above(bits, f32::MAX.to_bits()) {
        return None;
    }
    // The selection, on |z| as the forward computed it.
    let selected = match ctx.kind {
        NormKind::LInf => Some(argmax::<V, S>(x, z, zmax)),
        NormKind::TopK { k } => Some(top_k::<V, S>(x, z, zmax, k)?),
        _ => None,
    };

    // Pass 2: the weight and bias gradients and dz = s (g - dD/dz-term), by kind; L-inf's and
    // Top-k's selected values set after it.
    let dot = dot.combine();
    let vs = V::splat(s);
    let rows = Rows { x: xhp, g: gp, dy, dw: dw.map(|d| d.as_mut_ptr()), db: db.map(|d| d.as_mut_ptr()) };
    let out = if ctx.centred { Out::Sum } else { Out::Write };
    match ctx.kind {
        NormKind::Rms | NormKind::Layer => {
            let c = V::splat(dot * ctx.inv_n);
            gradient::<V, S>(ctx, out, rows, dx, #[inline(always)] |g, xh| vs * (g - xh * c))
        }
        NormKind::UnitL2 if st.clamped => gradient::<V, S>(ctx, out, rows, dx, #[inline(always)] |g, _| vs * g),
        NormKind::UnitL2 => {
            let c = V::splat(dot);
            gradient::<V, S>(ctx, out, rows, dx, #[inline(always)] |g, xh| vs * (g - xh * c))
        }
        NormKind::L1 => {
            let c = V::splat(dot * ctx.c * ctx.inv_n);
            gradient::<V, S>(ctx, out, rows, dx, #[inline(always)] |g, xh| vs * (g - xh.sign() * c))
        }
        NormKind::LInf => {
            let at = selected.as_ref().map_or(0, |p| p.at[0] as usize);
            let c = dot * ctx.c;
            gradient::<V, S>(ctx, Out::Keep, rows, dx, #[inline(always)] |g, _| vs * g);
            *gp.add(at) = *gp.add(at) - s * (sign(*xhp.add(at)) * c);
            finish::<V, S>(ctx, std::slice::from_raw_parts(gp, n), None, dx)
        }
        NormKind::TopK { k } => {
            let c = dot * ctx.c / k as f32;
            let sel = selected.as_ref().map_or(&[][..], |p| &p.at[..p.count]);
            // Their gradients from g, before the pass scales g in place.
            let mut val = [0.0f32; W];
            for (v, &j) in val.iter_mut().zip(sel) {
                let j = j as usize;
                *v = s * (*gp.add(j) - sign(*xhp.add(j)) * c);
            }
            gradient::<V, S>(ctx, Out::Keep, rows, dx, #[inline(always)] |g, _| vs * g);
            for (&v, &j) in val.iter().zip(sel) {
                *gp.add(j as usize) = v;
            }
            finish::<V, S>(ctx, std::slice::from_raw_parts(gp, n), None, dx)
        }
    }
}

/// How a row's `z` comes from `x`: `fl(fl(x - hi) - lo)` when centred, else `x`.
#[derive(Clone, Copy)]
struct Centring {
    centred: bool,
    hi: f32,
    lo: f32,
}

impl Centring {
    /// The 16 values of `z` from `x[i..i + 16]`.
    #[inline(always)]
    unsafe fn group<V: F32x16, S: Storage>(self, x: *const S) -> V {
        let v = S::load::<V>(x);
        if self.centred {
            (v - V::splat(self.hi)) - V::splat(self.lo)
        } else {
            v
        }
    }
    /// The values of `z` from a tail of fewer than 16 (the other lanes from zeros).
    #[inline(always)]
    unsafe fn tail<V: F32x16, S: Storage>(self, x: &[S]) -> V {
        let v = load_partial::<V, S>(x);
        if self.centred {
            (v - V::splat(self.hi)) - V::splat(self.lo)
        } else {
            v
        }
    }
    /// One `|z|`, as the vector operations compute it.
    #[inline(always)]
    fn abs_one<S: Storage>(self, x: S) -> f32 {
        let v = x.widen_one();
        if self.centred {
            ((v - self.hi) - self.lo).abs()
        } else {
            v.abs()
        }
    }
}

/// Pass 1 of [`row`]: x̂ = z s to `xhp`, g = dy w (or dy) to `gp`; returns the lanes of
/// `g · x̂` (`lanes::sum_zip`'s), with `SELECT` the lanes' largest `|z|` (`lanes::max_map`'s,
/// else zeros), and the largest bits of `|z|` and `|dy|` ([`F32x16::max_abs_bits`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn first_pass<V: F32x16, S: Storage, const SELECT: bool>(
    x: &[S],
    dy: &[S],
    w: Option<&[f32]>,
    z: Centring,
    s: f32,
    xhp: *mut f32,
    gp: *mut f32,
) -> (V, V, V) {
    let n = x.len();
    let full = n - n % W;
    let zero = V::splat(0.0);
    let vs = V::splat(s);
    let (mut dot, mut zmax, mut bits) = (zero, zero, zero);
    let (xp, dyp) = (x.as_ptr(), dy.as_ptr());
    for i in (0..full).step_by(W) {
        let zv = z.group::<V, S>(xp.add(i));
        let d = S::load::<V>(dyp.add(i));
        bits = bits.max_abs_bits(zv).max_abs_bits(d);
        if SELECT {
            zmax = V::max_gt(zv.abs(), zmax);
        }
        let xh = zv * vs;
        xh.store_f32(xhp.add(i));
        let g = match w {
            Some(w) => d * V::load_f32(w.as_ptr().add(i)),
            None => d,
        };
        g.store_f32(gp.add(i));
        dot = dot + g * xh;
    }
    if full < n {
        let t = n - full;
        let zv = z.tail::<V, S>(&x[full..]);
        let d = load_partial::<V, S>(&dy[full..]);
        bits = V::select_first(t, bits.max_abs_bits(zv).max_abs_bits(d), bits);
        if SELECT {
            zmax = V::select_first(t, V::max_gt(zv.abs(), zmax), zmax);
        }
        let xh = zv * vs;
        store_partial::<V, f32>(xh, std::slice::from_raw_parts_mut(xhp.add(full), t));
        let g = match w {
            Some(w) => d * load_partial::<V, f32>(&w[full..]),
            None => d,
        };
        store_partial::<V, f32>(g, std::slice::from_raw_parts_mut(gp.add(full), t));
        dot = V::select_first(t, dot + g * xh, dot);
    }
    (dot, zmax, bits)
}

/// L-inf's argmax of `|z|`, lowest index on ties, as the generic kernel finds it: the largest
/// lane maximum (`lanes::max_of`), then the first value of that magnitude (0 if none), `z`
/// computed again from `x`.
#[inline(always)]
unsafe fn argmax<V: F32x16, S: Storage>(x: &[S], z: Centring, zmax: V) -> Selected {
    let best = lanes::max_of(zmax.to_array());
    let full = x.len() - x.len() % W;
    let t = V::splat(best);
    let mut at = None;
    for i in (0..full).step_by(W) {
        let m = z.group::<V, S>(x.as_ptr().add(i)).abs().ge_mask(t);
        if m != 0 {
            at = Some(i + m.trailing_zeros() as usize);
            break;
        }
    }
    let at = at.or_else(|| x[full..].iter().position(|&v| z.abs_one(v) == best).map(|j| full + j)).unwrap_or(0);
    let mut s = Selected { at: [0; W], count: 1 };
    s.at[0] = at as u32;
    s
}

/// Top-k's set: the k largest `|z|`, ties to the lowest indices (`kernel::topk_mask`), for
/// k <= 16 and rows of finite values, `z` computed again from `x`. The k-th largest of the
/// lane maxima is at most the k-th largest `|z|` (the maxima are values of k different
/// elements, or zeros of empty lanes), so the values reaching it are the only candidates;
/// with them in index order, the set is every value above the k-th largest candidate and the
/// first of those equal to it. `None` past [`CANDIDATES`] candidates.
#[inline(always)]
unsafe fn top_k<V: F32x16, S: Storage>(x: &[S], z: Centring, zmax: V, k: usize) -> Option<Selected> {
    if !(1..=W).contains(&k) {
        return None;
    }
    let n = x.len();
    let full = n - n % W;
    let t0 = zmax.kth_largest_magnitude(k);
    let tv = V::splat(t0);
    let mut val = [0.0f32; CANDIDATES];
    let mut idx = [0u32; CANDIDATES];
    let mut m = 0;
    for i in (0..full).step_by(W) {
        let mut bits = z.group::<V, S>(x.as_ptr().add(i)).abs().ge_mask(tv);
        while bits != 0 {
            let j = i + bits.trailing_zeros() as usize;
            if m == CANDIDATES {
                return None;
            }
            val[m] = z.abs_one(x[j]);
            idx[m] = j as u32;
            m += 1;
            bits &= bits - 1;
        }
    }
    for (j, &v) in x.iter().enumerate().skip(full) {
        let a = z.abs_one(v);
        if a >= t0 {
            if m == CANDIDATES {
                return None;
            }
            val[m] = a;
            idx[m] = j as u32;
            m += 1;
        }
    }
    if m < k {
        return None;
    }
    let mut sorted = val;
    sorted[..m].sort_unstable_by(|a, b| b.total_cmp(a));
    let t = sorted[k - 1];
    let above = val[..m].iter().filter(|&&v| v > t).count();
    let mut ties = k - above;
    let mut s = Selected { at: [0; W], count: 0 };
    for (&v, &j) in val[..m].iter().zip(&idx[..m]) {
        let take = v > t || (v == t && ties > 0);
        if v == t && take {
            ties -= 1;
        }
        if take {
            s.at[s.count] = j;
            s.count += 1;
        }
    }
    debug_assert_eq!(s.count, k);
    Some(s)
}

/// The rows pass 2 reads and writes: x̂ and g (scratch, from pass 1), `dy`, and the weight
/// and bias gradients it adds to.
#[derive(Clone, Copy)]
struct Rows<'a, S> {
    x: *const f32,
    g: *mut f32,
    dy: &'a [S],
    dw: Option<*mut f32>,
    db: Option<*mut f32>,
}

/// Where pass 2 puts `dz`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Out {
    /// Into `dx` (uncentred kinds without a selection: the last pass).
    Write,
    /// Into `g`, its lanes summed, then [`finish`] (centred kinds without a selection).
    Sum,
    /// Into `g` only (L-inf and Top-k, which set their selected values, then call [`finish`]).
    Keep,
}

/// Pass 2: `dw += dy x̂`, `db += dy`, and `dz = f(g, x̂)`, put where `out` says; returns the
/// non-finite count of `dx` unless `out` is [`Out::Keep`] (then `None`).
#[inline(always)]
unsafe fn gradient<V: F32x16, S: Storage>(ctx: &RowCtx<f32>, out: Out, rows: Rows<S>, dx: &mut [S], f: impl Fn(V, V) -> V) -> Option<u64> {
    let n = rows.dy.len();
    let full = n - n % W;
    let Rows { x: xp, g: gp, dy, dw, db } = rows;
    let (dyp, dp) = (dy.as_ptr(), dx.as_mut_ptr());
    let zero = V::splat(0.0);
    let (mut bits, mut sum) = (zero, zero);
    for i in (0..full).step_by(W) {
        let xh = V::load_f32(xp.add(i));
        if dw.is_some() || db.is_some() {
            let d = S::load::<V>(dyp.add(i));
            if let Some(p) = dw {
                (V::load_f32(p.add(i)) + d * xh).store_f32(p.add(i));
            }
            if let Some(p) = db {
                (V::load_f32(p.add(i)) + d).store_f32(p.add(i));
            }
        }
        let v = f(V::load_f32(gp.add(i)), xh);
        match out {
            Out::Write => {
                bits = bits.max_abs_bits(v);
                S::store(v, dp.add(i));
            }
            Out::Sum => {
                v.store_f32(gp.add(i));
                sum = sum + v;
            }
            Out::Keep => v.store_f32(gp.add(i)),
        }
    }
    if full < n {
        let t = n - full;
        let part = |p: *mut f32| std::slice::from_raw_parts_mut(p.add(full), t);
        let xh = load_partial::<V, f32>(std::slice::from_raw_parts(xp.add(full), t));
        let d = load_partial::<V, S>(&dy[full..]);
        if let Some(p) = dw {
            store_partial::<V, f32>(load_partial::<V, f32>(part(p)) + d * xh, part(p));
        }
        if let Some(p) = db {
            store_partial::<V, f32>(load_partial::<V, f32>(part(p)) + d, part(p));
        }
        let v = f(load_partial::<V, f32>(part(gp)), xh);
        match out {
            Out::Write => {
                bits = V::select_first(t, bits.max_abs_bits(v), bits);
                store_partial::<V, S>(v, &mut dx[full..]);
            }
            Out::Sum => {
                store_partial::<V, f32>(v, part(gp));
                sum = V::select_first(t, sum + v, sum);
            }
            Out::Keep => store_partial::<V, f32>(v, part(gp)),
        }
    }
    match out {
        Out::Write => Some(nonfinite::<V, S>(bits, dx)),
        Out::Sum => finish::<V, S>(ctx, std::slice::from_raw_parts(gp, n), Some(sum), dx),
        Out::Keep => None,
    }
}

/// The last pass: `dz` from `g` into `dx`, less its mean when centred
/// (`lanes::sum_map(dz) * inv_n`: the lanes `sum` if pass 2 summed them, else summed here).
#[inline(always)]
unsafe fn finish<V: F32x16, S: Storage>(ctx: &RowCtx<f32>, g: &[f32], sum: Option<V>, dx: &mut [S]) -> Option<u64> {
    let n = g.len();
    let full = n - n % W;
    let (gp, dp) = (g.as_ptr(), dx.as_mut_ptr());
    let zero = V::splat(0.0);
    let mean = if ctx.centred {
        let sum = match sum {
            Some(s) => s,
            None => {
                let mut s = zero;
                for i in (0..full).step_by(W) {
                    s = s + V::load_f32(gp.add(i));
                }
                if full < n {
                    s = V::select_first(n - full, s + load_partial::<V, f32>(&g[full..]), s);
                }
                s
            }
        };
        V::splat(sum.combine() * ctx.inv_n)
    } else {
        zero
    };
    let mut bits = zero;
    // Uncentred, `v - 0` would turn a -0 into +0: no subtraction then.
    for i in (0..full).step_by(W) {
        let v = V::load_f32(gp.add(i));
        let v = if ctx.centred { v - mean } else { v };
        bits = bits.max_abs_bits(v);
        S::store(v, dp.add(i));
    }
    if full < n {
        let v = load_partial::<V, f32>(&g[full..]);
        let v = if ctx.centred { v - mean } else { v };
        bits = V::select_first(n - full, bits.max_abs_bits(v), bits);
        store_partial::<V, S>(v, &mut dx[full..]);
    }
    Some(nonfinite::<V, S>(bits, dx))
}

/// The non-finite values of a stored `dx`, counted only where some value before rounding was
/// past the type's largest finite value (`bits`, [`F32x16::max_abs_bits`]).
#[inline(always)]
fn nonfinite<V: F32x16, S: Storage>(bits: V, dx: &[S]) -> u64 {
    if any_above(bits, S::MAX_FINITE_BITS) {
        super::count_nonfinite(dx)
    } else {
        0
    }
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests;

/// The unit tests of this module ([`crate::unit_tests`]).
#[cfg(feature = "test-hooks")]
pub(super) fn unit_tests() -> Vec<crate::unit_tests::UnitTest> {
    tests::TESTS.to_vec()
}
