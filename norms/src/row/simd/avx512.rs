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

impl Avx512 {
    /// The value of a register.
    /// # Safety
    /// AVX-512F available (module doc of simd).
    #[inline(always)]
    pub(super) unsafe fn from_register(v: __m512) -> Self {
        Avx512(v)
    }
}

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
    /// Lanes 8-15 added to lanes 0-7, then [`super::avx2::combine_8`].
    #[inline(always)]
    fn combine(self) -> f32 {
        // SAFETY: as in `add`.
        unsafe {
            let upper = _mm512_shuffle_f32x4::<0b11_10_11_10>(self.0, self.0);
            super::avx2::combine_8(_mm512_castps512_ps256(_mm512_add_ps(self.0, upper)))
        }
    }
    #[inline(always)]
    fn to_array(self) -> [f32; W] {
        let mut out = [0.0f32; W];
        // SAFETY: as in `add`; `out` holds 16 values.
        unsafe { self.store_f32(out.as_mut_ptr()) };
        out
    }
    /// By a sorting network ([`super::sort16_avx512`]).
    #[inline(always)]
    fn kth_largest_magnitude(self, k: usize) -> f32 {
        // SAFETY: as in `add`.
        unsafe { super::sort16_avx512::kth_largest(self.0, k) }
    }
    /// [`super::avx2::keep_lane_of_block`].
    #[inline(always)]
    unsafe fn keep_lane_of_block<S: Storage>(x: *const S, hi: f32, lo: f32, t0: f32, out: *mut f32) -> usize {
        super::avx2::keep_lane_of_block(x, hi, lo, t0, out)
    }
    /// [`super::top_k_avx512::mean_of_marked`].
    #[inline(always)]
    unsafe fn top_k_mean_in_registers<S: Storage>(row: super::MarkedRow<S>) -> Option<f32> {
        super::top_k_avx512::mean_of_marked::<S>(row)
    }
    /// By a sorting network for up to 16 candidates ([`super::sort16_avx512`]).
    #[inline(always)]
    unsafe fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
        super::sort16_avx512::top_k_of_few(a, m, k)
    }
}
