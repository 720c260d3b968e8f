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
use super::simd::{load_partial, sfence, store_partial, write_set_bits, F32x16, MarkList, MarkedRow, Storage, W};
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
    /// [`Level::Avx512`], and bf16 rows rounded by the AVX512_BF16 instruction
    /// (`simd::avx512::Avx512Bf16`; the CPU also has AVX512DQ). f32 and f16 rows run
    /// [`Level::Avx512`]'s code.
    Avx512Bf16,
}

impl Level {
    /// The best level this CPU supports, or the one named by `NORMLAB_CPU_SIMD` (`avx512`,
    /// `avx2`, `generic`) when the CPU supports that one: for comparing the implementations on
    /// the same machine (`avx512` is AVX-512 without the AVX512_BF16 rounding). Detected once.
    pub(crate) fn detect() -> Level {
        use std::sync::OnceLock;
        static LEVEL: OnceLock<Level> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            let best = Level::best_supported();
            match std::env::var("NORMLAB_CPU_SIMD").ok().as_deref().map(str::trim) {
                Some("generic") => Level::Generic,
                Some("avx2") if best != Level::Generic => Level::Avx2,
                Some("avx512") if best == Level::Avx512Bf16 => Level::Avx512,
                _ => best,
            }
        })
    }

    fn best_supported() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if super::has_avx2() {
                if !is_x86_feature_detected!("avx512f") {
                    return Level::Avx2;
                }
                return if is_x86_feature_detected!("avx512bf16") && is_x86_feature_detected!("avx512dq") {
                    Level::Avx512Bf16
                } else {
                    Level::Avx512
                };
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

pub(super) fn same<T: 'static, U: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<U>()
}

/// # Safety
/// `T` and `U` are the same type.
pub(super) unsafe fn cast<T, U>(v: &[T]) -> &[U] {
    std::slice::from_raw_parts(v.as_ptr() as *const U, v.len())
}

/// # Safety
/// `T` and `U` are the same type.
pub(super) unsafe fn cast_mut<T, U>(v: &mut [T]) -> &mut [U] {
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
        use entry::{avx2, avx512, avx512_bf16};
        // One function per kind and level: each holds only its kind's passes, so that the
        // register allocation of one kind's loops does not depend on the others' code (in one
        // function for all kinds, a change to Top-k's passes made L-inf's pass spill an
        // accumulator to the stack, and the reverse).
        macro_rules! by_kind {
            ($f:ident) => {
                match ctx.kind {
                    NormKind::Rms => $f::rows::<S, { Kind::Rms as u8 }>(ctx, xc, yc, sc, w, b, scr),
                    NormKind::Layer => $f::rows::<S, { Kind::Layer as u8 }>(ctx, xc, yc, sc, w, b, scr),
                    NormKind::UnitL2 => $f::rows::<S, { Kind::UnitL2 as u8 }>(ctx, xc, yc, sc, w, b, scr),
                    NormKind::L1 => $f::rows::<S, { Kind::L1 as u8 }>(ctx, xc, yc, sc, w, b, scr),
                    NormKind::LInf => $f::rows::<S, { Kind::LInf as u8 }>(ctx, xc, yc, sc, w, b, scr),
                    NormKind::TopK { .. } => $f::rows::<S, { Kind::TopK as u8 }>(ctx, xc, yc, sc, w, b, scr),
                }
            };
        }
        match level {
            // SAFETY: the level's features were detected at run time.
            Level::Avx512Bf16 if same::<S, half::bf16>() && super::BF16_INSTRUCTION.load(std::sync::atomic::Ordering::Relaxed) => {
                return unsafe { by_kind!(avx512_bf16) }
            }
            Level::Avx512 | Level::Avx512Bf16 => return unsafe { by_kind!(avx512) },
            Level::Avx2 => return unsafe { by_kind!(avx2) },
            Level::Generic => {}
        }
    }
    super::forward_rows::<S, f32>(ctx, xc, yc, sc, w, b, scr)
}

/// The entry points of [`rows_at`], one function per level and kind (`KIND`), each level in a
/// module of its own. Why modules: rustc compiles the generic instances of a module's
/// functions in one codegen unit, and LLVM optimises codegen units in parallel but each one
/// alone. With all three levels in one module (`rows_at`'s body, until 2026-11-30) one unit held
/// 5.2 MB of the crate's 17 MB of machine code (AVX2 2.5 MB, AVX-512 1.8, AVX512_BF16 0.8) and
/// its optimisation ran on one core for about 18 of the crate's 20 minutes of build on two
/// cores: the longest step of CI's test build. Each level here is its own unit: over built
/// dependencies the crate then built in 908 s with two LLVM threads busy (README, CI time);
/// from an empty target directory the test build took as long as before (the dependencies
/// then keep the second core busy).
#[cfg(target_arch = "x86_64")]
mod entry {
    pub(super) mod avx2 {
        use super::super::{rows as fused_rows, same, with_kind, Counters, RowCtx, RowStats, Scratch, Storage};
        use crate::row::simd::{avx2::Avx2, avx2_even_odd::Avx2EvenOdd};

        #[target_feature(enable = "avx2,fma,f16c,popcnt")]
        pub(in super::super) unsafe fn rows<S: Storage, const KIND: u8>(
            ctx: &RowCtx<f32>, xc: &[S], yc: &mut [S], sc: &mut [RowStats], w: Option<&[f32]>, b: Option<&[f32]>, scr: &mut Scratch<f32>,
        ) -> Counters {
            let ctx = &with_kind::<KIND>(ctx);
            // bf16 widens and rounds without shuffles when the even and odd lanes are apart.
            if same::<S, half::bf16>() {
                fused_rows::<Avx2EvenOdd, S>(ctx, xc, yc, sc, w, b, scr)
            } else {
                fused_rows::<Avx2, S>(ctx, xc, yc, sc, w, b, scr)
            }
        }
    }

    pub(super) mod avx512 {
        use super::super::{rows as fused_rows, with_kind, Counters, RowCtx, RowStats, Scratch, Storage};
        use crate::row::simd::avx512::Avx512;

        #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
        pub(in super::super) unsafe fn rows<S: Storage, const KIND: u8>(
            ctx: &RowCtx<f32>, xc: &[S], yc: &mut [S], sc: &mut [RowStats], w: Option<&[f32]>, b: Option<&[f32]>, scr: &mut Scratch<f32>,
        ) -> Counters {
            fused_rows::<Avx512, S>(&with_kind::<KIND>(ctx), xc, yc, sc, w, b, scr)
        }
    }

    pub(super) mod avx512_bf16 {
        use super::super::{rows as fused_rows, with_kind, Counters, RowCtx, RowStats, Scratch, Storage};
        use crate::row::simd::avx512::Avx512Bf16;

        #[target_feature(enable = "avx512f,avx512bf16,avx512dq,avx2,fma,f16c,popcnt")]
        pub(in super::super) unsafe fn rows<S: Storage, const KIND: u8>(
            ctx: &RowCtx<f32>, xc: &[S], yc: &mut [S], sc: &mut [RowStats], w: Option<&[f32]>, b: Option<&[f32]>, scr: &mut Scratch<f32>,
        ) -> Counters {
            fused_rows::<Avx512Bf16, S>(&with_kind::<KIND>(ctx), xc, yc, sc, w, b, scr)
        }
    }
}

/// The norm kinds without their parameter, as the const parameter of the per-kind entry points
/// of [`rows_at`].
#[derive(Clone, Copy)]
#[repr(u8)]
enum Kind {
    Rms,
    Layer,
    UnitL2,
    L1,
    LInf,
    TopK,
}

/// `ctx` with its kind rebuilt from the constant `KIND` (and Top-k's k from `ctx`): a kind the
/// compiler knows, so that the passes of the other kinds drop out of the function.
#[inline(always)]
fn with_kind<const KIND: u8>(ctx: &RowCtx<f32>) -> RowCtx<f32> {
    let kind = match KIND {
        k if k == Kind::Rms as u8 => NormKind::Rms,
        k if k == Kind::Layer as u8 => NormKind::Layer,
        k if k == Kind::UnitL2 as u8 => NormKind::UnitL2,
        k if k == Kind::L1 as u8 => NormKind::L1,
        k if k == Kind::LInf as u8 => NormKind::LInf,
        _ => match ctx.kind {
            NormKind::TopK { k } => NormKind::TopK { k },
            other => unreachable!("Top-k's entry point called for {other:?}"),
        },
    };
    debug_assert_eq!(std::mem::discriminant(&kind), std::mem::discriminant(&ctx.kind));
    RowCtx { kind, ..*ctx }
}

/// The rows of one task: each by [`row`], or by the generic kernel when it needs a rescue;
/// Top-k's rows on AVX2 written through the caches by [`pipelined_rows`].
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
    if matches!(ctx.kind, NormKind::TopK { .. }) && !V::AVX512 && !ctx.stream_output && pipelines_top_k() {
        return pipelined_rows::<V, S>(ctx, xc, yc, sc, w, b, scr, affine_max);
    }
    // What the rows before computed of the row: its sum (`hi` before the division by n), and
    // L1's ([`Known`]).
    let mut known = Known::default();
    let l1_centred = ctx.centred && ctx.kind == NormKind::L1;
    let prefetch = super::PREFETCH_AHEAD.load(std::sync::atomic::Ordering::Relaxed);
    let early = super::EARLY_LINES.load(std::sync::atomic::Ordering::Relaxed);
    let saved = super::SAVED_CENTRED.load(std::sync::atomic::Ordering::Relaxed);
    // Streamed rows are computed into a staging row, then written out whole (`staged`).
    let staged = ctx.stream_output && n >= W && staged::worth_staging::<S>(ctx.kind, n) && stages_output();
    let mut staging = staged::StagingRow::<S>::new(if staged { n } else { 0 });
    let staged_ctx = RowCtx { stream_output: false, ..*ctx };
    for (r, ((yr, xr), st)) in yc.chunks_mut(n).zip(xc.chunks(n)).zip(sc.iter_mut()).enumerate() {
        // The row the next read from memory will be of: the next row, or for centred kinds
        // the one after (a centred row's first pass sums the next row too), or for centred L1
        // the one after that (`l1_pass_ahead`). The store pass prefetches it
        // (`store_groups`); past the task's last rows it prefetches this row, which is in cache.
        let ahead_row = if l1_centred { r + 3 } else if ctx.centred { r + 2 } else { r + 1 };
        let ahead = match xc.get(ahead_row * n..(ahead_row + 1) * n) {
            Some(a) if prefetch => a.as_ptr() as *const u8,
            _ => xr.as_ptr() as *const u8,
        };
        // Streamed rows store their groups from the first aligned address (`store_row`).
        let head = if ctx.stream_output && n >= W && !staged { stream_head(yr.as_ptr()) } else { 0 };
        let affine = scr.lanes.affine::<V>(w, b, head);
        let next = if ctx.centred { xc.get((r + 1) * n..(r + 2) * n) } else { None };
        let after = if l1_centred { xc.get((r + 2) * n..(r + 3) * n) } else { None };
        let lines = EarlyLines::new(ctx, yr, ahead, early);
        // One call of `row` whichever the destination (a second would inline it twice).
        let (row_ctx, out): (&RowCtx<f32>, &mut [S]) = if staged { (&staged_ctx, staging.row_for(yr)) } else { (ctx, &mut *yr) };
        // Room for the centred values that a Top-k row's store pass reads back
        // (`top_k_lane_maxima`), where that pays (`Storage::SAVES_CENTRED`, measured on AVX2
        // only); not for streamed rows, whose groups start `head` values in.
        let t_row = if S::SAVES_CENTRED && !V::AVX512 && saved && !row_ctx.stream_output { Some(&mut scr.c[..n]) } else { None };
        let (done, next_known) = row::<V, S>(row_ctx, xr, out, &affine, affine_max, (&mut scr.a, &mut scr.b, t_row), known, (next, after), lines);
        if staged && done.is_some() {
            staged::write_out(staging.row_for(yr), yr);
        }
        known = next_known;
        match done {
            Some((stats, bad)) => {
                *st = stats;
                c.nonfinite_out += bad;
            }
            None => {
                #[cfg(feature = "test-hooks")]
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

/// Whether streamed rows are staged ([`staged`]): `row::STAGED_OUTPUT`, which tests can
/// turn off for their own thread (`UNSTAGED`) to compare the two ways bit for bit.
#[inline(always)]
fn stages_output() -> bool {
    #[cfg(feature = "test-hooks")]
    if UNSTAGED.with(|u| u.get()) {
        return false;
    }
    super::STAGED_OUTPUT.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(feature = "test-hooks")]
thread_local! {
    /// Set by tests to write streamed rows directly on this thread ([`stages_output`]).
    static UNSTAGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether Top-k's rows run pipelined ([`pipelined_rows`]): `row::PIPELINED_TOP_K`, which
/// tests can turn off for their own thread (`UNPIPELINED`) to compare the two orders bit for bit.
#[inline(always)]
fn pipelines_top_k() -> bool {
    #[cfg(feature = "test-hooks")]
    if UNPIPELINED.with(|u| u.get()) {
        return false;
    }
    super::PIPELINED_TOP_K.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(feature = "test-hooks")]
thread_local! {
    /// Set by tests to run Top-k's rows one by one on this thread ([`pipelines_top_k`]).
    static UNPIPELINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tasks this thread ran through [`pipelined_rows`].
    static PIPELINED_TASKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(feature = "test-hooks")]
thread_local! {
    /// Top-k rows whose mean this thread took in registers ([`in_registers`]): the tests
    /// check that Gaussian rows of whole blocks do, on AVX-512.
    static IN_REGISTERS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(feature = "test-hooks")]
thread_local! {
    /// Centred L1 rows whose statistics pass this thread ran with the next rows' sums
    /// ([`l1_pass_ahead`]): the tests check that rows in the middle of a task do.
    pub(crate) static L1_AHEAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(feature = "test-hooks")]
thread_local! {
    /// Rows this thread stored from the centred values their statistics pass saved
    /// ([`store_row`], `FROM_T`): the tests check that bf16 Top-k rows do on AVX2.
    static FROM_SAVED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(feature = "test-hooks")]
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
/// `known`: what the rows before computed of this row (centred rows: [`Known`]); `next`: the
/// next row of the task, whose sum is then computed along (returned second, with what else
/// was computed of the next row: [`fold_with_next`]), by the statistics pass, or by the store
/// pass where it reads the row's saved centred values
/// ([`store_groups`], `NEXT`): that pass had ports to spare, the statistics pass had not
/// (bf16 Top-k 4096x1024, in-process A/B with temporary switches, time before over time
/// after, 300 runs a side, two threads: 1.009-1.015 in five runs; one thread 1.047). `lines`:
/// the row ahead (prefetched by the store pass) and what this row asks for early.
/// `(abs, marks, t_row)`: Top-k's candidates and marks, and room for the row's centred values
/// (as long as the row, or none: [`top_k_lane_maxima`]). `after`: the row after `next`
/// (centred L1: [`l1_pass_ahead`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn row<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    y: &mut [S],
    affine: &RowAffine,
    affine_max: (f64, f64),
    (abs, marks, t_row): (&mut [f32], &mut [f32], Option<&mut [f32]>),
    known: Known,
    (next, after): (Option<&[S]>, Option<&[S]>),
    lines: EarlyLines,
) -> (Option<(RowStats, u64)>, Known) {
    let (done, next_known) = row_statistics::<V, S>(ctx, x, affine_max, (abs, marks, t_row), known, (next, after), lines);
    let Some(done) = done else {
        return (None, next_known);
    };
    // A row stored from its saved centred values sums the next row in its store pass.
    let sum_next = if done.saved.is_some() { next } else { None };
    let (bad, stored_sum) = normalize_store::<V, S>(ctx, x, y, &done.raw, affine, done.check, lines.ahead, done.saved, sum_next);
    (Some((done.raw.widen(0), bad)), Known { sum: next_known.sum.or(stored_sum), ..next_known })
}

/// What the rows before computed of a centred row: its sum ([`fold_with_next`]) and, for L1,
/// its lo sum and the next row's sum ([`l1_pass_ahead`]); each `None` where not computed
/// (the first row of a task, other kinds). A row's [`raw_stats`] returns those of the next.
#[derive(Clone, Copy, Debug, Default)]
struct Known {
    sum: Option<f32>,
    lo_sum: Option<f32>,
    next_sum: Option<f32>,
}

/// A row between its statistics and its store pass: what [`normalize_store`] needs of it.
struct StatsDone<'t> {
    raw: Raw<f32>,
    /// Whether some output may be non-finite (`outputs_surely_finite`).
    check: bool,
    /// The row's centred values, where its statistics pass saved them.
    saved: Option<&'t [f32]>,
}

/// The first half of [`row`]: the statistics, or `None` when they need the generic kernel's
/// rescue; second, what this row's pass computed of the next row.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn row_statistics<'t, V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    affine_max: (f64, f64),
    scratch: (&mut [f32], &mut [f32], Option<&'t mut [f32]>),
    known: Known,
    (next, after): (Option<&[S]>, Option<&[S]>),
    lines: EarlyLines,
) -> (Option<StatsDone<'t>>, Known) {
    if EarlyLines::applies_to::<S>() && matches!(ctx.kind, NormKind::Rms | NormKind::UnitL2) {
        lines.output();
    }
    let (raw, z_max, next_known, saved) = raw_stats::<V, S>(ctx, x, scratch, known, next, after, lines);
    if needs_rescue(ctx, &raw) {
        return (None, next_known);
    }
    let check = !outputs_surely_finite::<S>(z_max, raw.s, affine_max);
    (Some(StatsDone { raw, check, saved }), next_known)
}

/// Top-k's rows of a task written through the caches, each row's store pass run after the
/// next row's statistics and selection, not before them.
///
/// Why: the selection ([`top_k_lane_maxima`]) is a chain of dependent steps (threshold, marks,
/// gather, sort) that keeps the core's ports half idle, and the store pass that follows it in
/// [`rows`] needs its result (the scale) in every group, so only the store pass's first
/// instructions can run beside it. The previous row's store pass needs nothing from this row:
/// placed after this row's selection, the out-of-order core runs its groups in the ports the
/// selection leaves free.
///
/// The rows' values are untouched: each row gets the same statistics and the same store pass,
/// in another order. Sums of next rows still come from the pass that reads the row before:
/// the statistics pass of row r sums row r + 1 where it does ([`fold_with_next`]); where row r
/// saves its centred values and leaves that sum to a store pass, the store pass run in its
/// place (row r - 1's, which reads its own saved values: two rows' saved values are kept) sums
/// row r + 1. A row without a store pass before it (the task's first, or after a rescue)
/// computes its own sum, as in [`rows`].
///
/// Measured on the AVX2 host of the README (`examples/prefetch_ahead.rs ... pipelined`, time
/// row by row over time pipelined, medians of 300-400 runs a side, two threads, k = 8 with a
/// weight), 4096x1024 in six runs: bf16 1.006-1.050, f16 0.999-1.051, f32 1.007-1.033. Rows in
/// cache (256x1024, 2000 runs): bf16 1.010, f16 1.009, f32 0.986; one thread 1.013, 1.004,
/// 0.978. Before, a timing-only switch that stored each row with the previous row's scale
/// (wrong outputs, the store pass then waiting for no selection: what this order can bring at
/// most) gave bf16 1.020-1.047, f16 0.994-1.016, f32 1.015-1.022. AVX2 only: AVX-512's
/// selection is short (compress instructions), and rows pipelined by one had brought nothing
/// on the AVX-512 guest in an earlier session; rows streamed around the caches (larger than
/// the last-level cache) go row by row too (16384x4096 with the timing-only switch: bf16
/// 1.014, f32 1.001).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pipelined_rows<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    xc: &[S],
    yc: &mut [S],
    sc: &mut [RowStats],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    scr: &mut Scratch<f32>,
    affine_max: (f64, f64),
) -> Counters {
    let n = scr.a.len();
    let rows = xc.len() / n;
    debug_assert!(!ctx.stream_output && yc.len() == xc.len() && sc.len() == rows);
    #[cfg(feature = "test-hooks")]
    PIPELINED_TASKS.with(|q| q.set(q.get() + 1));
    let mut c = Counters::default();
    let prefetch = super::PREFETCH_AHEAD.load(std::sync::atomic::Ordering::Relaxed);
    let early = super::EARLY_LINES.load(std::sync::atomic::Ordering::Relaxed);
    let saves = S::SAVES_CENTRED && !V::AVX512 && super::SAVED_CENTRED.load(std::sync::atomic::Ordering::Relaxed);
    if saves && scr.c.len() < 2 * n {
        scr.c.resize(2 * n, 0.0);
    }
    // Rows r and r - 1 keep their saved values in the two halves of `scr.c` (r % 2), which
    // outlive the borrows of one iteration: hence raw pointers.
    let tp = scr.c.as_mut_ptr();
    let yp = yc.as_mut_ptr();
    let row_of = |r: usize| xc.get(r * n..(r + 1) * n);
    // The row whose store pass is pending.
    let mut pending: Option<(usize, StatsDone)> = None;
    let mut known = Known::default();
    // One iteration past the last row, for its store pass: hence the index.
    #[allow(clippy::needless_range_loop)]
    for r in 0..=rows {
        // The row the next read from memory will be of, as in `rows` (row r + 1 is read in
        // this iteration: by row r's pass, or by the store pass run after it).
        // Past the task's last rows, both passes prefetch a row of their own (in cache).
        let ahead_row = if ctx.centred { r + 2 } else { r + 1 };
        let ahead = row_of(ahead_row).filter(|_| prefetch).map(|a| a.as_ptr() as *const u8);
        let next = if ctx.centred { row_of(r + 1) } else { None };
        let this = row_of(r);
        let (done, mut next_known) = match this {
            Some(xr) => {
                let lines = EarlyLines::new(ctx, std::slice::from_raw_parts(yp.add(r * n), n), ahead.unwrap_or(xr.as_ptr() as *const u8), early);
                let t_row = if saves { Some(std::slice::from_raw_parts_mut(tp.add(r % 2 * n), n)) } else { None };
                row_statistics::<V, S>(ctx, xr, affine_max, (&mut scr.a, &mut scr.b, t_row), known, (next, None), lines)
            }
            None => (None, Known::default()),
        };
        if let Some((p, prev)) = pending.take() {
            let (xr, yr) = (&xc[p * n..(p + 1) * n], std::slice::from_raw_parts_mut(yp.add(p * n), n));
            let ahead = ahead.unwrap_or(xr.as_ptr() as *const u8);
            // Row r + 1's sum, if row r's pass left it to a store pass.
            let sum_next = if next_known.sum.is_none() && prev.saved.is_some() { next } else { None };
            let affine = scr.lanes.affine::<V>(w, b, 0);
            let (bad, stored_sum) = normalize_store::<V, S>(ctx, xr, yr, &prev.raw, &affine, prev.check, ahead, prev.saved, sum_next);
            c.nonfinite_out += bad;
            next_known.sum = next_known.sum.or(stored_sum);
        }
        if let Some(xr) = this {
            match done {
                Some(done) => {
                    sc[r] = done.raw.widen(0);
                    pending = Some((r, done));
                }
                None => {
                    #[cfg(feature = "test-hooks")]
                    RESCUED.with(|q| q.set(q.get() + 1));
                    let yr = std::slice::from_raw_parts_mut(yp.add(r * n), n);
                    c += super::forward_rows::<S, f32>(ctx, xr, yr, std::slice::from_mut(&mut sc[r]), w, b, scr)
                }
            }
        }
        known = next_known;
    }
    c
}

/// Cache lines a row asks for before its store pass needs them, while its statistics keep the
/// core busy and the memory would otherwise wait. f32 rows of 1024 that stay in the last-level
/// cache (4096x1024: 16 MiB in and 16 MiB out) were limited by how fast their lines came, not
/// by the instructions, and two waits showed:
/// - Each output line is read for ownership when the store pass first writes it. Asking for the
///   row's first 32 output lines ([`Self::OUT_LINES`], 2 KiB) for writing before the statistics
///   lets those reads run during them: RMSNorm and unit norm, uncentred, ask at the row's start
///   ([`row`]); Top-k after its pass, while it selects ([`top_k_lane_maxima`]). The centred
///   kinds without a selection (LayerNorm, L1, L-inf) read the next row during their pass and
///   gained nothing (in one process on the AVX-512 guest, time without over time with,
///   medians of 500 runs: L1 0.94-0.97, L-inf 0.93-0.99, LayerNorm 0.96-1.21), so they do not.
/// - Top-k's selection leaves the memory idle between its pass and the store pass, which
///   prefetches the row ahead line by line (`store_groups`). It asks for the row ahead's first
///   16 lines ([`Self::AHEAD_LINES`], 1 KiB) before selecting.
///
/// Only for 4-byte storage written through the caches: 16-bit rows of 1024 are limited by
/// their instructions (f16 and bf16 0.92-1.03 with the output lines asked for), and streamed
/// rows (`stream_output`) must not pull their output lines into the caches. Measured with
/// `examples/prefetch_ahead.rs ... early` (alternating in one process, time without over time
/// with, medians of 500 runs; AVX-512 guest, not measured on the AVX2 host), f32 4096x1024:
/// Top-k 1.09-1.14 (five runs), RMSNorm 1.03-1.20 and unit norm 0.94-1.10 (four runs, three
/// of them above 1.06). Before, with temporary switches: the row ahead's lines alone gave Top-k
/// 1.03-1.07.
#[derive(Clone, Copy)]
struct EarlyLines {
    /// The row ahead's first byte (`Affine::ahead`).
    ahead: *const u8,
    /// Lines of the row ahead to ask for during Top-k's selection.
    ahead_lines: usize,
    /// The output row's first byte.
    out: *const u8,
    /// Lines of the output row to ask for writing.
    out_lines: usize,
}

impl EarlyLines {
    /// Lines of the row ahead asked for before Top-k's selection.
    const AHEAD_LINES: usize = 16;
    /// Lines of the output asked for writing before the statistics.
    const OUT_LINES: usize = 32;

    /// Whether rows of `S` ask for lines: 4-byte storage. Known when compiling, so the callers
    /// test it first and the 16-bit rows' code has no trace of the requests. (With the requests
    /// compiled in and skipped at run time, 16-bit Top-k measured 5-15% slower than before in
    /// four full benchmark runs; whether the code or the machine's load caused it is not known:
    /// a one-thread comparison of the builds was too noisy to tell.)
    #[inline(always)]
    const fn applies_to<S>() -> bool {
        std::mem::size_of::<S>() == 4
    }

    /// The early lines of the row written to `y`, with `ahead` the row the store pass
    /// prefetches (as long as `y`); none when `on` is false (`row::EARLY_LINES`) or the storage
    /// is not 4 bytes wide, and no output lines when the output is streamed.
    #[inline(always)]
    fn new<S>(ctx: &RowCtx<f32>, y: &[S], ahead: *const u8, on: bool) -> Self {
        let lines = if on && Self::applies_to::<S>() { std::mem::size_of_val(y) / LINE } else { 0 };
        EarlyLines {
            ahead,
            ahead_lines: lines.min(Self::AHEAD_LINES),
            out: y.as_ptr() as *const u8,
            out_lines: if ctx.stream_output { 0 } else { lines.min(Self::OUT_LINES) },
        }
    }

    /// Ask for the output's first lines, for writing.
    #[inline(always)]
    fn output(&self) {
        for l in 0..self.out_lines {
            // In the output row: `out_lines` whole lines fit in it.
            prefetch_for_write(self.out.wrapping_add(LINE * l));
        }
    }

    /// Ask for what Top-k's selection leaves time for: the row ahead's first lines and the
    /// output's.
    #[inline(always)]
    fn during_selection(&self) {
        for l in 0..self.ahead_lines {
            prefetch(self.ahead.wrapping_add(LINE * l));
        }
        self.output();
    }
}

/// Bytes per cache line: the unit of [`EarlyLines`] and of the staged copy (`staged.rs`).
const LINE: usize = 64;

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
/// Centred, `hi` is the sum of the values (`known.sum` when the rows before computed it) over
/// n, and the pass that sums `x - hi` also sums `next` when given (the next row:
/// [`fold_with_next`]); returned third, what was computed of the next row ([`Known`]; L1
/// also sums `after`, the row after next: [`l1_pass_ahead`]). Fourth: the row's centred
/// values `x - hi` where they were saved to `t_row` (centred Top-k: [`top_k_lane_maxima`]),
/// for the store pass.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn raw_stats<'t, V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    (abs, marks, t_row): (&mut [f32], &mut [f32], Option<&'t mut [f32]>),
    known: Known,
    next: Option<&[S]>,
    after: Option<&[S]>,
    lines: EarlyLines,
) -> (Raw<f32>, f64, Known, Option<&'t [f32]>) {
    let eps = ctx.eps as f32;
    let inv_n = ctx.inv_n;
    let n = x.len();
    // A `match`, not `unwrap_or_else`: see `top_k_lane_maxima`.
    let hi = if ctx.centred {
        let row_sum = match known.sum {
            Some(s) => s,
            None => sum::<V, S>(x, #[inline(always)] |v| v),
        };
        row_sum * inv_n
    } else {
        0.0
    };
    // What this row's passes computed of the next: the next row's sum where a pass summed it
    // along ([`fold_with_next`]).
    let summed = |sum: Option<f32>| Known { sum, ..Known::default() };
    let mut saved = None;
    let (raw, z_max, next_known) = match ctx.kind {
        NormKind::Rms | NormKind::UnitL2 => {
            let q = sum::<V, S>(x, #[inline(always)] |v| v * v);
            (stats::finish_l2(ctx, hi, q, eps), (q as f64 * sum_slack(n)).sqrt() + ABS_SLACK, Known::default())
        }
        NormKind::Layer => {
            let h = V::splat(hi);
            let zero = V::splat(0.0);
            let ([d, q], ahead) = fold_with_next::<V, S, 2>(x, [zero; 2], #[inline(always)] |v, [d, q]| {
                let t = v - h;
                [d + t, q + t * t]
            }, next);
            let raw = stats::finish_layer(ctx, hi, d.combine(), q.combine(), eps);
            // |t| <= sqrt(sum t^2) for t = x - hi, and z = t - lo rounds once.
            let t_max = (raw.sumsq as f64 * sum_slack(n)).sqrt() + ABS_SLACK;
            (raw, (t_max + (raw.lo as f64).abs()) * (1.0 + 2f64.powi(-22)), summed(ahead))
        }
        NormKind::TopK { k } if stats::uses_lane_maxima(n, k) => {
            let (lo, stat, check, ahead, t) = top_k_lane_maxima::<V, S>(ctx, x, k, hi, (abs, marks, t_row), next, lines);
            saved = t;
            (stats::finish_scaled(ctx, hi, lo, stat, check, eps), check as f64 * sum_slack(n) + ABS_SLACK, summed(ahead))
        }
        NormKind::LInf if ctx.centred => {
            let (lo, maxima, ahead) = lo_and_lane_max_abs::<V, S>(ctx, x, hi, next);
            let stat = lanes::max_of(maxima.to_array());
            // `check`, the lane sum of |z|, is only needed where it may be non-finite.
            let check = if check_sum_unneeded(hi, lo, stat, n) {
                stat
            } else {
                let (h, l) = (V::splat(hi), V::splat(lo));
                sum::<V, S>(x, #[inline(always)] |v| ((v - h) - l).abs())
            };
            (stats::finish_scaled(ctx, hi, lo, stat, check, eps), stat as f64, summed(ahead))
        }
        NormKind::L1 if ctx.centred => {
            // The lo sum: from the row before's pass ([`l1_pass_ahead`], which sets it only
            // along with the row's sum), or from a pass of its own, which also sums the next row.
            let (d, sum_of_next) = match known.lo_sum {
                Some(d) => {
                    debug_assert!(known.sum.is_some(), "a lo sum without the row's sum");
                    (d, known.next_sum)
                }
                None => lo_sum::<V, S>(x, hi, next),
            };
            let lo = d * inv_n;
            let (h, l) = (V::splat(hi), V::splat(lo));
            let (r, next_known) = match (next, sum_of_next) {
                (Some(nx), Some(ns)) => {
                    let (r, next_lo_sum, sum_after) = l1_pass_ahead::<V, S>(x, #[inline(always)] |v| ((v - h) - l).abs(), nx, ns * inv_n, after);
                    (r, Known { sum: Some(ns), lo_sum: Some(next_lo_sum), next_sum: sum_after })
                }
                _ => (sum::<V, S>(x, #[inline(always)] |v| ((v - h) - l).abs()), summed(sum_of_next)),
            };
            (stats::finish_scaled(ctx, hi, lo, r * inv_n, r, eps), r as f64 * sum_slack(n) + ABS_SLACK, next_known)
        }
        // Uncentred L1, L-inf and Top-k; centred Top-k where the lane maxima are not used.
        NormKind::L1 | NormKind::LInf | NormKind::TopK { .. } => {
            let (lo, ahead) = if ctx.centred {
                let (d, ahead) = lo_sum::<V, S>(x, hi, next);
                (d * inv_n, ahead)
            } else {
                (0.0, None)
            };
            let (stat, check) = if ctx.centred {
                let (h, l) = (V::splat(hi), V::splat(lo));
                abs_statistic::<V, S>(ctx, x, #[inline(always)] |v| ((v - h) - l).abs(), abs)
            } else {
                // `(v - 0) - 0` is `v` exactly (signed zeros and NaN included): skip it.
                abs_statistic::<V, S>(ctx, x, #[inline(always)] |v| v.abs(), abs)
            };
            // The maximum of |z| itself for L-inf, else |z| <= sum |z| (`check`).
            let z_max = if ctx.kind == NormKind::LInf { stat as f64 } else { check as f64 * sum_slack(n) + ABS_SLACK };
            (stats::finish_scaled(ctx, hi, lo, stat, check, eps), z_max, summed(ahead))
        }
    };
    (raw, z_max, next_known, saved)
}

/// The lo sum of a centred row, the sum of `x - hi` with its lanes combined, and the next
/// row's sum where `next` is given ([`fold_with_next`]): the pass before a row's `|z|` pass
/// wherever the row before did not compute it ([`l1_pass_ahead`] sums the same values the
/// same way).
#[inline(always)]
unsafe fn lo_sum<V: F32x16, S: Storage>(x: &[S], hi: f32, next: Option<&[S]>) -> (f32, Option<f32>) {
    let h = V::splat(hi);
    let ([d], ahead) = fold_with_next::<V, S, 1>(x, [V::splat(0.0)], #[inline(always)] |v, [d]| [d + (v - h)], next);
    (d.combine(), ahead)
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
            let [m, s] = fold::<V, S, 2>(x, #[inline(always)] |v, [m, s]| {
                let a = z_abs(v);
                [V::max_gt(a, m), s + a]
            });
            (lanes::max_of(m.to_array()), s.combine())
        }
        NormKind::TopK { k } => top_k_statistic::<V, S>(x, k, z_abs, &mut abs[..x.len()]),
        _ => unreachable!("abs_statistic is for L1, L-inf and Top-k"),
    }
}

/// Top-k's `(mean of the k largest |z|, lane sum of |z|)` on rows where the lane maxima are
/// not used (k > 16 or short rows), or do not bound the candidates (`top_k_lane_maxima`):
/// `|z|` written to `abs` (as long as the row) while it is summed, then the selection of
/// `stats::topk_mean`.
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
    (stats::topk_mean(&mut abs[..n], k), s.combine())
}

/// Values per block of Top-k's block maxima: four groups of 16 ([`top_k_pass`]).
const BLOCK: usize = 4 * W;

/// Top-k's `(lo, mean of the k largest |z|, check)` where the lane maxima bound the selection
/// (`stats::uses_lane_maxima`), with `hi` computed: the values `stats::compute` gives, with
/// the same passes over the row as L-inf. `check` is the lane sum of `|z|`, or, where that sum
/// is surely finite (`check_sum_unneeded`), the largest `|z|`: the same rescue decision, as
/// for L-inf.
///
/// The k-th largest of 16 lane maxima of `|z|` (or of lower bounds of them), `t0`, bounds the
/// row's k-th largest `|z|` from below, so only the few values at or above it (about 11 in a
/// Gaussian row of 1024 or 4096 at k = 8) are candidates. The pass that makes the lane maxima
/// ([`top_k_pass`]) also stores each block's (64 values': [`BLOCK`]) lane maxima; the
/// blocks' lanes whose maximum may reach `t0` are marked ([`mark_blocks`]: a comparison per 64
/// values, where marking values was a pass over the row), and [`top_k_of_marked`] gathers
/// the values `>= t0` of the marked lanes (four values each) and selects the k largest of
/// them, sorted as `stats::top_k_desc` does. The mean of those k values does not depend on
/// how they were found, nor on how close `t0` is.
///
/// Centred, the pass sums `t = x - hi` for `lo` and keeps the largest `|t|`s, from which
/// bounds of `|z|`, `z = fl(t - lo)`, follow (see the code); a lane is marked when its `|t|`
/// reaches a bound `c` just under `t0` ([`bound_before_difference`]). Where there is no such
/// bound, or the check sum is needed, `|z|` is written out and selected among
/// ([`top_k_statistic`]): rows with a mean large beside their spread, or with huge values.
/// Uncentred (`z = x`), the pass sums `|x|` for the check and the blocks are marked against
/// `t0` itself. Between the pass and the selection, the row asks for `lines`
/// ([`EarlyLines::during_selection`]).
///
/// Centred, with `t_row` given, the pass also saves each whole group's `t` there (in register
/// order: [`F32x16::store_lanes`]), and the row's store pass reads them back instead of
/// reading the row and subtracting `hi` again (returned fifth): the same values, and on a bf16
/// row four vector operations fewer per group where the store pass does twenty, for two
/// stores per group in the pass. The selection's gather reads them too (`simd::top_k_avx2`),
/// and the pass leaves `next` to the store pass ([`row`]): it returns no next sum then.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn top_k_lane_maxima<'t, V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    k: usize,
    hi: f32,
    (cand, marks, t_row): (&mut [f32], &mut [f32], Option<&'t mut [f32]>),
    next: Option<&[S]>,
    lines: EarlyLines,
) -> (f32, f32, f32, Option<f32>, Option<&'t [f32]>) {
    let n = x.len();
    let blocks = n / BLOCK;
    // In `marks`: the blocks' lane maxima (16 f32 each), then the words of marks (a u64 per
    // four blocks) and the bitmap of nonzero words.
    let words = blocks / 4 + 1;
    let need = W * blocks + 2 * (words + words / 64 + 1);
    assert!(cand.len() >= n && marks.len() >= need, "top-k scratch too small");
    let bmax = marks.as_mut_ptr();
    let wp = bmax.add(W * blocks) as *mut u64;
    let mut list = MarkList::new(wp, wp.add(words));
    if ctx.centred {
        let (h, zero) = (V::splat(hi), V::splat(0.0));
        let (d, t_max, next_sum, saved) = match t_row {
            Some(t) => {
                assert!(t.len() >= n, "centred-values scratch too small");
                // The next row's sum is left to the store pass, which reads `t`, not the row
                // (`row`: the pass that has idle ports).
                let (d, m, s) = isolated_top_k_pass::<V, S, true, true>(x, hi, None, bmax, t.as_mut_ptr());
                (d, m, s, Some(&*t))
            }
            None => {
                let (d, m, s) = isolated_top_k_pass::<V, S, true, false>(x, hi, next, bmax, std::ptr::null_mut());
                (d, m, s, None)
            }
        };
        if EarlyLines::applies_to::<S>() {
            lines.during_selection();
        }
        let lo = d.combine() * ctx.inv_n;
        // Bounds of |z| = |fl(t - lo)| from |t|, rounding being monotone: each lane's largest
        // |z| is at least fl(max |t| - |lo|) (its value of largest |t| has that much), so the
        // k-th largest of those bounds the row's k-th largest |z| from below; and every |z|
        // is at most fl(max |t| + |lo|). Clamped at +0 (a NaN `lo` is rescued).
        let lo_abs = V::splat(lo.abs());
        let t0 = V::max_gt(t_max - lo_abs, zero).kth_largest_magnitude(k);
        let z_max = lanes::max_of(t_max.to_array()) + lo.abs();
        let l = V::splat(lo);
        let (stat, check) = match bound_before_difference(t0, lo) {
            Some(c) if check_sum_unneeded(hi, lo, z_max, n) => {
                // A `match`, not `unwrap_or_else`: a closure is a function of its own, which
                // does not inherit the caller's target features when not inlined (then every
                // intrinsic in it is a call: bf16 Top-k rows on AVX2 took 4x longer).
                let stat = match in_registers::<V, S>(x, blocks, bmax, c, (hi, lo), t0, k, cand, saved) {
                    Some(stat) => stat,
                    None => {
                        mark_blocks::<V>(bmax, blocks, c, &mut list);
                        top_k_of_marked::<V, S>(x, #[inline(always)] |v| ((v - h) - l).abs(), (hi, lo), t0, k, cand, &list)
                    }
                };
                (stat, z_max)
            }
            _ => top_k_statistic::<V, S>(x, k, #[inline(always)] |v| ((v - h) - l).abs(), &mut cand[..n]),
        };
        (lo, stat, check, next_sum, saved)
    } else {
        let (d, m, _) = isolated_top_k_pass::<V, S, false, false>(x, 0.0, None, bmax, std::ptr::null_mut());
        if EarlyLines::applies_to::<S>() {
            lines.during_selection();
        }
        let t0 = m.kth_largest_magnitude(k);
        // `(v - 0) - 0` is `v` exactly (signed zeros and NaN included): the gather's |z|.
        let stat = match in_registers::<V, S>(x, blocks, bmax, t0, (0.0, 0.0), t0, k, cand, None) {
            Some(stat) => stat,
            None => {
                mark_blocks::<V>(bmax, blocks, t0, &mut list);
                top_k_of_marked::<V, S>(x, #[inline(always)] |v| v.abs(), (0.0, 0.0), t0, k, cand, &list)
            }
        };
        (0.0, stat, d.combine(), None, None)
    }
}

/// `F32x16::top_k_mean_in_registers` on a row of whole blocks (else `None`), with `cand` as
/// the room for its positions: the common case of [`mark_blocks`] and [`top_k_of_marked`]
/// without branches on the data: in registers on AVX-512 (`simd::top_k_avx512`), by tables
/// on AVX2 (`simd::top_k_avx2`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn in_registers<V: F32x16, S: Storage>(
    x: &[S],
    blocks: usize,
    bmax: *const f32,
    c: f32,
    hi_lo: (f32, f32),
    t0: f32,
    k: usize,
    cand: &mut [f32],
    t: Option<&[f32]>,
) -> Option<f32> {
    if x.len() != BLOCK * blocks || cand.len() < W * blocks + W || !(1..=W).contains(&k) {
        return None;
    }
    let row = MarkedRow { x: x.as_ptr(), blocks, bmax, c, hi_lo, t0, k, pos: cand.as_mut_ptr() as *mut u32, t: t.map_or(std::ptr::null(), |t| t.as_ptr()) };
    let mean = V::top_k_mean_in_registers::<S>(row);
    #[cfg(feature = "test-hooks")]
    if mean.is_some() {
        IN_REGISTERS.with(|r| r.set(r.get() + 1));
    }
    mean
}

/// [`top_k_pass`] in a function of its own (one per instruction set), never inlined: its
/// loop gets a register allocation of its own. Inlined into the per-kind function of
/// [`rows_at`], its accumulators could end up in a stack slot read and written in every
/// iteration while registers stood free, depending on code elsewhere in the function (bf16
/// rows of 4096: 1.42 -> 1.62 us, from a change to the gather).
#[inline(always)]
unsafe fn isolated_top_k_pass<V: F32x16, S: Storage, const CENTRED: bool, const SAVE: bool>(
    x: &[S],
    hi: f32,
    next: Option<&[S]>,
    bmax: *mut f32,
    t_out: *mut f32,
) -> (V, V, Option<f32>) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma,f16c,popcnt")]
        #[inline(never)]
        unsafe fn avx2<V: F32x16, S: Storage, const CENTRED: bool, const SAVE: bool>(
            x: &[S],
            hi: f32,
            next: Option<&[S]>,
            bmax: *mut f32,
            t_out: *mut f32,
        ) -> (V, V, Option<f32>) {
            top_k_pass::<V, S, CENTRED, SAVE>(x, hi, next, bmax, t_out)
        }
        #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
        #[inline(never)]
        unsafe fn avx512<V: F32x16, S: Storage, const CENTRED: bool, const SAVE: bool>(
            x: &[S],
            hi: f32,
            next: Option<&[S]>,
            bmax: *mut f32,
            t_out: *mut f32,
        ) -> (V, V, Option<f32>) {
            top_k_pass::<V, S, CENTRED, SAVE>(x, hi, next, bmax, t_out)
        }
        if V::AVX512 {
            avx512::<V, S, CENTRED, SAVE>(x, hi, next, bmax, t_out)
        } else {
            avx2::<V, S, CENTRED, SAVE>(x, hi, next, bmax, t_out)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    top_k_pass::<V, S, CENTRED, SAVE>(x, hi, next, bmax, t_out)
}

/// Top-k's one pass over a row before the selection: centred, the lane sums of `t = x - hi`
/// (`lo` once combined) and the lanes' largest `|t|`; uncentred, the lane sums of `|x|` (the
/// check sum) and the lanes' largest `|x|`. The sums are `fold_with_next`'s (the same bits)
/// and so is the sum of `next` (returned third, when given). Each whole block's lane maxima
/// are stored at `bmax` (16 f32 per block, [`F32x16::store_lanes`]): block b covers groups
/// 4b to 4b + 3, and lane j of it the values 64b + j + 16q. The groups past the last whole
/// block (fewer than four) and the row's tail count in the lane maxima only.
///
/// The maxima skip NaN (`max_gt`), except that a block whose first value is NaN has a NaN
/// maximum. The centred row's maxima are only used when `hi` is finite, and then every `t`
/// is a number; an uncentred row with a NaN has a NaN check sum and is rescued.
///
/// `SAVE` (centred only): each whole group's `t` is also stored at `t_out` (the row's length),
/// in register order ([`F32x16::store_lanes`]).
#[inline(always)]
unsafe fn top_k_pass<V: F32x16, S: Storage, const CENTRED: bool, const SAVE: bool>(
    x: &[S],
    hi: f32,
    next: Option<&[S]>,
    bmax: *mut f32,
    t_out: *mut f32,
) -> (V, V, Option<f32>) {
    debug_assert!(CENTRED || !SAVE, "only a centred pass saves its t");
    let h = V::splat(hi);
    // (the term summed, the term maximised)
    // (in a block: attributes on a closure are only allowed there or as an argument)
    let f = {
        #[inline(always)]
        |v: V| {
            if CENTRED {
                let t = v - h;
                (t, t.abs())
            } else {
                let a = v.abs();
                (a, a)
            }
        }
    };
    match next {
        Some(nx) => {
            assert_eq!(nx.len(), x.len(), "the next row has another length");
            let (d, m, s) = block_maxima::<V, S, true, SAVE>(x, f, nx.as_ptr(), bmax, t_out);
            (d, m, Some(s.combine()))
        }
        None => {
            let (d, m, _) = block_maxima::<V, S, false, SAVE>(x, f, x.as_ptr(), bmax, t_out);
            (d, m, None)
        }
    }
}

/// The loop of [`top_k_pass`]: returns the lane sums of `f(v).0`, the lane maxima of
/// `f(v).1` and, with `NEXT`, the lane sums of the values at `q` (a row as long as `x`).
/// With `SAVE`, each whole group's `f(v).0` is stored at `t_out` (register order).
#[inline(always)]
unsafe fn block_maxima<V: F32x16, S: Storage, const NEXT: bool, const SAVE: bool>(
    x: &[S],
    f: impl Fn(V) -> (V, V),
    q: *const S,
    bmax: *mut f32,
    t_out: *mut f32,
) -> (V, V, V) {
    let n = x.len();
    let full = n - n % W;
    let blocks = n / BLOCK;
    let p = x.as_ptr();
    let zero = V::splat(0.0);
    let (mut d, mut m, mut s) = (zero, zero, zero);
    // One group at i: its sum term added, its maximised term returned. A macro, not a
    // closure: a closure called from several places was not inlined, and its SIMD operations
    // became calls.
    macro_rules! group {
        ($i:expr) => {{
            let i = $i;
            let (u, a) = f(S::load(p.add(i)));
            if SAVE {
                u.store_lanes(t_out.add(i));
            }
            d = d + u;
            if NEXT {
                s = s + S::load(q.add(i));
            }
            a
        }};
    }
    for b in 0..blocks {
        let i = BLOCK * b;
        let mut bm = group!(i);
        bm = V::max_gt(group!(i + W), bm);
        bm = V::max_gt(group!(i + 2 * W), bm);
        bm = V::max_gt(group!(i + 3 * W), bm);
        bm.store_lanes(bmax.add(W * b));
        m = V::max_gt(bm, m);
    }
    let mut i = BLOCK * blocks;
    while i < full {
        m = V::max_gt(group!(i), m);
        i += W;
    }
    if full < n {
        let (u, a) = f(load_partial::<V, S>(&x[full..]));
        d = V::select_first(n - full, d + u, d);
        m = V::select_first(n - full, V::max_gt(a, m), m);
        if NEXT {
            s = plus_tail::<V, S>(s, std::slice::from_raw_parts(q.add(full), n - full));
        }
    }
    (d, m, s)
}

/// A bound `m > 0` such that every f32 `u` with `|fl(u - v)| >= a` has `|u| >= m`: rounding to
/// nearest gives `|u - v| >= a (1 - 2^-24) - 2^-150`, so `|u| >= a (1 - 2^-24) - 2^-150 - |v|`;
/// computed in f64 with larger slacks (its own rounding is far smaller) and rounded down to
/// f32. None when that is not positive (`a` zero or small beside `v`; also for a NaN or
/// infinite `a`, where the row is rescued).
///
/// Top-k ([`top_k_lane_maxima`]) calls it with `(t0, lo)`: a bound on `|t|` for every
/// candidate (`|z| >= t0`, `z = fl(t - lo)`).
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
    let ([d, t_max, t_min], next_sum) = fold_with_next::<V, S, 3>(x, init, #[inline(always)] |v, [d, mx, mn]| {
        let t = v - h;
        [d + t, V::max_gt(t, mx), V::min_lt(t, mn)]
    }, next);
    let lo = d.combine() * ctx.inv_n;
    let l = V::splat(lo);
    // Clamped at +0: a lane whose values were all NaN has no maximum (and a NaN row is
    // rescued), and `max_gt` turns -0 into +0, as the maxima of `|z|` start.
    (lo, V::max_gt(V::max_gt(t_max - l, l - t_min), zero), next_sum)
}

/// The marks of [`top_k_lane_maxima`]: bit 16 (b % 4) + j of word b / 4 set when lane j's
/// maximum in block b ([`top_k_pass`]) is `>= c`, the words pushed to `list` (finished).
/// Two blocks' masks per `F32x16::ge_mask_2`.
///
/// Candidates are rare and scattered (about 11 per Gaussian row of 1024 or 4096 at k = 8):
/// compacting them here, branch-free, would cost more than the comparisons, and a branch per
/// hit would be mispredicted about once per hit. So this only records masks, and
/// [`gather_marked`] visits the marked lanes.
#[inline(always)]
unsafe fn mark_blocks<V: F32x16>(bmax: *const f32, blocks: usize, c: f32, list: &mut MarkList) {
    let cv = V::splat(c);
    macro_rules! two {
        ($b:expr) => {{
            let b = $b;
            V::ge_mask_2(V::load_lanes(bmax.add(W * b)), V::load_lanes(bmax.add(W * (b + 1))), cv) as u64
        }};
    }
    let mut b = 0;
    while b + 4 <= blocks {
        list.push(two!(b) | two!(b + 2) << 32);
        b += 4;
    }
    if b < blocks {
        let mut word = 0u64;
        if b + 2 <= blocks {
            word = two!(b);
            b += 2;
        }
        if b < blocks {
            word |= (V::load_lanes(bmax.add(W * b)).ge_mask(cv) as u64) << (16 * (b % 4));
        }
        list.push(word);
    }
    list.finish();
}

/// The mean of the k largest `|z|` of a row from the marks of [`mark_blocks`] (which cover at
/// least every value of the whole blocks with `|z| >= t0`; `t0` at most the k-th largest
/// `|z|`): the values `>= t0` of the marked lanes ([`gather_marked`], `z` from `x` and
/// `(hi, lo)`) and of the rest of the row (`z_abs`: the groups past the last whole block and
/// the tail) gathered into `cand`, and
/// the k largest of them selected and sorted as `stats::top_k_desc` does
/// (`F32x16::top_k_of_few` when they are few).
#[inline(always)]
unsafe fn top_k_of_marked<V: F32x16, S: Storage>(
    x: &[S],
    z_abs: impl Fn(V) -> V,
    (hi, lo): (f32, f32),
    t0: f32,
    k: usize,
    cand: &mut [f32],
    list: &MarkList,
) -> f32 {
    let n = x.len();
    let covered = n - n % BLOCK;
    let mut kept = gather_marked::<V, S>(&x[..covered], list, (hi, lo), t0, cand);
    for rest in x[covered..].chunks(W) {
        let a = if rest.len() == W { z_abs(S::load(rest.as_ptr())) } else { z_abs(load_partial::<V, S>(rest)) };
        for &v in &a.to_array()[..rest.len()] {
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
    // `stats::mean_of_sorted_top_k`: k <= 16 (`stats::uses_lane_maxima`) magnitudes, each
    // `0 + v = v` in its lane of the sum, the rest zero, combined.
    debug_assert!(k <= W && cand.len() >= W);
    super::simd::mean_of_k(V::select_first(k, V::load_f32(cand.as_ptr()), V::splat(0.0)).combine(), k)
}

/// `|z| = |fl(fl(x_j - hi) - lo)|` of the four values of each marked lane of `list`
/// ([`mark_blocks`] over `x`, whole blocks only), kept in `cand` when `>= t0`
/// (`F32x16::keep_lane_of_block`: the f32 operations of the passes, the same bits); returns
/// how many.
///
/// Marked lanes are few and scattered at random, so a branch on a word's next mark would be
/// mispredicted about once per word. Instead, for each 64 words, those with a mark (from the
/// bitmap) are decoded to positions (four written unconditionally, the count advanced by the
/// word's popcount; a branch only for a word with more than four, rare), and the positions
/// visited in one loop with no branch but its own. Each lane writes `cand[kept..kept + 4]`
/// and counts only the values kept: `kept` is at most the number of values visited before, so
/// `kept + 4 <= x.len() <= cand.len()`.
#[inline(always)]
unsafe fn gather_marked<V: F32x16, S: Storage>(x: &[S], list: &MarkList, (hi, lo): (f32, f32), t0: f32, cand: &mut [f32]) -> usize {
    debug_assert!(x.len() <= cand.len());
    let (xp, cp) = (x.as_ptr(), cand.as_mut_ptr());
    let mut kept = 0usize;
    // Positions, within a run of 64 words, of the run's marks, and room for the four written
    // unconditionally past the last. Uninitialised: only positions written are read.
    let mut pos = [std::mem::MaybeUninit::<u16>::uninit(); 64 * 64 + 4];
    let pp = pos.as_mut_ptr() as *mut u16;
    for run in 0..list.count.div_ceil(64) {
        let mut marked = 0usize;
        let mut hit = list.nonzero.add(run).read_unaligned();
        while hit != 0 {
            let i = hit.trailing_zeros() as u16;
            hit &= hit - 1;
            let bits = list.words.add(64 * run + i as usize).read_unaligned();
            write_set_bits(bits, 64 * i, pp.add(marked));
            marked += bits.count_ones() as usize;
        }
        // A run covers 64 * 64 marks, 16 per block of 64 values.
        let first = xp.add(64 * 64 * 4 * run);
        for &p in std::slice::from_raw_parts(pp, marked) {
            // Mark p: lane p % 16 of the run's block p / 16, whose values are 16 apart.
            let p = p as usize;
            kept += V::keep_lane_of_block::<S>(first.add(BLOCK * (p / W) + p % W), hi, lo, t0, cp.add(kept));
        }
    }
    kept
}

/// `lanes::sum_map(x, f)` over the storage.
#[inline(always)]
unsafe fn sum<V: F32x16, S: Storage>(x: &[S], f: impl Fn(V) -> V) -> f32 {
    let [s] = fold::<V, S, 1>(x, #[inline(always)] |v, [s]| [s + f(v)]);
    s.combine()
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
        s = plus_tail::<V, S>(s, &nx[full..]);
    }
    (acc, Some(s.combine()))
}

/// L1's pass over a centred row, `(sum of |z|, lo sum of next, sum of after)`, with two
/// more chains along: the next row's lo sum (its `x - hi_next`, as the lo pass of
/// [`raw_stats`] computes it) and, when `after` (the row after next) is given, the sum of that
/// row (as [`sum`]; `None` otherwise).
///
/// Why: a centred L1 row needs three sums, each from the one before: the sum of `x` (for
/// `hi`), of `x - hi` (for `lo`), and of `|(x - hi) - lo|`. Each is a chain of one dependent
/// add per 16 values, so a row of 1024 took two such chains even with its sum computed by the
/// row before ([`fold_with_next`]), twice the latency of LayerNorm's or L-inf's one pass. Here
/// the chains of three rows run side by side, and a row in the middle of a task makes one
/// pass for its statistics. Same values, lanes and order in every chain: the same bits.
#[inline(always)]
unsafe fn l1_pass_ahead<V: F32x16, S: Storage>(x: &[S], z_abs: impl Fn(V) -> V, next: &[S], hi_next: f32, after: Option<&[S]>) -> (f32, f32, Option<f32>) {
    let n = x.len();
    assert!(next.len() == n && after.is_none_or(|a| a.len() == n), "rows of another length");
    #[cfg(feature = "test-hooks")]
    L1_AHEAD.with(|q| q.set(q.get() + 1));
    let full = n - n % W;
    // Without a row after next, the third chain sums this row again (and is not returned).
    let third = after.unwrap_or(x);
    let (p, q, a) = (x.as_ptr(), next.as_ptr(), third.as_ptr());
    let hn = V::splat(hi_next);
    let (mut r, mut d, mut s) = (V::splat(0.0), V::splat(0.0), V::splat(0.0));
    each_group!(full, |i| {
        r = r + z_abs(S::load(p.add(i)));
        d = d + (S::load::<V>(q.add(i)) - hn);
        s = s + S::load::<V>(a.add(i));
    });
    if full < n {
        let tail = n - full;
        r = V::select_first(tail, r + z_abs(load_partial::<V, S>(&x[full..])), r);
        d = V::select_first(tail, d + (load_partial::<V, S>(&next[full..]) - hn), d);
        s = plus_tail::<V, S>(s, &third[full..]);
    }
    // Not `Option::map`: a closure around the combine's intrinsics may be left out of line
    // (`.ci/intrinsics-inlined.py` found one in an incremental build).
    let sum_after = if after.is_some() { Some(s.combine()) } else { None };
    (r.combine(), d.combine(), sum_after)
}

/// `s` plus the row's last, partial group `tail` (fewer than 16 values) in its first lanes,
/// the other lanes unchanged (nothing to add when `tail` is empty): how every sum of a next
/// row ends, so that it has the same bits whichever pass computes it ([`fold_with_next`],
/// `block_maxima`, and `store_row` from saved values).
#[inline(always)]
unsafe fn plus_tail<V: F32x16, S: Storage>(s: V, tail: &[S]) -> V {
    if tail.is_empty() {
        s
    } else {
        V::select_first(tail.len(), s + load_partial::<V, S>(tail), s)
    }
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
/// here, outside the loop. `saved`: the row's `x - hi` from its statistics pass, which the
/// groups then read instead of the row, where no output may be non-finite.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn normalize_store<V: F32x16, S: Storage>(
    ctx: &RowCtx<f32>,
    x: &[S],
    y: &mut [S],
    raw: &Raw<f32>,
    affine: &RowAffine,
    check: bool,
    ahead: *const u8,
    saved: Option<&[f32]>,
    next: Option<&[S]>,
) -> (u64, Option<f32>) {
    let t = match saved {
        Some(t) => {
            assert!(ctx.centred && t.len() >= x.len(), "saved centred values of another row");
            t.as_ptr()
        }
        None => std::ptr::null(),
    };
    let next = match next {
        Some(nx) => {
            assert_eq!(nx.len(), x.len(), "the next row has another length");
            nx.as_ptr() as *const u8
        }
        None => std::ptr::null(),
    };
    let p = Affine { hi: raw.hi, lo: raw.lo, s: raw.s, terms: *affine, ahead, t, next, next_sum: std::cell::Cell::new(None) };
    let (has_w, has_b) = (!affine.w.is_empty(), !affine.b.is_empty());
    let stream = ctx.stream_output;
    let bad = if check {
        store_row_variant::<V, S, true>(ctx.centred, has_w, has_b, x, y, &p, stream)
    } else {
        store_row_variant::<V, S, false>(ctx.centred, has_w, has_b, x, y, &p, stream)
    };
    (bad, p.next_sum.get())
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
    /// The first byte of the row to prefetch while storing this one ([`store_groups`]): a
    /// row of the same length.
    ahead: *const u8,
    /// The row's centred values `x - hi` as its statistics pass saved them (whole groups, in
    /// register order: [`top_k_lane_maxima`]), or null.
    t: *const f32,
    /// The next row (as long as this one, in the same storage), whose sum a store pass from
    /// `t` computes along ([`store_groups`], `NEXT`), or null.
    next: *const u8,
    /// That sum, `fold_with_next`'s bits, once computed.
    next_sum: std::cell::Cell<Option<f32>>,
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
        store_groups::<V, S, CENTRED, HAS_W, HAS_B, CHECK, false, true, false, false>(xg, yg, p).0
    } else if CENTRED && !CHECK && !p.t.is_null() {
        // The groups from the saved `t` (they start at the row's start: not streamed).
        #[cfg(feature = "test-hooks")]
        FROM_SAVED.with(|r| r.set(r.get() + 1));
        if p.next.is_null() {
            store_groups::<V, S, CENTRED, HAS_W, HAS_B, false, false, false, true, false>(xg, yg, p).0
        } else {
            let (bad, s) = store_groups::<V, S, CENTRED, HAS_W, HAS_B, false, false, false, true, true>(xg, yg, p);
            // The tail as `block_maxima` adds it (the groups are the same: no head).
            let s = plus_tail::<V, S>(s, std::slice::from_raw_parts((p.next as *const S).add(full), n - full));
            p.next_sum.set(Some(s.combine()));
            bad
        }
    } else {
        store_groups::<V, S, CENTRED, HAS_W, HAS_B, CHECK, false, false, false, false>(xg, yg, p).0
    };
    if !maybe_bad {
        return 0;
    }
    if S::NON_NAN_STORE_IS_PARTIAL {
        if stream {
            store_groups::<V, S, CENTRED, HAS_W, HAS_B, true, true, true, false, false>(xg, yg, p);
        } else {
            store_groups::<V, S, CENTRED, HAS_W, HAS_B, true, true, false, false, false>(xg, yg, p);
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
    let t = if CENTRED { v - V::splat(p.hi) } else { v };
    output_of::<V, CENTRED, HAS_W, HAS_B>(t, w, b, p)
}

/// [`output`] from `t`: `x - hi` when centred (computed, or saved by the statistics pass), else
/// `x`.
#[inline(always)]
unsafe fn output_of<V: F32x16, const CENTRED: bool, const HAS_W: bool, const HAS_B: bool>(t: V, w: V, b: V, p: &Affine) -> V {
    let s = V::splat(p.s);
    let mut r = if CENTRED { (t - V::splat(p.lo)) * s } else { t * s };
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
/// `FROM_T`: each group's `x - hi` is read from `p.t` (saved by the statistics pass; centred,
/// the groups starting at the row's start), not computed from `x`. `NEXT` (with `FROM_T`):
/// the lane sums of the next row's groups (`p.next`) are returned second, added group by group
/// in the order of `fold_with_next`, whose bits the caller's sum then has (zero without).
///
/// The groups also prefetch the row ahead (`p.ahead`) at the same offsets, once per 64 bytes,
/// so that row is read from memory while this one is computed and written, not after. Without
/// it a row's passes ran in turn: the first read the row from memory, and the memory idled
/// while the others ran from L1. In-process A/B on the AVX2 host of the README
/// (`examples/prefetch_ahead.rs`, time without over time with, medians): f32 4096x1024
/// 1.02-1.22 (Top-k 1.05-1.14); 16384x4096 f32 0.97-1.07, f16 1.01-1.07, bf16 1.00-1.19;
/// 4096x1024 f16/bf16, which stay in L3 and are limited by the instructions, 0.97-1.02.
/// Prefetching the whole row at the row's start had made 16384x4096 2-10% slower.
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
    const FROM_T: bool,
    const NEXT: bool,
>(
    x: &[S],
    y: &mut [S],
    p: &Affine,
) -> (bool, V) {
    debug_assert!(!FROM_T || (CENTRED && p.terms.head == 0 && !p.t.is_null()));
    debug_assert!(!NEXT || (FROM_T && !p.next.is_null()));
    let q = p.next as *const S;
    let mut s = V::splat(0.0);
    let full = x.len() - x.len() % W;
    let zero = V::splat(0.0);
    // The weight and bias of these groups, in register order.
    let (wl, bl) = (p.terms.wl, p.terms.bl);
    assert!((!HAS_W || wl.len() >= full) && (!HAS_B || bl.len() >= full), "affine terms shorter than the row");
    let (xp, yp, wp, bp) = (x.as_ptr(), y.as_mut_ptr(), wl.as_ptr(), bl.as_ptr());
    // `x` starts `head` values into its row; the row ahead has as many values.
    let ahead = p.ahead.add(p.terms.head * std::mem::size_of::<S>());
    let mut big = zero;
    each_group!(full, |i| {
        // One prefetch per 64 bytes, so per line: a group of 16-bit values is half a line,
        // and `each_group!`'s pairs start at even groups.
        if std::mem::size_of::<S>() * W >= LINE || i.is_multiple_of(2 * W) {
            prefetch(ahead.add(i * std::mem::size_of::<S>()));
        }
        let wv = if HAS_W { V::load_lanes(wp.add(i)) } else { zero };
        let bv = if HAS_B { V::load_lanes(bp.add(i)) } else { zero };
        let r = if FROM_T {
            output_of::<V, CENTRED, HAS_W, HAS_B>(V::load_lanes(p.t.add(i)), wv, bv, p)
        } else {
            output::<V, CENTRED, HAS_W, HAS_B>(S::load(xp.add(i)), wv, bv, p)
        };
        if CHECK {
            big = big.max_abs_bits(r);
        }
        if NEXT {
            s = s + S::load(q.add(i));
        }
        match (EXACT_NAN, NT) {
            (true, false) => S::store(r, yp.add(i)),
            (false, false) => S::store_non_nan(r, yp.add(i)),
            (true, true) => S::store_nt(r, yp.add(i)),
            (false, true) => S::store_non_nan_nt(r, yp.add(i)),
        }
    });
    (CHECK && big.to_array().iter().any(|&m| m.to_bits() > S::MAX_FINITE_BITS), s)
}

/// Ask for the cache line of `p` (a hint: no fault, nothing else happens).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults, whatever `p` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for the cache line of `p` for writing (`prefetchw`): the line arrives owned, so the
/// first store to it need not read it then (a hint: no fault, nothing else happens).
#[inline(always)]
fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults, whatever `p` is. The
    // fused forward runs on AVX2 or AVX-512 processors; those that do not report PREFETCHW
    // (Intel's before Broadwell) decode its opcode as a no-op.
    unsafe {
        std::arch::asm!("prefetchw [{p}]", p = in(reg) p, options(nostack, readonly, preserves_flags))
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

mod staged;

#[cfg(feature = "test-hooks")]
pub(crate) mod tests;

/// The unit tests of this module and of [`staged`] ([`crate::unit_tests`]).
#[cfg(feature = "test-hooks")]
pub(super) fn unit_tests() -> Vec<crate::unit_tests::UnitTest> {
    [tests::TESTS, staged::tests::TESTS].concat()
}
