//! The sorting network of [`super::sort16`] on one AVX-512 register, for the fused Top-k's
//! selections on AVX-512 (`F32x16::kth_largest_magnitude` and `F32x16::top_k_of_few` of
//! [`super::avx512::Avx512`]).
//!
//! # Why
//! The rank rule these replace compared each key with all others (16 broadcasts, compares and
//! masked adds) and went through memory twice; for the dozen candidates of a row it also
//! scattered the values one by one. Here each of the network's 10 stages is a shuffle, a
//! minimum and a masked maximum: 30 instructions for 16 keys, no branch, no memory.
//!
//! # Keys
//! As in [`super::sort16`]: magnitudes (sign clear, never NaN) ordered as their bit patterns
//! read as i32, padding -1 below all of them; a sort moves values and never makes new ones, so
//! the sorted sequence is the one `stats::desc_total` gives, bit for bit.

use std::arch::x86_64::*;

use super::W;

/// Which lanes keep the larger key in the stage of block size `k` and distance `j` of a
/// descending bitonic sort: lane i (paired with i ^ j) keeps the larger when it is the lower
/// of the pair and its block of k is descending (`i & k == 0`), or the higher and its block
/// ascending. Blocks of 16 are descending: the last four stages sort the whole register.
const fn keeps_larger(k: usize, j: usize) -> u16 {
    let mut m = 0u16;
    let mut i = 0;
    while i < W {
        if (i & j == 0) == (i & k == 0) {
            m |= 1 << i;
        }
        i += 1;
    }
    m
}

/// One stage: each lane against `partner` (its pair's key), the larger kept where `mask` has
/// its bit set ([`keeps_larger`]), the smaller elsewhere.
#[inline(always)]
unsafe fn stage(v: __m512i, partner: __m512i, mask: u16) -> __m512i {
    _mm512_mask_max_epi32(_mm512_min_epi32(v, partner), mask, v, partner)
}

/// Lane i takes lane i ^ 1 (functions, not closures: a closure left out of line loses the
/// caller's target features and its intrinsics become calls, `.ci/intrinsics-inlined.py`).
#[inline(always)]
unsafe fn x1(v: __m512i) -> __m512i {
    _mm512_shuffle_epi32::<0b10_11_00_01>(v)
}

/// Lane i takes lane i ^ 2 (within 128 bits).
#[inline(always)]
unsafe fn x2(v: __m512i) -> __m512i {
    _mm512_shuffle_epi32::<0b01_00_11_10>(v)
}

/// Lane i takes lane i ^ 4 (128-bit quarters).
#[inline(always)]
unsafe fn x4(v: __m512i) -> __m512i {
    _mm512_shuffle_i32x4::<0b10_11_00_01>(v, v)
}

/// Lane i takes lane i ^ 8.
#[inline(always)]
unsafe fn x8(v: __m512i) -> __m512i {
    _mm512_shuffle_i32x4::<0b01_00_11_10>(v, v)
}

/// The 16 keys of `v` in descending order, the largest in lane 0.
#[inline(always)]
pub(super) unsafe fn sort16_desc(mut v: __m512i) -> __m512i {
    // Lane i takes lane i ^ 1, i ^ 2 (within 128 bits), i ^ 4, i ^ 8 (128-bit quarters).
    v = stage(v, x1(v), keeps_larger(2, 1));
    v = stage(v, x2(v), keeps_larger(4, 2));
    v = stage(v, x1(v), keeps_larger(4, 1));
    v = stage(v, x4(v), keeps_larger(8, 4));
    v = stage(v, x2(v), keeps_larger(8, 2));
    v = stage(v, x1(v), keeps_larger(8, 1));
    v = stage(v, x8(v), keeps_larger(16, 8));
    v = stage(v, x4(v), keeps_larger(16, 4));
    v = stage(v, x2(v), keeps_larger(16, 2));
    stage(v, x1(v), keeps_larger(16, 1))
}

/// The k-th largest (1 <= k <= 16, with multiplicity) of the 16 magnitudes of `v`: the value
/// `rank_select::kth_largest_of_16` gives.
#[inline(always)]
pub(super) unsafe fn kth_largest(v: __m512, k: usize) -> f32 {
    debug_assert!((1..=W).contains(&k));
    let s = sort16_desc(_mm512_castps_si512(v));
    let at = _mm512_permutexvar_epi32(_mm512_set1_epi32((k as i32 - 1) & (W as i32 - 1)), s);
    f32::from_bits(_mm_cvtsi128_si32(_mm512_castsi512_si128(at)) as u32)
}

/// `rank_select::top_k_of_few` (the k largest of the m magnitudes `a[..m]` to `a[..k]`,
/// descending) for m <= 16: the m values loaded with padding, sorted, and stored back to
/// `a[..m]` (`a[k..m]` is scratch to the callers). Larger m goes to `rank_select`.
#[inline(always)]
pub(super) unsafe fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
    if m > W {
        return crate::row::rank_select::top_k_of_few(a, m, k);
    }
    assert!(1 <= k && k <= m && m <= a.len(), "top_k_of_few: k {k}, m {m}, len {}", a.len());
    let live = ((1u32 << m) - 1) as __mmask16;
    let p = a.as_mut_ptr() as *mut i32;
    let s = sort16_desc(_mm512_mask_loadu_epi32(_mm512_set1_epi32(-1), live, p));
    // The padding sorts below every magnitude: the first m lanes are the m values.
    _mm512_mask_storeu_epi32(p, live, s);
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    /// The network against a sort (`simd::tests::assert_sorts_16_desc`), and the two
    /// selections against `rank_select`.
    fn sort16_desc_sorts_and_selects() {
        if !is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512: skipped");
            return;
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn sorted(keys: [i32; W]) -> [i32; W] {
            let s = sort16_desc(_mm512_loadu_si512(keys.as_ptr() as *const _));
            let mut out = [0i32; W];
            _mm512_storeu_si512(out.as_mut_ptr() as *mut _, s);
            out
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn kth(keys: [f32; W], k: usize) -> f32 {
            kth_largest(_mm512_loadu_ps(keys.as_ptr()), k)
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn few(a: &mut [f32], m: usize, k: usize) {
            top_k_of_few(a, m, k)
        }
        // SAFETY: AVX-512F detected above.
        super::super::tests::assert_sorts_16_desc(|keys| unsafe { sorted(keys) });
        super::super::tests::selection_cases(|keys, k, r| {
            // SAFETY: AVX-512F detected above.
            assert_eq!(unsafe { kth(keys, k) }.to_bits(), crate::row::rank_select::kth_largest_of_16(keys, k).to_bits(), "{keys:?} k {k}");
            let m = k + (r as usize) % (W + 1 - k);
            let mut got = keys.to_vec();
            let mut want = keys.to_vec();
            // SAFETY: as above.
            unsafe { few(&mut got[..m], m, k) };
            crate::row::rank_select::top_k_of_few(&mut want[..m], m, k);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got[..k]), bits(&want[..k]), "{keys:?} m {m} k {k}");
            assert_eq!(bits(&got[m..]), bits(&keys[m..]), "past m untouched");
        });
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![sort16_desc_sorts_and_selects];
}
