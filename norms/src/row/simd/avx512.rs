//! [`F32x16`] as one AVX-512 register: the 16 lanes of the crate's reductions are exactly one
//! `zmm`, so every operation is one instruction (half those of [`super::avx2::Avx2`]).
//!
//! Only AVX-512F is used. Every method is `#[inline(always)]`: it is only ever called from
//! functions compiled with `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`.

use std::arch::x86_64::*;
use std::ops::{Add, Mul, Sub};

use super::{F32x16, Storage, W};

#[derive(Clone, Copy)]
pub(crate) struct Avx512(__m512);

impl Add for Avx512 {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: a value of this type exists only where AVX-512F was detected (module doc of simd).
        unsafe { Avx512(_mm512_add_ps(self.0, o.0)) }
    }
}

impl Sub for Avx512 {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx512(_mm512_sub_ps(self.0, o.0)) }
    }
}

impl Mul for Avx512 {
    type Output = Self;
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx512(_mm512_mul_ps(self.0, o.0)) }
    }
}

/// The bf16 bits (low half of each 32-bit lane) of the lanes that are not NaN, as
/// `convert::f32_to_bf16` rounds them: `(b + 0x7FFF + ((b >> 16) & 1)) >> 16`.
#[inline(always)]
unsafe fn bf16_bits_non_nan(v: __m512) -> __m512i {
    let b = _mm512_castps_si512(v);
    let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
    _mm512_srli_epi32::<16>(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))))
}

/// [`bf16_bits_non_nan`], and `(b >> 16) | 0x40` (a quiet NaN, as in `convert::f32_to_bf16`)
/// for NaN lanes.
#[inline(always)]
unsafe fn bf16_bits(v: __m512) -> __m512i {
    let nan = _mm512_or_si512(_mm512_srli_epi32::<16>(_mm512_castps_si512(v)), _mm512_set1_epi32(0x40));
    let is_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    _mm512_mask_blend_epi32(is_nan, bf16_bits_non_nan(v), nan)
}

impl F32x16 for Avx512 {
    const AVX512: bool = true;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        Avx512(_mm512_set1_ps(v))
    }
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> Self {
        Avx512(_mm512_loadu_ps(p))
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        Avx512(_mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)))
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> Self {
        let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
        Avx512(_mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)))
    }
    #[inline(always)]
    unsafe fn store_f32(self, p: *mut f32) {
        _mm512_storeu_ps(p, self.0)
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16) {
        _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0))
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16) {
        _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtepi32_epi16(bf16_bits(self.0)))
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan(self, p: *mut u16) {
        _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtepi32_epi16(bf16_bits_non_nan(self.0)))
    }
    #[inline(always)]
    unsafe fn store_f32_nt(self, p: *mut f32) {
        _mm512_stream_ps(p, self.0)
    }
    #[inline(always)]
    unsafe fn store_f16_nt(self, p: *mut u16) {
        _mm256_stream_si256(p as *mut __m256i, _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0))
    }
    #[inline(always)]
    unsafe fn store_bf16_nt(self, p: *mut u16) {
        _mm256_stream_si256(p as *mut __m256i, _mm512_cvtepi32_epi16(bf16_bits(self.0)))
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan_nt(self, p: *mut u16) {
        _mm256_stream_si256(p as *mut __m256i, _mm512_cvtepi32_epi16(bf16_bits_non_nan(self.0)))
    }
    #[inline(always)]
    fn abs(self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx512(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(self.0), _mm512_set1_epi32(0x7FFF_FFFF)))) }
    }
    #[inline(always)]
    fn max_gt(a: Self, m: Self) -> Self {
        // SAFETY: as in `add`. vmaxps returns its second operand unless the first is greater.
        unsafe { Avx512(_mm512_max_ps(a.0, m.0)) }
    }
    #[inline(always)]
    fn min_lt(a: Self, m: Self) -> Self {
        // SAFETY: as in `add`. vminps returns its second operand unless the first is less.
        unsafe { Avx512(_mm512_min_ps(a.0, m.0)) }
    }
    #[inline(always)]
    fn select_first(count: usize, a: Self, b: Self) -> Self {
        let k: __mmask16 = if count >= W { 0xFFFF } else { ((1u32 << count) - 1) as __mmask16 };
        // SAFETY: as in `add`.
        unsafe { Avx512(_mm512_mask_blend_ps(k, b.0, a.0)) }
    }
    #[inline(always)]
    fn max_abs_bits(self, v: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe {
            let bits = _mm512_and_si512(_mm512_castps_si512(v.0), _mm512_set1_epi32(0x7FFF_FFFF));
            Avx512(_mm512_castsi512_ps(_mm512_max_epi32(_mm512_castps_si512(self.0), bits)))
        }
    }
    #[inline(always)]
    fn ge_mask(self, t: Self) -> u32 {
        // SAFETY: as in `add`.
        unsafe { _mm512_cmp_ps_mask::<_CMP_GE_OQ>(self.0, t.0) as u32 }
    }
    #[inline(always)]
    fn to_array(self) -> [f32; W] {
        let mut out = [0.0f32; W];
        // SAFETY: as in `add`; `out` holds 16 values.
        unsafe { self.store_f32(out.as_mut_ptr()) };
        out
    }
    /// `rank_select`'s rule (the smallest value with at most k - 1 values strictly above it)
    /// in registers: a compare and a masked add per lane for the "strictly above" counts, then
    /// a masked minimum. The scalar form compiles to a popcount per lane and a chain of
    /// conditional moves, several times the instructions.
    #[inline(always)]
    fn kth_largest_magnitude(self, k: usize) -> f32 {
        debug_assert!((1..=W).contains(&k));
        // SAFETY: as in `add`; `keys` holds 16 values.
        unsafe {
            // Magnitudes: their order is that of their bit patterns as i32 (rank_select doc).
            let b = _mm512_castps_si512(self.0);
            let mut keys = [0i32; W];
            _mm512_storeu_si512(keys.as_mut_ptr() as *mut _, b);
            let one = _mm512_set1_epi32(1);
            // Two counters: the masked adds are a dependency chain each.
            let (mut c0, mut c1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for j in (0..W).step_by(2) {
                c0 = _mm512_mask_add_epi32(c0, _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(keys[j]), b), c0, one);
                c1 = _mm512_mask_add_epi32(c1, _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(keys[j + 1]), b), c1, one);
            }
            let above = _mm512_add_epi32(c0, c1);
            let within = _mm512_cmple_epi32_mask(above, _mm512_set1_epi32(k as i32 - 1));
            f32::from_bits(_mm512_mask_reduce_min_epi32(within, b) as u32)
        }
    }
    /// [`super::avx2::keep_lane_of_block`].
    #[inline(always)]
    unsafe fn keep_lane_of_block<S: Storage>(x: *const S, hi: f32, lo: f32, t0: f32, out: *mut f32) -> usize {
        super::avx2::keep_lane_of_block(x, hi, lo, t0, out)
    }
    /// Up to 16 candidates (the usual count) in registers: each one's place in the descending
    /// order is the number of values strictly above it plus the equal ones before it (so the
    /// places are a permutation of 0..m), and the candidates are written to their places: no
    /// search, no branch on the data. More candidates take `rank_select`.
    #[inline(always)]
    unsafe fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
        if m > W {
            return crate::row::rank_select::top_k_of_few(a, m, k);
        }
        assert!(1 <= k && k <= m && m <= a.len(), "top_k_of_few: k {k}, m {m}, len {}", a.len());
        let live = ((1u32 << m) - 1) as __mmask16;
        // Lanes past m hold -1: below every magnitude, so they raise no count.
        let b = _mm512_mask_loadu_epi32(_mm512_set1_epi32(-1), live, a.as_ptr() as *const i32);
        let one = _mm512_set1_epi32(1);
        let mut place = _mm512_setzero_si512();
        for (j, v) in a[..m].iter().enumerate() {
            let bj = _mm512_set1_epi32(v.to_bits() as i32);
            let later = (0xFFFE_u32 << j) as __mmask16;
            let before = _mm512_cmpgt_epi32_mask(bj, b) | _mm512_mask_cmpeq_epi32_mask(later, bj, b);
            place = _mm512_mask_add_epi32(place, before, place, one);
        }
        let mut places = [0i32; W];
        _mm512_storeu_si512(places.as_mut_ptr() as *mut _, place);
        let mut sorted = [0.0f32; W];
        for (p, v) in places[..m].iter().zip(&a[..m]) {
            // A permutation of 0..m: below 16.
            sorted[*p as usize & (W - 1)] = *v;
        }
        a[..k].copy_from_slice(&sorted[..k]);
    }
}
