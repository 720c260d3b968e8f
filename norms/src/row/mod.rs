//! Row forms: every norm over the last axis of a `[rows, n]` row-major view.
//!
//! ```
//! use normlab_norms::{row, Accum, NormSpec};
//! let x = [1.0f32, -2.0, 3.0, -4.0, 0.5, 0.0];
//! let mut y = [0.0f32; 6];
//! let mut stats = [Default::default(); 2];
//! let counters = row::forward(&NormSpec::l1(0.0), Accum::F32, &x, 3, None, None, &mut y, Some(&mut stats)).unwrap();
//! assert!(counters.is_clean());
//! // Each centred row now has mean 0 and C_L1 * mean|y| = 1.
//! let m = (y[0] + y[1] + y[2]) / 3.0;
//! assert!(m.abs() < 1e-6);
//! ```
//!
//! # Backward
//! With `z = x - mu`, `D(z)` the denominator, `x̂ = z/D`, `s = 1/D` and `g = dy * w`:
//!
//! ```text
//! dL/dz_j = s * (g_j - (g · x̂) * dD/dz_j)
//! dL/dx_j = dL/dz_j - mean(dL/dz)            (centred kinds; plain dL/dz otherwise)
//! dL/dw_j = sum over rows of dy_j * x̂_j,    dL/db_j = sum over rows of dy_j
//! ```
//!
//! | kind | dD/dz_j |
//! |---|---|
//! | Rms, Layer | x̂_j / n |
//! | UnitL2 | x̂_j (0 when the norm was clamped to eps) |
//! | L1 | C sign(z_j) / n, sign(0) = 0 |
//! | LInf | C sign(z_m) at m = argmax |z| (lowest index on ties), 0 elsewhere |
//! | TopK | C sign(z_j) / k for j among the k largest |z| (lowest indices on ties), 0 elsewhere |
//!
//! The backward takes the statistics saved by the forward (`RowStats`), so it recomputes only `x̂`, and the
//! selections of L-inf and Top-k, which follow the same tie rule. With f32 accumulation over f32/f16/bf16 it runs
//! in explicit SIMD (`fused_backward`: the generic kernel's bits in fewer passes), else by the generic kernel.
//! # Determinism
//! Rows are independent; each is reduced in fixed lanes combined in a fixed order. Weight and
//! bias gradients are summed in 64 fixed row blocks (by shape, not by thread), then in block
//! order: results are bitwise identical for any number of threads.

mod fused;
mod fused_backward;
mod kernel;
mod rank_select;
mod simd;
pub(crate) mod stats;

#[allow(unused_imports)]
pub(crate) use kernel::{normalize, normalize_to, row_backward, row_stats, scale_by_pow2, stats_view, Scratch};
pub use stats::RowStats;
pub(crate) use stats::RowCtx;

use rayon::prelude::*;

use crate::accum::{Accum, Real};
use crate::counters::Counters;
use crate::element::Element;
use crate::error::{NormError, Result};
use crate::spec::NormSpec;

/// Elements handed to one parallel task (rows are grouped so short rows do not drown in
/// scheduling overhead): at least this many ([`rows_per_task`]).
const TASK_ELEMS: usize = 1 << 15;
/// Elements of one task for large inputs, where each worker still gets
/// [`TASKS_PER_THREAD`] tasks or more ([`rows_per_task`]).
const LARGE_TASK_ELEMS: usize = 1 << 17;
/// The fewest tasks per worker thread that large tasks leave, for balance.
const TASKS_PER_THREAD: usize = 4;
/// Row blocks for the weight and bias gradients.
const GRAD_BLOCKS: usize = 64;

pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(NormError::Length { what, expected, got });
    }
    Ok(())
}

/// [`check_len`] for an optional slice (weight, bias, their gradients): absent is fine.
pub(crate) fn check_opt_len<T>(what: &'static str, expected: usize, v: Option<&[T]>) -> Result<()> {
    v.map_or(Ok(()), |v| check_len(what, expected, v.len()))
}

/// Number of rows of `x` viewed as `[rows, n]`, after validating the spec and lengths.
fn rows_of<T>(spec: &NormSpec, x: &[T], n: usize) -> Result<usize> {
    spec.validate(n)?;
    if !x.len().is_multiple_of(n) {
        return Err(NormError::Shape(format!("input of {} elements is not a whole number of rows of n = {n}", x.len())));
    }
    Ok(x.len() / n)
}

pub(crate) fn ctx<A: Real>(spec: &NormSpec, n: usize) -> Result<RowCtx<A>> {
    Ok(RowCtx {
        kind: spec.kind,
        centred: spec.centred,
        eps: spec.eps,
        c: A::from_f64(spec.scale_constant(n)?),
        inv_n: A::one() / A::from_usize(n),
        stream_output: false,
    })
}

/// Whether the fused forward's store pass prefetches the row ahead (`fused::rows`). On; a
/// switch only so that `examples/prefetch_ahead.rs` can measure what it brings, alternating in
/// one process (this host's speed drifts too much between processes).
#[doc(hidden)]
pub static PREFETCH_AHEAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the fused forward's rows ask for lines before their store pass (`fused::EarlyLines`:
/// f32 output lines for writing, and Top-k's row ahead during its selection). On; a switch
/// only so that `examples/prefetch_ahead.rs` can measure what it brings.
#[doc(hidden)]
pub static EARLY_LINES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the fused forward rounds bf16 rows by the AVX512_BF16 instruction where the CPU has
/// it (`simd::avx512::Avx512Bf16`; else by integer operations, the same bits). On; a switch
/// only so that `examples/prefetch_ahead.rs` can measure what it brings in one process.
#[doc(hidden)]
pub static BF16_INSTRUCTION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the fused forward computes a streamed row (`stream_output`) into a staging row and
/// then writes it out whole (`fused::staged`), rather than streaming each group from the store
/// pass (for the kinds `fused::staged::worth_staging` names). On; a switch only so that
/// `examples/prefetch_ahead.rs` (switch `staged`) and `normlab bench norms --unstaged` can
/// measure what it brings.
#[doc(hidden)]
pub static STAGED_OUTPUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the fused Top-k forward on AVX2 takes the mean of the k largest with no branch on
/// the data (`simd::top_k_avx2`; else by marks in memory, the same bits). On; a switch only so
/// that `examples/prefetch_ahead.rs` (switch `select`) can measure what it brings in one
/// process. AVX-512's selection in registers does not look at it.
#[doc(hidden)]
pub static SELECT_IN_REGISTERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the fused Top-k forward's statistics pass saves the centred values `t = x - hi`
/// (`fused::top_k_pass`) for the selection's gather and the store pass to read, rather than
/// reading the row again and subtracting `hi` (the same bits), the store pass then summing the
/// next row in place of the statistics pass (`fused::row`); for the storage types that
/// `Storage::SAVES_CENTRED` names, on AVX2. On; a switch only so that
/// `examples/prefetch_ahead.rs` (switch `saved`) can measure what it brings in one process.
#[doc(hidden)]
pub static SAVED_CENTRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the fused Top-k forward runs each row's store pass after the next row's statistics
/// and selection (`fused::pipelined_rows`), on AVX2, for rows written through the caches; else row by
/// row (`fused::rows`), the same bits. On; a switch only so that `examples/prefetch_ahead.rs`
/// (switch `pipelined`) can measure what it brings in one process.
#[doc(hidden)]
pub static PIPELINED_TOP_K: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether a forward that reads and writes `bytes` in all (input plus output) should write
/// around the caches: when they do not fit in the last-level cache together, the output's lines
/// are evicted before anyone reads them, and a normal store first reads every destination line
/// (1.5x the compulsory traffic of a norm). Measured on the 2-core development machine: f32
/// 16384x4096 rms 8-10% faster, layer f16 13%; and why not below the cache: f16 4096x1024 rms
/// (16 MiB in all) 0.27 ms with normal stores, 0.44-0.88 ms streamed. The threshold is
/// [`stream_threshold`]'s; `NORMLAB_STREAM_MIN_BYTES` overrides it (0: always stream).
pub(crate) fn stream_output(bytes: usize) -> bool {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    bytes >= *MIN.get_or_init(|| {
        let var = std::env::var("NORMLAB_STREAM_MIN_BYTES").ok();
        stream_threshold(var.as_deref(), last_level_cache_bytes())
    })
}

/// Where a VM's sysfs reports the whole socket's L3 (a 2-vCPU Xeon guest read 300 MiB), the
/// share a process gets is far smaller, as the neighbours use the rest: [`stream_output`]
/// takes the L3 size up to this cap. On that guest (`normlab bench norms`, default stores
/// against `NORMLAB_STREAM_MIN_BYTES=0`, two alternations each): streamed, the 16-bit
/// 16384x4096 forwards (256 MiB in all) went from 52-60% to 62-76% of the copy bandwidth,
/// f32 4096x4096 (128 MiB) from 8.5 to 5.0-5.5 ms for rms, f16 4096x4096 (64 MiB) l1 from
/// 5.2-5.7 to 4.1-4.6 ms; at 32 MiB (f32 4096x1024) neither was faster in both runs, and at
/// 16 MiB (16-bit 4096x1024) streaming was slower.
pub(crate) const STREAM_CAP_BYTES: usize = 64 << 20;

/// The byte count from which [`stream_output`] streams: the override when it parses (bytes),
/// else the last-level cache's size capped at [`STREAM_CAP_BYTES`], else 32 MiB.
pub(crate) fn stream_threshold(var: Option<&str>, llc: Option<usize>) -> usize {
    if let Some(v) = var.and_then(|v| v.trim().parse().ok()) {
        return v;
    }
    llc.map_or(32 << 20, |l| l.min(STREAM_CAP_BYTES))
}

/// The L3 size of CPU 0 (`/sys/devices/system/cpu/cpu0/cache/index3/size`, e.g. "32768K").
fn last_level_cache_bytes() -> Option<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size").ok()?;
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|v| v * mult).filter(|&v| v > 0)
}

pub(crate) fn widen<T: Element, A: Real>(v: Option<&[T]>) -> Option<Vec<A>> {
    v.map(|v| {
        let mut out = vec![A::zero(); v.len()];
        A::load(v, &mut out);
        out
    })
}

pub(crate) fn count_nonfinite<T: Element>(v: &[T]) -> u64 {
    T::count_nonfinite(v)
}

/// Whether the CPU has AVX2, FMA, F16C and POPCNT (detected once). The hot loops are compiled twice,
/// for the baseline target and for these features, and dispatched on this. Both builds give
/// bit-identical results: Rust never contracts `a*b + c` into an FMA by itself and the lane
/// order is the same; only the vector width changes.
#[inline(always)]
pub(crate) fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
                && is_x86_feature_detected!("popcnt")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Define `$name` calling the `#[inline(always)]` function `$body` compiled with AVX2/FMA/F16C
/// when the CPU has them, and for the baseline target otherwise.
macro_rules! multiversioned {
    ($(#[$m:meta])* fn $name:ident<$($g:ident: $b:path),*>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $body:ident) => {
        $(#[$m])*
        fn $name<$($g: $b),*>($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn wide<$($g: $b),*>($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                if has_avx2() {
                    // SAFETY: the features were detected at run time.
                    return unsafe { wide($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use multiversioned;

/// Forward of a row form. `x` and `y` are `[rows, n]` row-major; `weight` and `bias` have
/// length n; `stats` (length rows), if given, receives what the backward needs.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    x: &[T],
    n: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    stats: Option<&mut [RowStats]>,
) -> Result<Counters> {
    // Compiled in this crate for each storage type (crate::compiled).
    T::row_forward(spec, accum, x, n, weight, bias, y, stats)
}

/// [`forward`]'s body, which [`crate::compiled`] instantiates for each storage type.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_generic<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    x: &[T],
    n: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    stats: Option<&mut [RowStats]>,
) -> Result<Counters> {
    let rows = rows_of(spec, x, n)?;
    check_len("output", x.len(), y.len())?;
    check_opt_len("weight", n, weight)?;
    check_opt_len("bias", n, bias)?;
    let mut own = Vec::new();
    let stats = match stats {
        Some(s) => {
            check_len("stats", rows, s.len())?;
            s
        }
        None => {
            own.resize(rows, RowStats::default());
            &mut own[..]
        }
    };
    crate::with_accum!(accum, A => forward_impl::<T, A>(spec, x, n, weight, bias, y, stats))
}

fn forward_impl<T: Element, A: Real>(
    spec: &NormSpec,
    x: &[T],
    n: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    stats: &mut [RowStats],
) -> Result<Counters> {
    if x.is_empty() {
        return Ok(Counters::default());
    }
    let mut ctx = ctx::<A>(spec, n)?;
    ctx.stream_output = stream_output(std::mem::size_of_val(x) + std::mem::size_of_val(y));
    let w = widen::<T, A>(weight);
    let b = widen::<T, A>(bias);
    let rows_per_task = rows_per_task(x.len() / n, n, rayon::current_num_threads());
    let level = fused::Level::detect();
    let counters = y
        .par_chunks_mut(n * rows_per_task)
        .zip(x.par_chunks(n * rows_per_task))
        .zip(stats.par_chunks_mut(rows_per_task))
        .map_init(
            || Scratch::<A>::new(n),
            |scr, ((yc, xc), sc)| forward_task(level, &ctx, xc, yc, sc, w.as_deref(), b.as_deref(), scr),
        )
        .reduce(Counters::default, |a, b| a + b);
    Ok(counters)
}

/// Rows per parallel task of a forward over `rows` rows of `n` on `threads` workers: rows of
/// [`TASK_ELEMS`] elements (at least one), grown towards [`LARGE_TASK_ELEMS`] as long as
/// every worker still gets [`TASKS_PER_THREAD`] tasks. A task pays once for what it sets up
/// (the fused kernels' maximum of the weight and its copy in register order, a staging row,
/// the fence after streamed stores), and its first row was not prefetched by the row before.
/// Measured on the AVX2 host of the README (in one process, alternating, time with the old
/// tasks over time with tasks 4x as large, medians of 300 runs, two threads): 16384x4096 bf16
/// Top-k 1.107 and RMSNorm 1.075 (8 -> 32 rows per task); 4096x1024 Top-k bf16 1.006-1.018 and
/// f32 1.026, L-inf 1.010-1.013, RMSNorm 0.988-1.007 (32 -> 128 rows per task). Smaller inputs
/// get tasks between the two sizes, never below the old one.
fn rows_per_task(rows: usize, n: usize, threads: usize) -> usize {
    let small = (TASK_ELEMS / n).max(1);
    let large = (LARGE_TASK_ELEMS / n).max(1);
    small.max(large.min(rows / (TASKS_PER_THREAD * threads.max(1))))
}

/// Forward of consecutive rows (one parallel task): by the explicit-SIMD kernels of
/// [`fused`] where they apply (f32 accumulation over f32/f16/bf16 storage), by the generic
/// kernel otherwise. Both give the same bits. Not inlined, so that a profiler can count
/// the row work alone (`norms/examples/count_forward.sh`).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn forward_task<T: Element, A: Real>(
    level: fused::Level,
    ctx: &RowCtx<A>,
    xc: &[T],
    yc: &mut [T],
    sc: &mut [RowStats],
    w: Option<&[A]>,
    b: Option<&[A]>,
    scr: &mut Scratch<A>,
) -> Counters {
    match fused::forward_rows(level, ctx, xc, yc, sc, w, b, scr) {
        Some(c) => c,
        None => forward_rows_mv(ctx, xc, yc, sc, w, b, scr),
    }
}

multiversioned! {
    fn forward_rows_mv<T: Element, A: Real>(
        ctx: &RowCtx<A>, xc: &[T], yc: &mut [T], sc: &mut [RowStats], w: Option<&[A]>, b: Option<&[A]>, scr: &mut Scratch<A>,
    ) -> Counters => forward_rows
}

multiversioned! {
    #[allow(clippy::too_many_arguments)]
    fn backward_rows_mv<T: Element, A: Real>(
        ctx: &RowCtx<A>, xc: &[T], dyc: &[T], dxc: &mut [T], sc: &[RowStats], w: Option<&[A]>, dw: Option<&mut [A]>,
        db: Option<&mut [A]>, scr: &mut Scratch<A>, mask: &mut [bool],
    ) -> Counters => backward_rows
}

/// Forward of consecutive rows (one parallel task).
#[inline(always)]
fn forward_rows<T: Element, A: Real>(
    ctx: &RowCtx<A>,
    xc: &[T],
    yc: &mut [T],
    sc: &mut [RowStats],
    w: Option<&[A]>,
    b: Option<&[A]>,
    scr: &mut Scratch<A>,
) -> Counters {
    let n = scr.a.len();
    let mut c = Counters::default();
    for ((yr, xr), st) in yc.chunks_mut(n).zip(xc.chunks(n)).zip(sc.iter_mut()) {
        let Scratch { a, b: sb, c: sc2, .. } = scr;
        // Native storage is read in place; other types are widened into `a` once.
        let xa: &[A] = match A::view(xr) {
            Some(v) => v,
            None => {
                A::load(xr, &mut a[..n]);
                &a[..n]
            }
        };
        let (stats, rescued) = stats_view(ctx, xa, &mut sc2[..], &mut sb[..], || count_nonfinite(xr), &mut c);
        *st = stats;
        let src: &[A] = if rescued { &sb[..n] } else { xa };
        match A::view_mut(yr) {
            Some(y) => normalize_to(ctx, src, y, st, w, b),
            None => {
                // `src` is `a` or `sb`; `sc2` is free again after the statistics.
                normalize_to(ctx, src, &mut sc2[..n], st, w, b);
                A::store(&sc2[..n], yr);
            }
        }
        c.nonfinite_out += count_nonfinite(yr);
    }
    c
}

/// Backward of a row form: `dx` from `dy`, and optionally the weight and bias gradients
/// (summed over rows deterministically). `stats` are those the forward returned.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    x: &[T],
    dy: &[T],
    n: usize,
    stats: &[RowStats],
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    // Compiled in this crate for each storage type (crate::compiled).
    T::row_backward(spec, accum, x, dy, n, stats, weight, dx, dweight, dbias)
}

/// [`backward`]'s body, which [`crate::compiled`] instantiates for each storage type.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_generic<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    x: &[T],
    dy: &[T],
    n: usize,
    stats: &[RowStats],
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    let rows = rows_of(spec, x, n)?;
    check_len("dy", x.len(), dy.len())?;
    check_len("dx", x.len(), dx.len())?;
    check_len("stats", rows, stats.len())?;
    check_opt_len("weight", n, weight)?;
    check_opt_len("dweight", n, dweight.as_deref())?;
    check_opt_len("dbias", n, dbias.as_deref())?;
    crate::with_accum!(accum, A => backward_impl::<T, A>(spec, x, dy, n, stats, weight, dx, dweight, dbias))
}

/// One gradient block's result: its counters and its dweight / dbias partial sums.
type BlockPartials<A> = (Counters, Option<Vec<A>>, Option<Vec<A>>);

#[allow(clippy::too_many_arguments)]
fn backward_impl<T: Element, A: Real>(
    spec: &NormSpec,
    x: &[T],
    dy: &[T],
    n: usize,
    stats: &[RowStats],
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    let rows = x.len() / n;
    let ctx = ctx::<A>(spec, n)?;
    let w = widen::<T, A>(weight);
    let want_dw = dweight.is_some();
    let want_db = dbias.is_some();
    let rows_per_block = rows.div_ceil(GRAD_BLOCKS).max(1);
    let level = fused_backward::level_for(w.as_deref());
    let results: Vec<BlockPartials<A>> = dx
        .par_chunks_mut(n * rows_per_block)
        .zip(x.par_chunks(n * rows_per_block))
        .zip(dy.par_chunks(n * rows_per_block))
        .zip(stats.par_chunks(rows_per_block))
        .map_init(
            || (Scratch::<A>::new(n), vec![false; n]),
            |(scr, mask), (((dxc, xc), dyc), sc)| backward_task(level, &ctx, xc, dyc, dxc, sc, w.as_deref(), want_dw, want_db, scr, mask),
        )
        .collect();
    let mut counters = Counters::default();
    let mut dw_sum = want_dw.then(|| vec![A::zero(); n]);
    let mut db_sum = want_db.then(|| vec![A::zero(); n]);
    // Block partials summed in block order: the result does not depend on the thread count.
    let add = |acc: &mut Option<Vec<A>>, part: Option<Vec<A>>| {
        if let (Some(acc), Some(p)) = (acc.as_mut(), part) {
            acc.iter_mut().zip(p).for_each(|(a, p)| *a = *a + p);
        }
    };
    for (c, dw, db) in results {
        counters += c;
        add(&mut dw_sum, dw);
        add(&mut db_sum, db);
    }
    for (out, acc) in [(dweight, dw_sum), (dbias, db_sum)] {
        if let (Some(out), Some(acc)) = (out, acc) {
            A::store(&acc, out);
            counters.nonfinite_out += count_nonfinite(out);
        }
    }
    Ok(counters)
}

/// Backward of one block of consecutive rows, with that block's weight/bias gradient
/// partials: by the explicit-SIMD kernel of [`fused_backward`] where it applies (f32
/// accumulation over f32/f16/bf16 storage), by the generic kernel otherwise; the same bits.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn backward_task<T: Element, A: Real>(
    level: fused::Level,
    ctx: &RowCtx<A>,
    xc: &[T],
    dyc: &[T],
    dxc: &mut [T],
    sc: &[RowStats],
    w: Option<&[A]>,
    want_dw: bool,
    want_db: bool,
    scr: &mut Scratch<A>,
    mask: &mut [bool],
) -> BlockPartials<A> {
    let n = scr.a.len();
    let mut dw = want_dw.then(|| vec![A::zero(); n]);
    let mut db = want_db.then(|| vec![A::zero(); n]);
    let c = match fused_backward::backward_rows(level, ctx, xc, dyc, dxc, sc, w, dw.as_deref_mut(), db.as_deref_mut(), scr, mask) {
        Some(c) => c,
        None => backward_rows_mv(ctx, xc, dyc, dxc, sc, w, dw.as_deref_mut(), db.as_deref_mut(), scr, mask),
    };
    (c, dw, db)
}

/// Backward of consecutive rows by the generic kernel, adding to `dw` and `db`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_rows<T: Element, A: Real>(
    ctx: &RowCtx<A>,
    xc: &[T],
    dyc: &[T],
    dxc: &mut [T],
    sc: &[RowStats],
    w: Option<&[A]>,
    mut dw: Option<&mut [A]>,
    mut db: Option<&mut [A]>,
    scr: &mut Scratch<A>,
    mask: &mut [bool],
) -> Counters {
    let n = scr.a.len();
    let mut c = Counters::default();
    for (((dxr, xr), dyr), st) in dxc.chunks_mut(n).zip(xc.chunks(n)).zip(dyc.chunks(n)).zip(sc) {
        c.nonfinite_out += backward_row(ctx, xr, dyr, dxr, st, w, dw.as_deref_mut(), db.as_deref_mut(), scr, mask);
    }
    c
}

/// One row's backward by the generic kernel (`kernel::row_backward`), adding to `dw` and
/// `db`; returns the number of non-finite values in `dxr`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_row<T: Element, A: Real>(
    ctx: &RowCtx<A>,
    xr: &[T],
    dyr: &[T],
    dxr: &mut [T],
    st: &RowStats,
    w: Option<&[A]>,
    dw: Option<&mut [A]>,
    db: Option<&mut [A]>,
    scr: &mut Scratch<A>,
    mask: &mut [bool],
) -> u64 {
    let n = xr.len();
    let (xb, gb) = (&mut scr.a[..n], &mut scr.b[..n]);
    A::load(xr, xb);
    A::load(dyr, gb);
    row_backward(ctx, xb, gb, st, w, dw, db, &mut scr.c, mask);
    if st.exp2 != 0 {
        kernel::scale_by_pow2(gb, st.exp2);
    }
    A::store(gb, dxr);
    count_nonfinite(dxr)
}

/// The unit tests of this module and its private submodules ([`crate::unit_tests`]).
#[cfg(feature = "test-hooks")]
pub(crate) fn unit_tests() -> Vec<crate::unit_tests::UnitTest> {
    let mut all = [stream_tests::TESTS, task_tests::TESTS, rank_select::tests::TESTS].concat();
    all.extend(fused::unit_tests());
    all.extend(fused_backward::unit_tests());
    all.extend(simd::unit_tests());
    all
}

#[cfg(feature = "test-hooks")]
pub(crate) mod stream_tests {
    use super::{stream_threshold, STREAM_CAP_BYTES};

    fn the_cache_size_is_capped_and_the_override_wins() {
        const MIB: usize = 1 << 20;
        // A 2-vCPU guest's sysfs reporting the socket's 300 MiB: capped.
        assert_eq!(stream_threshold(None, Some(300 * MIB)), STREAM_CAP_BYTES);
        // A 32 MiB L3 is below the cap: kept.
        assert_eq!(stream_threshold(None, Some(32 * MIB)), 32 * MIB);
        assert_eq!(stream_threshold(None, None), 32 * MIB);
        assert_eq!(stream_threshold(Some(" 0 "), Some(300 * MIB)), 0);
        assert_eq!(stream_threshold(Some("1000000000"), Some(32 * MIB)), 1_000_000_000);
        // An unparsable override is ignored.
        assert_eq!(stream_threshold(Some("lots"), Some(300 * MIB)), STREAM_CAP_BYTES);
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![the_cache_size_is_capped_and_the_override_wins];
}

#[cfg(feature = "test-hooks")]
pub(crate) mod task_tests {
    use super::rows_per_task;

    /// Large inputs get tasks four times the old size; small ones keep the old size, so that
    /// every worker still has several tasks; no size is ever zero.
    fn tasks_grow_only_where_every_worker_keeps_several() {
        // The benchmark's shapes on two threads: 32 -> 128 and 8 -> 32 rows per task.
        assert_eq!(rows_per_task(4096, 1024, 2), 128);
        assert_eq!(rows_per_task(16384, 4096, 2), 32);
        // Too few rows for four large tasks per worker: the old 32 rows of 1024.
        assert_eq!(rows_per_task(128, 1024, 2), 32);
        assert_eq!(rows_per_task(512, 1024, 2), 64);
        // Short rows: the old grouping (512 rows of 64), never less.
        assert_eq!(rows_per_task(512, 64, 2), 512);
        // Rows longer than a task, one row, zero threads reported: one row per task.
        assert_eq!(rows_per_task(10, 1 << 18, 2), 1);
        assert_eq!(rows_per_task(1, 7, 0), 4681);
        for (rows, n, threads) in [(4096, 1024, 16), (100_000, 3, 64), (3, 100_000, 1)] {
            let r = rows_per_task(rows, n, threads);
            assert!(r >= 1 && r >= (super::TASK_ELEMS / n).max(1), "{rows}x{n} on {threads}: {r}");
        }
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![tasks_grow_only_where_every_worker_keeps_several];
}
