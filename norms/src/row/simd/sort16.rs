//! A sorting network for 16 keys in two AVX2 registers, and a selection by ranks, for the
//! fused Top-k's selections on AVX2 (`F32x16::kth_largest_magnitude` and `F32x16::top_k_of_few` of [`super::avx2::Avx2`]
//! and [`super::avx2_even_odd::Avx2EvenOdd`]).
//!
//! # Why
//! The rank rule of `rank_select` cost, on the AVX2 host of the README (measured by running it
//! twice per row), about 0.06 us per row for the usual dozen candidates and 0.02-0.03 us for
//! the threshold: a sixth of a 1024-wide bf16 Top-k row in cache. A bitonic network sorts 16
//! keys with 74 vector instructions (10 stages: 9 of a shuffle, a minimum, a maximum and a
//! blend on each register, one of a minimum and a maximum across the two), no branch and no
//! memory round trip.
//!
//! # Keys
//! The values are magnitudes (sign clear, never NaN where these are used), whose order is that
//! of their bit patterns as i32 (`rank_select` module doc); padding is -1, below all of them.
//! A sort moves values and never makes new ones, so equal keys need no tie-break: the sorted
//! sequence is the one `stats::desc_total` gives, bit for bit.

use std::arch::x86_64::*;

use super::W;

/// One stage of the network on 8 lanes: each lane against its partner's value (`partner`, the
/// lanes permuted), keeping the larger where bit i of `MAX` is set and the smaller elsewhere.
#[inline(always)]
unsafe fn stage<const MAX: i32>(v: __m256i, partner: __m256i) -> __m256i {
    _mm256_blend_epi32::<MAX>(_mm256_min_epi32(v, partner), _mm256_max_epi32(v, partner))
}

/// Lane i takes lane i ^ 1.
#[inline(always)]
unsafe fn swap1(v: __m256i) -> __m256i {
    _mm256_shuffle_epi32::<0b10_11_00_01>(v)
}

/// Lane i takes lane i ^ 2.
#[inline(always)]
unsafe fn swap2(v: __m256i) -> __m256i {
    _mm256_shuffle_epi32::<0b01_00_11_10>(v)
}

/// Lane i takes lane i ^ 4.
#[inline(always)]
unsafe fn swap4(v: __m256i) -> __m256i {
    _mm256_permute2x128_si256::<0x01>(v, v)
}

/// The 16 keys of `a` (lanes 0-7) and `b` (lanes 8-15) in descending order, the largest in
/// lane 0 of the first register.
///
/// Bitonic sort: for block sizes k = 2, 4, 8, 16 and distances j = k/2, ..., 1, key i is
/// compared with key i ^ j, and the one with the lower index keeps the larger when its block
/// of k is to be descending (`i & k == 0`), the smaller otherwise. The masks below are those
/// rules written out (bit l of a register's mask: its lane l keeps the larger); blocks of 16
/// are all descending, so the last four stages sort the whole.
#[inline(always)]
pub(super) unsafe fn sort16_desc(mut a: __m256i, mut b: __m256i) -> (__m256i, __m256i) {
    // k = 2.
    a = stage::<0b1001_1001>(a, swap1(a));
    b = stage::<0b1001_1001>(b, swap1(b));
    // k = 4.
    a = stage::<0b1100_0011>(a, swap2(a));
    b = stage::<0b1100_0011>(b, swap2(b));
    a = stage::<0b1010_0101>(a, swap1(a));
    b = stage::<0b1010_0101>(b, swap1(b));
    // k = 8: the first register's block descending, the second's ascending.
    a = stage::<0b0000_1111>(a, swap4(a));
    b = stage::<0b1111_0000>(b, swap4(b));
    a = stage::<0b0011_0011>(a, swap2(a));
    b = stage::<0b1100_1100>(b, swap2(b));
    a = stage::<0b0101_0101>(a, swap1(a));
    b = stage::<0b1010_1010>(b, swap1(b));
    // k = 16: j = 8 pairs the registers lane by lane; the lower index keeps the larger.
    (a, b) = (_mm256_max_epi32(a, b), _mm256_min_epi32(a, b));
    a = stage::<0b0000_1111>(a, swap4(a));
    b = stage::<0b0000_1111>(b, swap4(b));
    a = stage::<0b0011_0011>(a, swap2(a));
    b = stage::<0b0011_0011>(b, swap2(b));
    a = stage::<0b0101_0101>(a, swap1(a));
    b = stage::<0b0101_0101>(b, swap1(b));
    (a, b)
}

/// The k-th largest (1 <= k <= 16, with multiplicity) of the 16 magnitudes in `a` and `b`, in
/// whatever lanes: the value `rank_select::kth_largest_of_16` gives.
///
/// By ranks, not by [`sort16_desc`]: each key counts the keys larger than it (16 broadcasts,
/// each compared with both registers), and the k-th largest is the smallest key with fewer
/// than k larger: that key has fewer than k above it, and every smaller key has at least k
/// (itself among them). The same key as the sort's k-th (integer order throughout). It sits
/// between Top-k's pass and its selection, where nothing else is ready to run: the counts
/// are independent and a minimum takes three halvings: about 26 cycles where the network's
/// ten dependent stages, a store and a reload take about 47, by the operations' latencies on
/// Zen 3 (an estimate: with two other small changes its effect on a whole row was within the
/// noise of `examples/forward_wall.rs`), for about 20 more instructions.
#[inline(always)]
pub(super) unsafe fn kth_largest(a: __m256, b: __m256, k: usize) -> f32 {
    debug_assert!((1..=W).contains(&k));
    let (a, b) = (_mm256_castps_si256(a), _mm256_castps_si256(b));
    // Minus the number of larger keys, in four sums (two per register) that do not wait on
    // each other.
    let zero = _mm256_setzero_si256();
    let (mut a0, mut a1, mut b0, mut b1) = (zero, zero, zero, zero);
    for j in 0..8 {
        let at = _mm256_set1_epi32(j);
        let (ka, kb) = (_mm256_permutevar8x32_epi32(a, at), _mm256_permutevar8x32_epi32(b, at));
        a0 = _mm256_add_epi32(a0, _mm256_cmpgt_epi32(ka, a));
        b0 = _mm256_add_epi32(b0, _mm256_cmpgt_epi32(ka, b));
        a1 = _mm256_add_epi32(a1, _mm256_cmpgt_epi32(kb, a));
        b1 = _mm256_add_epi32(b1, _mm256_cmpgt_epi32(kb, b));
    }
    // Fewer than k larger: -count > -k.
    let minus_k = _mm256_set1_epi32(-(k as i32));
    let fewer_a = _mm256_cmpgt_epi32(_mm256_add_epi32(a0, a1), minus_k);
    let fewer_b = _mm256_cmpgt_epi32(_mm256_add_epi32(b0, b1), minus_k);
    // The smallest of those keys; the others out of the way (no key is above i32::MAX).
    let top = _mm256_set1_epi32(i32::MAX);
    let m = _mm256_min_epi32(_mm256_blendv_epi8(top, a, fewer_a), _mm256_blendv_epi8(top, b, fewer_b));
    let m = _mm256_min_epi32(m, _mm256_permute2x128_si256::<0x01>(m, m));
    let m = _mm256_min_epi32(m, swap2(m));
    let m = _mm256_min_epi32(m, swap1(m));
    f32::from_bits(_mm256_cvtsi256_si32(m) as u32)
}

/// `rank_select::top_k_of_few` (the k largest of the m magnitudes `a[..m]` to `a[..k]`,
/// descending) for m <= 16 and `a` of 16 values or more: the m values sorted with padding, and
/// all 16 lanes written back (`a[k..16]` is scratch to the callers). Others go to
/// `rank_select`.
#[inline(always)]
pub(super) unsafe fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
    if m > W || a.len() < W {
        return crate::row::rank_select::top_k_of_few(a, m, k);
    }
    assert!(1 <= k && k <= m, "top_k_of_few: k {k}, m {m}");
    let count = _mm256_set1_epi32(m as i32);
    let live0 = _mm256_cmpgt_epi32(count, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    let live1 = _mm256_cmpgt_epi32(count, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15));
    let p = a.as_mut_ptr() as *mut i32;
    // Lanes past m: -1, below every magnitude (`a` holds 16 values: plain loads).
    let pad = _mm256_set1_epi32(-1);
    let x0 = _mm256_blendv_epi8(pad, _mm256_loadu_si256(p as *const __m256i), live0);
    let x1 = _mm256_blendv_epi8(pad, _mm256_loadu_si256(p.add(8) as *const __m256i), live1);
    let (s0, s1) = sort16_desc(x0, x1);
    _mm256_storeu_si256(p as *mut __m256i, s0);
    _mm256_storeu_si256(p.add(8) as *mut __m256i, s1);
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    /// The network against a sort (`simd::tests::assert_sorts_16_desc`).
    fn sort16_desc_sorts() {
        if !crate::row::has_avx2() {
            eprintln!("no AVX2: skipped");
            return;
        }
        #[target_feature(enable = "avx2")]
        unsafe fn sorted(keys: [i32; W]) -> [i32; W] {
            let (a, b) = sort16_desc(
                _mm256_loadu_si256(keys.as_ptr() as *const __m256i),
                _mm256_loadu_si256(keys.as_ptr().add(8) as *const __m256i),
            );
            let mut out = [0i32; W];
            _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, a);
            _mm256_storeu_si256(out.as_mut_ptr().add(8) as *mut __m256i, b);
            out
        }
        // SAFETY: AVX2 detected above.
        super::super::tests::assert_sorts_16_desc(|keys| unsafe { sorted(keys) });
    }

    /// The rank-based k-th largest against `rank_select`'s, on keys with ties and spread out.
    fn kth_largest_by_ranks() {
        if !crate::row::has_avx2() {
            eprintln!("no AVX2: skipped");
            return;
        }
        #[target_feature(enable = "avx2")]
        unsafe fn kth(keys: [f32; W], k: usize) -> f32 {
            kth_largest(_mm256_loadu_ps(keys.as_ptr()), _mm256_loadu_ps(keys.as_ptr().add(8)), k)
        }
        super::super::tests::selection_cases(|keys, k, _| {
            // SAFETY: AVX2 detected above.
            assert_eq!(unsafe { kth(keys, k) }.to_bits(), crate::row::rank_select::kth_largest_of_16(keys, k).to_bits(), "{keys:?} k {k}");
        });
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![sort16_desc_sorts, kth_largest_by_ranks];
}
