//! Top-k's mean of the k largest `|z|` with no branch on the data, for the fused forward's
//! rows on AVX2 whose length is a multiple of a block (`F32x16::top_k_mean_in_registers` of
//! [`super::avx2::Avx2`] and [`super::avx2_even_odd::Avx2EvenOdd`]): the marking of
//! `fused::mark_blocks`, the gather of `fused::gather_marked` and the selection of
//! `top_k_of_few`, as `top_k_avx512` does them on AVX-512, with tables where AVX2 has no
//! compress instruction.
//!
//! # Why
//! The general path records marks as words and decodes them with loops whose trip counts
//! vary row to row (the marks of a Gaussian row fall at random), and visits the marked lanes
//! in a loop of as many steps. Under callgrind's branch simulation (`--branch-sim=yes`, f32
//! rows of 1024 at k = 8) those three loops mispredicted about 2.7 times per row. Here every
//! loop has a trip count fixed by the row's length: each half block's lane maxima are
//! compared with the bound and the lanes marked are appended to a list of positions by a
//! permute from a table (eight positions written, the count advanced by the mask's
//! popcount); then the first 16 positions are visited, two lanes (eight values) per
//! register, and the values kept appended to the candidates the same way.
//!
//! # When
//! Rows of at most [`MAX_BLOCKS`] blocks (1024 values) with up to 16 marked lanes and 16
//! candidates, as on AVX-512 (about 99% of Gaussian rows of 1024 at k = 8). Otherwise `None`,
//! and the caller takes the general path, which gives the same value.
//!
//! The marking here costs about eleven instructions per half block (22 per block in the
//! compiled loop), where the general path's costs about six and its decoding about 100 per
//! row of 1024 (callgrind): the saving is per row and the cost per block. Measured on the AVX2 host of the README (AMD EPYC, 2 cores; in-process A/B,
//! `examples/prefetch_ahead.rs` switch `select`, time off over time on, Top-k k = 8): rows of
//! 512 1.046-1.071, of 1024 1.003-1.020 (f32), 1.006-1.010 (f16), 1.004-1.011 (bf16); in cache
//! (64 and 256 rows of 1024) about 1.00. Without the limit, rows of 2048 gave 1.000 (f32) and
//! 0.987 (bf16), rows of 4096 1.003-1.020 (f32) but 0.987-1.001 (f16) and 0.972-0.992 (bf16).
//! Fewer mispredicted branches (callgrind: 6.4 to 4.8 per f32 row of 1024), about as many
//! instructions.

use std::arch::x86_64::*;

use super::{avx2, F32x16, MarkedRow, Storage, W};

/// Values per block (`fused::BLOCK`): lane j of block b is the values `64 b + j + 16 q`.
const BLOCK: usize = 4 * W;

/// The longest rows, in blocks, that this path takes (see the module doc, "When").
pub(crate) const MAX_BLOCKS: usize = 16;

/// [`avx2::SET_BITS`] of `mask` (below 256) in eight 32-bit lanes: the permute that moves the
/// lanes of a register whose bit is set to the front, in order.
#[inline(always)]
unsafe fn set_bits(mask: usize) -> __m256i {
    debug_assert!(mask < 256);
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(avx2::SET_BITS.as_ptr().add(mask) as *const __m128i))
}

/// The mean of the k largest `|z| = |fl(fl(x_j - hi) - lo)|` of a row of `blocks` whole blocks:
/// the contract of `top_k_avx512::mean_of_marked` (the same value as
/// `fused::top_k_of_marked`, `None` when more than 16 lanes are marked or more than 16 values
/// kept, or fewer than k; and for rows of more than [`MAX_BLOCKS`] blocks, or with
/// `row::SELECT_IN_REGISTERS` off), for a layout `V` whose `store_lanes` put a block's lane maxima in
/// memory in lane order (`EVEN_ODD` false: [`super::avx2::Avx2`]) or the even lanes and then
/// the odd ones (`EVEN_ODD` true: [`super::avx2_even_odd::Avx2EvenOdd`]).
///
/// The candidates are the values `>= t0` of the marked lanes, sorted by `sort16`'s network,
/// and their sum is `fused::top_k_of_marked`'s expression on the sorted values (through `V`):
/// the same bits, whichever order the candidates were found in.
///
/// # Safety
/// AVX2 available; `x` valid for reading `64 blocks` values, `bmax` for `16 blocks` values,
/// `pos` for writing `16 blocks + 16` positions; `1 <= k <= 16`; `blocks >= 1`.
#[inline(always)]
pub(super) unsafe fn mean_of_marked<V: F32x16, S: Storage, const EVEN_ODD: bool>(row: MarkedRow<S>) -> Option<f32> {
    let MarkedRow { x, blocks, bmax, c, hi_lo: (hi, lo), t0, k, pos } = row;
    debug_assert!((1..=W).contains(&k) && blocks >= 1);
    if blocks > MAX_BLOCKS || !crate::row::SELECT_IN_REGISTERS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    // The positions of the marked lanes (the offset of each lane's first value), half block
    // by half block; each half writes eight and advances by its count.
    let cv = _mm256_set1_ps(c);
    // Memory slot j of a half holds lane 8 half + j, or, even and odd apart, lane 2 j + half:
    // the position of slot 0 of each half of the current block, advanced a block at a time.
    let mut first = if EVEN_ODD { [_mm256_set1_epi32(0), _mm256_set1_epi32(1)] } else { [_mm256_set1_epi32(0), _mm256_set1_epi32(8)] };
    let step = _mm256_set1_epi32(BLOCK as i32);
    let mut marked = 0usize;
    for b in 0..blocks {
        for (half, at0) in first.iter_mut().enumerate() {
            let m = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_loadu_ps(bmax.add(W * b + 8 * half)), cv)) as usize;
            let j = set_bits(m);
            let lane = if EVEN_ODD { _mm256_slli_epi32::<1>(j) } else { j };
            _mm256_storeu_si256(pos.add(marked) as *mut __m256i, _mm256_add_epi32(lane, *at0));
            marked += m.count_ones() as usize;
            *at0 = _mm256_add_epi32(*at0, step);
        }
    }
    if marked > W {
        return None;
    }
    // Past the last marked lane, position 0: a lane of the row, read and never kept.
    _mm256_storeu_si256(pos.add(marked) as *mut __m256i, _mm256_setzero_si256());
    _mm256_storeu_si256(pos.add(marked + 8) as *mut __m256i, _mm256_setzero_si256());
    let (h, l, t) = (_mm256_set1_ps(hi), _mm256_set1_ps(lo), _mm256_set1_ps(t0));
    let sign = _mm256_set1_ps(-0.0);
    // The candidates from index 0; each pair of lanes writes eight and advances by its count
    // (at most 56 before the last pair: room for 64). Only the first 16 are read, below:
    // those are zeroed first, the rest left uninitialised.
    let mut cand = [std::mem::MaybeUninit::<f32>::uninit(); 4 * W];
    let cp = cand.as_mut_ptr() as *mut f32;
    _mm256_storeu_ps(cp, _mm256_setzero_ps());
    _mm256_storeu_ps(cp.add(8), _mm256_setzero_ps());
    // Bit i set for the values of the marked lanes: four per lane, lane i / 4 (at most 16).
    let live_all = if marked == 0 { 0 } else { u64::MAX >> (64 - 4 * marked) };
    let mut kept = 0usize;
    for pair in 0..W / 2 {
        let p = |i: usize| x.add(*pos.add(2 * pair + i) as usize);
        let v = _mm256_set_m128(S::load_lane_of_block(p(1)), S::load_lane_of_block(p(0)));
        // |z| as `keep_lane_of_block` computes it: the same operations, the same bits.
        let z = _mm256_andnot_ps(sign, _mm256_sub_ps(_mm256_sub_ps(v, h), l));
        let live = (live_all >> (8 * pair)) as usize & 0xFF;
        let keep = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(z, t)) as usize & live;
        _mm256_storeu_ps(cp.add(kept), _mm256_permutevar8x32_ps(z, set_bits(keep)));
        kept += keep.count_ones() as usize;
    }
    if kept > W || kept < k {
        return None;
    }
    // `sort16::top_k_of_few` on the candidates (padded with -1, below every magnitude), then
    // `fused::top_k_of_marked`'s sum: the k largest in their lanes, the rest zero, combined.
    // SAFETY of the slice: its 16 values were written (zeroed above, then some overwritten).
    super::sort16::top_k_of_few(std::slice::from_raw_parts_mut(cp, W), kept, k);
    Some(super::mean_of_k(V::select_first(k, V::load_f32(cp), V::splat(0.0)).combine(), k))
}
