//! Top-k's mean of the k largest `|z|` with almost no branch on the data, for the fused
//! forward's rows on AVX2 whose length is a multiple of a block
//! (`F32x16::top_k_mean_in_registers` of [`super::avx2::Avx2`] and
//! [`super::avx2_even_odd::Avx2EvenOdd`]): the marking of `fused::mark_blocks`, the gather of
//! `fused::gather_marked` and the selection of `top_k_of_few`, as `top_k_avx512` does them on
//! AVX-512, with tables where AVX2 has no compress instruction.
//!
//! # Why
//! The general path records marks as words and decodes them with loops whose trip counts
//! vary row to row (the marks of a Gaussian row fall at random), and visits the marked lanes
//! in a loop of as many steps. Under callgrind's branch simulation (`--branch-sim=yes`, f32
//! rows of 1024 at k = 8) those three loops mispredicted about 2.7 times per row. Here the
//! marks of four blocks make one word in registers ([`marks_of_quads`]: compares narrowed by
//! packs), each word writes the indices of its first four marks unconditionally and loops
//! only for a fifth ([`marked_lanes`]: about 10% of the words of a Gaussian row of 1024 at
//! k = 8, which has about 10.5 marks, by a simulation of the marking); then the first 16
//! marked lanes are visited, two lanes (eight values) per register, and the values kept
//! appended to the candidates by a permute from a table (eight written, the count advanced by
//! the mask's popcount).
//!
//! # When
//! Rows of at most [`MAX_BLOCKS`] blocks (1024 values) with up to 16 marked lanes and 16
//! candidates, as on AVX-512 (about 99% of Gaussian rows of 1024 at k = 8). Otherwise `None`,
//! and the caller takes the general path, which gives the same value.
//!
//! Measured on the AVX2 host of the README (AMD EPYC, 2 cores; in-process A/B,
//! `examples/prefetch_ahead.rs` switch `select`, time off over time on, Top-k k = 8), when the
//! marks were appended half block by half block (eight positions per half from a table, 22
//! instructions per block): rows of 512 1.046-1.071, of 1024 1.003-1.020 (f32), 1.006-1.010
//! (f16), 1.004-1.011 (bf16); in cache (64 and 256 rows of 1024) about 1.00. Without the
//! limit, rows of 2048 gave 1.000 (f32) and 0.987 (bf16), rows of 4096 1.003-1.020 (f32) but
//! 0.987-1.001 (f16) and 0.972-0.992 (bf16). The words of four blocks took the selection from
//! 737 to about 620 instructions per bf16 row of 1024 (callgrind, with the gather from saved
//! values); against the half-block marking (a temporary switch, 300 runs a side, two
//! threads, 4096x1024) bf16 1.014-1.032 in five runs, f16 0.974-1.001 and f32 0.989-0.998 in
//! four. A first version that stored the words as halves and read them back whole was 4%
//! slower than the half blocks (the loads waited for the stores).

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

/// The marks of a row's lanes, four blocks to a word: bit j of word w set when the lane
/// maximum in memory slot `s(j)` of blocks `4w` to `4w + 3` (64 slots) reaches `c`. Each half
/// word (two blocks) is four compares narrowed to bytes by two signed packs, which interleave
/// by 128-bit halves, so that bit j of it is for slot `8 (q % 4) + 4 (q / 4) + j % 4` of its
/// two blocks, with `q = j / 4` (no permute back to memory order: [`LANE_STARTS`] undoes it).
/// Bits past the row's blocks are zero. The words are returned in registers: stored as halves
/// and read back whole, they made the next loads wait for the stores (no forwarding), and the
/// selection slower than it was.
#[inline(always)]
unsafe fn marks_of_quads(bmax: *const f32, blocks: usize, c: f32) -> [u64; MAX_BLOCKS / 4] {
    let cv = _mm256_set1_ps(c);
    let mut words = [0u64; MAX_BLOCKS / 4];
    for (w, word) in words.iter_mut().enumerate() {
        *word = pair_marks(bmax, blocks, 2 * w, cv) | pair_marks(bmax, blocks, 2 * w + 1, cv) << 32;
    }
    words
}

/// The half word of [`marks_of_quads`] for blocks `2 g` and `2 g + 1`, either or both of which
/// may be past the row (a function, not a closure: see `fused::top_k_lane_maxima`).
#[inline(always)]
unsafe fn pair_marks(bmax: *const f32, blocks: usize, g: usize, cv: __m256) -> u64 {
    let b = bmax.add(2 * W * g);
    let none = _mm256_setzero_ps();
    let r = if 2 * g + 1 < blocks {
        [ge(b, cv), ge(b.add(8), cv), ge(b.add(16), cv), ge(b.add(24), cv)]
    } else if 2 * g < blocks {
        [ge(b, cv), ge(b.add(8), cv), none, none]
    } else {
        return 0;
    };
    packed_marks(r) as u64
}

/// The eight lanes at `p` compared with `c` (`>=`, ordered): all ones where they reach it.
#[inline(always)]
unsafe fn ge(p: *const f32, c: __m256) -> __m256 {
    _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_loadu_ps(p), c)
}

/// Four registers of compare masks as the bits of a word: [`avx2::packed_bytes`], whose
/// order [`marks_of_quads`] keeps (no permute back to memory order).
#[inline(always)]
unsafe fn packed_marks(r: [__m256; 4]) -> u32 {
    _mm256_movemask_epi8(avx2::packed_bytes(r)) as u32
}

/// The indices of the set bits of `words` (bit j of word w: index `64 w + j`), in increasing
/// order, written from `out` ([`super::write_set_bits`]: about 10.5 marks of 256 in a Gaussian
/// row of 1024 at k = 8); returns how many. `out` must have room for `4 BLOCK + 4` indices.
#[inline(always)]
unsafe fn marked_lanes(words: [u64; MAX_BLOCKS / 4], out: *mut u16) -> usize {
    let mut count = 0usize;
    for (w, &word) in words.iter().enumerate() {
        super::write_set_bits(word, 64 * w as u16, out.add(count));
        count += word.count_ones() as usize;
    }
    count
}

/// For index `i` of [`marks_of_quads`]'s bits, the position in the row of its lane's first
/// value, `BLOCK b + lane`: memory slot s of a block's lane maxima holds lane s, or, with the
/// even lanes stored first (`EVEN_ODD`), lane `2 (s % 8) + s / 8`.
const fn lane_starts(even_odd: bool) -> [u16; 8 * 2 * W] {
    let mut t = [0u16; 8 * 2 * W];
    let mut i = 0;
    while i < t.len() {
        let (g, j) = (i / 32, i % 32);
        let q = j / 4;
        let slot = 8 * (q % 4) + 4 * (q / 4) + j % 4;
        let (block, s) = (2 * g + slot / W, slot % W);
        let lane = if even_odd { 2 * (s % 8) + s / 8 } else { s };
        t[i] = (BLOCK * block + lane) as u16;
        i += 1;
    }
    t
}

/// `t[0]`, `t[16]`, `t[32]` and `t[48]`: a lane of a block of saved centred values.
#[inline(always)]
unsafe fn lane_of_t(t: *const f32) -> __m128 {
    _mm_setr_ps(*t, *t.add(W), *t.add(2 * W), *t.add(3 * W))
}

/// [`lane_starts`] for lane maxima in lane order ([`super::avx2::Avx2`]).
static LANE_STARTS: [u16; 8 * 2 * W] = lane_starts(false);
/// [`lane_starts`] for lane maxima stored even lanes first ([`super::avx2_even_odd::Avx2EvenOdd`]).
static LANE_STARTS_EVEN_ODD: [u16; 8 * 2 * W] = lane_starts(true);

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
/// With `t` given (the row's centred values, saved by its statistics pass), the gather reads
/// the marked lanes' `t` there instead of reading the row and subtracting `hi` again (the same
/// values: `prefetch_ahead ... saved`, which measures this with the store pass's use of them).
///
/// # Safety
/// AVX2 available; `x` valid for reading `64 blocks` values, `bmax` for `16 blocks` values,
/// `t` (if not null) for `64 blocks`; `1 <= k <= 16`; `blocks >= 1`.
#[inline(always)]
pub(super) unsafe fn mean_of_marked<V: F32x16, S: Storage, const EVEN_ODD: bool>(row: MarkedRow<S>) -> Option<f32> {
    let MarkedRow { x, blocks, bmax, c, hi_lo: (hi, lo), t0, k, t: saved, .. } = row;
    debug_assert!((1..=W).contains(&k) && blocks >= 1);
    if blocks > MAX_BLOCKS || !crate::row::SELECT_IN_REGISTERS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    // The marked lanes, as indices into the words of marks ([`marks_of_quads`]), read through
    // [`LANE_STARTS`] by the gather; room for a whole row's and the padding.
    let mut idx = [std::mem::MaybeUninit::<u16>::uninit(); 4 * BLOCK + 4 + W];
    let ip = idx.as_mut_ptr() as *mut u16;
    let marked = marked_lanes(marks_of_quads(bmax, blocks, c), ip);
    if marked > W {
        return None;
    }
    // Past the last marked lane, index 0: a lane of the row, read and never kept.
    _mm256_storeu_si256(ip.add(marked) as *mut __m256i, _mm256_setzero_si256());
    let starts = if EVEN_ODD { &LANE_STARTS_EVEN_ODD } else { &LANE_STARTS };
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
        let at = |i: usize| *ip.add(2 * pair + i) as usize;
        // |z| as `keep_lane_of_block` computes it: the same operations, the same bits.
        // (The closures only compute addresses: see `fused::top_k_lane_maxima` on closures.)
        let z = if saved.is_null() {
            let p = |i: usize| x.add(starts[at(i)] as usize);
            let v = _mm256_set_m128(S::load_lane_of_block(p(1)), S::load_lane_of_block(p(0)));
            _mm256_andnot_ps(sign, _mm256_sub_ps(_mm256_sub_ps(v, h), l))
        } else {
            // The lane's saved t, `fl(x - hi)`: stored in register order, as the lane maxima
            // are, so at the lane's memory slot of each of its four groups.
            let q = |i: usize| saved.add(LANE_STARTS[at(i)] as usize);
            _mm256_andnot_ps(sign, _mm256_sub_ps(_mm256_set_m128(lane_of_t(q(1)), lane_of_t(q(0))), l))
        };
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

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    /// Every slot of every block marked alone, and sets of slots marked together (random, up
    /// to all 256, odd block counts included): the indices [`marked_lanes`] finds, read through
    /// the layout's [`lane_starts`], are the positions of the marked lanes, in increasing order
    /// of memory slot within a pair's word, and their count is the number marked.
    fn marked_lanes_name_the_lanes_marked() {
        if !crate::row::has_avx2() {
            eprintln!("no AVX2: skipped");
            return;
        }
        #[target_feature(enable = "avx2,popcnt")]
        unsafe fn found(bmax: &[f32], blocks: usize, c: f32) -> Vec<u16> {
            let mut out = [0u16; 4 * BLOCK + 4 + W];
            let n = marked_lanes(marks_of_quads(bmax.as_ptr(), blocks, c), out.as_mut_ptr());
            out[..n].to_vec()
        }
        // The position of the lane whose maximum is in memory slot s of block b.
        let expected = |even_odd: bool, b: usize, s: usize| BLOCK * b + if even_odd { 2 * (s % 8) + s / 8 } else { s };
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for blocks in 1..=MAX_BLOCKS {
            let mut cases: Vec<Vec<bool>> = (0..W * blocks).map(|i| (0..W * blocks).map(|j| i == j).collect()).collect();
            for density in [2u64, 8, 64] {
                cases.extend((0..20).map(|_| (0..W * blocks).map(|_| next() % density == 0).collect()));
            }
            cases.push(vec![true; W * blocks]);
            cases.push(vec![false; W * blocks]);
            for marks in cases {
                let bmax: Vec<f32> = marks.iter().map(|&m| if m { 2.0 } else { 1.0 }).collect();
                // SAFETY: AVX2 detected above; `bmax` holds `blocks` blocks' maxima.
                let idx = unsafe { found(&bmax, blocks, 1.5) };
                assert_eq!(idx.len(), marks.iter().filter(|&&m| m).count(), "{blocks} blocks");
                assert!(idx.windows(2).all(|w| w[0] < w[1]), "{blocks} blocks: {idx:?} not increasing");
                for even_odd in [false, true] {
                    let table = if even_odd { &LANE_STARTS_EVEN_ODD } else { &LANE_STARTS };
                    let mut got: Vec<usize> = idx.iter().map(|&i| table[i as usize] as usize).collect();
                    let mut want: Vec<usize> = (0..W * blocks).filter(|&i| marks[i]).map(|i| expected(even_odd, i / W, i % W)).collect();
                    got.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(got, want, "{blocks} blocks, even_odd {even_odd}");
                }
            }
        }
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![marked_lanes_name_the_lanes_marked];
}
