//! Top-k's mean of the k largest `|z|` in AVX-512 registers, for the fused forward's rows
//! whose length is a multiple of a block (`F32x16::top_k_mean_in_registers` of
//! [`super::avx512::Avx512`]): the marking of `fused::mark_blocks`, the gather of
//! `fused::gather_marked` and the selection of `top_k_of_few`, with no branch on the data and
//! the candidates never stored.
//!
//! # Why
//! Measured on rows of 1024 f32 in cache (AVX-512 guest, `examples/forward_wall`), the
//! general path's gather cost about 0.09 us a row and its selection 0.05 us, for about 11
//! candidates. Two likely reasons (not measured one by one: this guest has no performance
//! counters): the words of marks are decoded by loops whose trip counts vary row to row, which
//! no predictor learns, and whose branches resolve only after the whole chain of dependent
//! steps from the pass's maxima; and the candidates go through memory twice, each time read by
//! a wider load than the stores that wrote them (no store forwarding). Here the marked lanes are
//! compressed into a list of positions block by block, the four values of up to 16 lanes are
//! loaded in four registers of four lanes each, and the candidates are compressed and expanded
//! into one register, which the sorting network sorts.
//!
//! # When
//! Up to 16 marked lanes and 16 candidates: about 99% of Gaussian rows of 1024 or 4096 at
//! k = 8 (both counts average about 11). Otherwise `None`, and the caller takes the general
//! path, which gives the same value.

use std::arch::x86_64::*;

use super::sort16_avx512::sort16_desc;
use super::{MarkedRow, Storage, W};

/// Values per block (`fused::BLOCK`): lane j of block b is the values `64 b + j + 16 q`.
const BLOCK: usize = 4 * W;

/// The first `count` (at most 16) bits.
#[inline(always)]
fn first(count: usize) -> __mmask16 {
    if count >= W {
        0xFFFF
    } else {
        ((1u32 << count) - 1) as __mmask16
    }
}

/// The mean of the k largest `|z| = |fl(fl(x_j - hi) - lo)|` of a row of `blocks` whole blocks
/// at `x` (the fields of `row`), given `bmax` (each block's 16 lane maxima, in memory order) and `c`, such that every
/// lane of a block holding a `|z| >= t0` has its maximum `>= c`, and `t0` at most the row's
/// k-th largest `|z|`. The same bits as `fused::top_k_of_marked`: the candidates are the
/// values `>= t0` of the lanes marked by `c`, sorted by the same network, and the k largest
/// summed as there. `None` when more than 16 lanes are marked or more than 16 values kept (or,
/// were `t0` too large, fewer than k).
///
/// # Safety
/// AVX-512F available; `x` valid for reading `64 blocks` values, `bmax` for `16 blocks`
/// values, `pos` for writing `16 blocks + 16` positions; `1 <= k <= 16`.
#[inline(always)]
pub(super) unsafe fn mean_of_marked<S: Storage>(row: MarkedRow<S>) -> Option<f32> {
    let MarkedRow { x, blocks, bmax, c, hi_lo: (hi, lo), t0, k, pos, .. } = row;
    debug_assert!((1..=W).contains(&k));
    // The positions of the marked lanes (the offset of each lane's first value), block by
    // block; each block writes 16 and advances by its count.
    let cv = _mm512_set1_ps(c);
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let mut marked = 0usize;
    for b in 0..blocks {
        let m = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_loadu_ps(bmax.add(W * b)), cv);
        let at = _mm512_add_epi32(lanes, _mm512_set1_epi32((BLOCK * b) as i32));
        _mm512_storeu_si512(pos.add(marked) as *mut _, _mm512_maskz_compress_epi32(m, at));
        marked += m.count_ones() as usize;
    }
    if marked > W {
        return None;
    }
    // Past the last marked lane, position 0: a lane of the row, read and never kept.
    _mm512_storeu_si512(pos.add(marked) as *mut _, _mm512_setzero_si512());
    let (h, l, t) = (_mm512_set1_ps(hi), _mm512_set1_ps(lo), _mm512_set1_ps(t0));
    let sign = _mm512_set1_epi32(0x7FFF_FFFF);
    // The candidates, from lane 0 on; the rest -1, below every magnitude as a key.
    let mut cand = _mm512_set1_epi32(-1);
    let mut kept = 0usize;
    // Four lanes of four values per register: lane i of this quarter in lanes 4i to 4i + 3.
    for quarter in 0..4 {
        let p = |i: usize| x.add(*pos.add(4 * quarter + i) as usize);
        let mut v = _mm512_castps128_ps512(S::load_lane_of_block(p(0)));
        v = _mm512_insertf32x4::<1>(v, S::load_lane_of_block(p(1)));
        v = _mm512_insertf32x4::<2>(v, S::load_lane_of_block(p(2)));
        v = _mm512_insertf32x4::<3>(v, S::load_lane_of_block(p(3)));
        // |z| as `keep_lane_of_block` computes it: the same operations, the same bits.
        let z = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_sub_ps(_mm512_sub_ps(v, h), l)), sign));
        let live = first(4 * marked.saturating_sub(4 * quarter));
        let keep = _mm512_mask_cmp_ps_mask::<_CMP_GE_OQ>(live, z, t);
        let count = keep.count_ones() as usize;
        if kept + count > W {
            return None;
        }
        let packed = _mm512_maskz_compress_epi32(keep, _mm512_castps_si512(z));
        // In u32: a shift of a 16-bit mask by 16 (kept = 16, count = 0) would overflow.
        let at = ((first(count) as u32) << kept) as __mmask16;
        cand = _mm512_mask_expand_epi32(cand, at, packed);
        kept += count;
    }
    if kept < k {
        return None;
    }
    let sorted = _mm512_castsi512_ps(sort16_desc(cand));
    // `fused::top_k_of_marked`'s sum: the k largest in their lanes, the rest zero, combined.
    let top = super::avx512::Avx512::from_register(_mm512_maskz_mov_ps(first(k), sorted));
    Some(super::mean_of_k(super::F32x16::combine(top), k))
}
