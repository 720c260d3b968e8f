//! Streamed rows written out whole: a row whose output goes around the caches
//! (`row::stream_output`) is computed into a staging row in L1 by ordinary stores, then copied
//! to its destination, its whole 64-byte lines by non-temporal stores in one tight loop and the
//! partial lines at its two ends by ordinary stores.
//!
//! # Why
//! Before, the store pass issued its non-temporal stores itself, between its loads, its
//! arithmetic and its prefetches, and a row whose start was not aligned to a line wrote its
//! first and last 16 values by ordinary stores that overlapped lines the non-temporal stores
//! also wrote. In `normlab bench norms` on the AVX2 host of the README (2 cores; f32
//! 4096x1024, 32 MiB in all, streamed; the output buffer 16 bytes past a line), skipping the
//! stores of the store pass altogether took L-inf from 1.02 to 0.52 ms and Top-k from 1.31 to
//! 0.85 ms: the stores cost half the forward, and no computation overlapped them. Staged
//! for every kind (37a7585), timed staged and unstaged alternately inside the benchmark's
//! rounds by a hook that was not committed (3 runs, medians of 60 forwards each): RMSNorm
//! 0.74 -> 0.74, LayerNorm 0.90 -> 0.80, unit norm 0.72 -> 0.67, L1 0.93 -> 0.82, L-inf
//! 0.94 -> 0.80, Top-k 1.10 -> 0.99 ms. Whole benchmark runs each way disagreed for the
//! first three kinds, which are no longer staged ([`worth_staging`]); longer rows lose
//! ([`MAX_STAGED_BYTES`]). `row::STAGED_OUTPUT` switches it (for
//! `examples/prefetch_ahead.rs` and `normlab bench norms --unstaged`).

use super::super::simd::Storage;
use super::LINE;
use crate::spec::NormKind;

/// The longest rows staged, in bytes: one staging row beside the rows the passes read must
/// stay in L1. Measured (the module doc's in-rounds A/B, every kind staged against streamed
/// group by group): rows of 4 KiB (f32 1024) gained 6-15% (RMSNorm unchanged); rows of 8 KiB
/// (bf16 4096) lost 4-9% and rows of 16 KiB (f32 4096) 10-25%. Lengths in between were not
/// measured.
pub(super) const MAX_STAGED_BYTES: usize = 4096;

/// Whether streamed rows of `n` values of `S` of `kind` are staged: L1, L-inf and Top-k rows
/// of at most [`MAX_STAGED_BYTES`]. RMSNorm, LayerNorm and unit norm are not: in whole
/// `normlab bench norms` runs (f32 4096x1024, 8 runs each way alternating, 7da2cbe's code +
/// `--unstaged`), staged against streamed from the store pass, their medians were
/// RMS 0.816 against 0.657 ms, LayerNorm 0.920 / 0.835 and unit norm 0.842 / 0.718 (staging
/// lost 9-20%), while L1 0.854 / 0.937, L-inf 0.837 / 0.880 and Top-k 1.026 / 1.092 (it won
/// 5-10%). The in-rounds A/B of the module doc had LayerNorm and unit norm gaining: how the
/// two ways share the caches when timed alternately changes the answer; whole runs are how the
/// benchmark runs. Even so, the same A/B on this code (4 runs each way) moved those three kinds
/// by 4-11% with their own code the same both ways: the other kinds' staging, or the machine,
/// accounts for part of the difference (README, "After bdf0bb4").
pub(super) fn worth_staging<S>(kind: NormKind, n: usize) -> bool {
    matches!(kind, NormKind::L1 | NormKind::LInf | NormKind::TopK { .. }) && n * std::mem::size_of::<S>() <= MAX_STAGED_BYTES
}

/// Room for one row's outputs, from which [`StagingRow::row_for`] cuts a row at the same
/// offset within a line as its destination (so that the copy's lines are whole on both sides).
pub(super) struct StagingRow<S> {
    buf: Vec<S>,
}

impl<S: Storage> StagingRow<S> {
    /// Room for rows of `n` values (none for `n = 0`: a task that does not stage).
    pub fn new(n: usize) -> Self {
        let pad = if n == 0 { 0 } else { LINE / std::mem::size_of::<S>() };
        StagingRow { buf: vec![S::default(); n + pad] }
    }

    /// The staging row for the destination row `y`: as long, and at the same offset within a
    /// 64-byte line. Both offsets are multiples of the value's size, so their difference is.
    pub fn row_for(&mut self, y: &[S]) -> &mut [S] {
        let want = y.as_ptr() as usize % LINE;
        let have = self.buf.as_ptr() as usize % LINE;
        let at = (want + LINE - have) % LINE / std::mem::size_of::<S>();
        &mut self.buf[at..at + y.len()]
    }
}

/// Copy `staged` (from [`StagingRow::row_for`]`(y)`) to `y`: the partial lines at the ends by
/// ordinary stores, the whole lines by non-temporal stores (weakly ordered: the caller ends
/// its task with `simd::sfence`, as for the store pass's own streaming stores).
/// # Safety
/// The CPU has AVX (the fused kernels' AVX2 or AVX-512 functions call this); `staged` is at
/// the same offset within a line as `y`, and as long.
#[inline(always)]
pub(super) unsafe fn write_out<S: Storage>(staged: &[S], y: &mut [S]) {
    debug_assert_eq!(staged.len(), y.len());
    debug_assert_eq!(staged.as_ptr() as usize % LINE, y.as_ptr() as usize % LINE);
    let bytes = std::mem::size_of_val(y);
    let (src, dst) = (staged.as_ptr() as *const u8, y.as_mut_ptr() as *mut u8);
    let head = ((LINE - dst as usize % LINE) % LINE).min(bytes);
    let lines = (bytes - head) / LINE;
    let body = head + lines * LINE;
    std::ptr::copy_nonoverlapping(src, dst, head);
    for l in 0..lines {
        stream_line(src.add(head + LINE * l), dst.add(head + LINE * l));
    }
    std::ptr::copy_nonoverlapping(src.add(body), dst.add(body), bytes - body);
}

/// One 64-byte line from `src` to `dst` (both line-aligned) by non-temporal stores.
#[inline(always)]
unsafe fn stream_line(src: *const u8, dst: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let a = _mm256_load_si256(src as *const __m256i);
        let b = _mm256_load_si256(src.add(32) as *const __m256i);
        _mm256_stream_si256(dst as *mut __m256i, a);
        _mm256_stream_si256(dst.add(32) as *mut __m256i, b);
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::ptr::copy_nonoverlapping(src, dst, LINE);
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn staged_rows_match_their_destination_offset_and_copy_whole() {
        // write_out's non-temporal stores need AVX: the fused kernels' own condition.
        assert!(crate::row::has_avx2(), "the fused kernels' tests run on AVX2 machines");
        for n in [16usize, 17, 31, 100, 1024, 1037] {
            let mut st = StagingRow::<f32>::new(n);
            for shift in 0..16 {
                let mut buf = vec![0f32; n + 16];
                let y = &mut buf[shift..shift + n];
                let s = st.row_for(y);
                assert_eq!(s.len(), n);
                assert_eq!(s.as_ptr() as usize % LINE, y.as_ptr() as usize % LINE, "n {n} shift {shift}");
                for (j, v) in s.iter_mut().enumerate() {
                    *v = j as f32 + 0.5;
                }
                let staged: Vec<f32> = s.to_vec();
                // SAFETY: AVX2 checked above; the staging row was cut for y.
                unsafe { write_out(st.row_for(y), y) };
                super::super::super::simd::sfence();
                assert_eq!(&*y, &staged[..], "n {n} shift {shift}");
                assert!(buf[..shift].iter().all(|&v| v == 0.0) && buf[shift + n..].iter().all(|&v| v == 0.0));
            }
        }
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![staged_rows_match_their_destination_offset_and_copy_whole];
}
