//! [`F32x16`] as two AVX registers, the first holding the even lanes (0, 2, ..., 14) and the
//! second the odd ones: the layout in which bf16 values widen and round without shuffles.
//!
//! # Why a second AVX2 layout
//! Sixteen bf16 values are one 256-bit load whose 32-bit lane i holds value 2i in its low half
//! and value 2i + 1 in its high half. Shifting each lane left by 16 gives the even values as
//! f32, masking off the low half gives the odd ones: two integer instructions, where widening
//! into lanes 0-7 and 8-15 ([`super::avx2::Avx2`]) takes a lane-crossing permute and two
//! unpacks, all three on the shuffle ports, in every pass over a bf16 row. Storing is the
//! mirror image: the rounded even values shifted right, the odd ones in place, and one word
//! blend puts all sixteen in order, without the pack and permute.
//!
//! The reductions stay those of `crate::lanes` bit for bit. Logical lane j (which takes the
//! row's elements j, j + 16, j + 32, ...) is register j % 2, position j / 2: an element of
//! the next group lands in the same position as the one 16 before it, so each accumulator
//! sees the same values in the same order as before, only held elsewhere. Every method that
//! exposes lanes by index ([`F32x16::to_array`], [`F32x16::select_first`],
//! [`F32x16::ge_mask`], the f32 and f16 loads and stores) translates to that logical order,
//! so the code written against [`F32x16`] cannot tell the layouts apart.
//!
//! f32 and f16 rows keep [`super::avx2::Avx2`] (their loads are plain loads or F16C
//! conversions already in order); this layout is chosen for bf16 storage only. Its f32 loads
//! and stores cost four shuffles per 16 values, so the affine weight and bias, read for every
//! row, are rearranged once per worker ([`F32x16::store_lanes`]) and read with plain loads.

use std::arch::x86_64::*;
use std::ops::{Add, Mul, Sub};

use super::avx2::{bf16_high, bf16_high_non_nan, select_below, Avx2};
use super::{F32x16, Storage, W};

/// Lanes (0, 2, ..., 14) in `.0` and (1, 3, ..., 15) in `.1`, each as an [`Avx2`] register
/// pair member: the lane-wise operations are [`Avx2`]'s.
#[derive(Clone, Copy)]
pub(crate) struct Avx2EvenOdd(Avx2);

impl Add for Avx2EvenOdd {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Avx2EvenOdd(self.0 + o.0)
    }
}

impl Sub for Avx2EvenOdd {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Avx2EvenOdd(self.0 - o.0)
    }
}

impl Mul for Avx2EvenOdd {
    type Output = Self;
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Avx2EvenOdd(self.0 * o.0)
    }
}

/// `SPREAD[m]` has bit i of `m` at bit 2i: the even lanes' comparison bits put in place.
static SPREAD: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut m = 0;
    while m < 256 {
        let mut i = 0;
        while i < 8 {
            t[m] |= (((m >> i) & 1) as u16) << (2 * i);
            i += 1;
        }
        m += 1;
    }
    t
};

/// Values 0-15 in order from the even lanes `e` and the odd lanes `o`: `(values 0-7, values 8-15)`.
#[inline(always)]
unsafe fn interleave(e: __m256, o: __m256) -> (__m256, __m256) {
    // unpack works within 128-bit halves: (0 1 2 3 | 8 9 10 11) and (4 5 6 7 | 12 13 14 15).
    let a = _mm256_unpacklo_ps(e, o);
    let b = _mm256_unpackhi_ps(e, o);
    (_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
}

/// The inverse of [`interleave`]: even and odd lanes from values 0-7 in `a` and 8-15 in `b`.
#[inline(always)]
unsafe fn deinterleave(a: __m256, b: __m256) -> (__m256, __m256) {
    // shuffle works within 128-bit halves: (0 2 8 10 | 4 6 12 14), then the 64-bit quarters
    // are put in order.
    let e = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
    let o = _mm256_shuffle_ps::<0b11_01_11_01>(a, b);
    (quarters_in_order(e), quarters_in_order(o))
}

/// The 64-bit quarters of `v` reordered 0 2 1 3 ([`deinterleave`]). A function, not a closure:
/// a closure the compiler leaves out of line loses the caller's target features, and its
/// intrinsics become calls (`.ci/intrinsics-inlined.py`).
#[inline(always)]
unsafe fn quarters_in_order(v: __m256) -> __m256 {
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
}

/// Lanes of `v >= t` as all-ones 32-bit words (an ordered comparison), for
/// `Avx2EvenOdd::ge_mask_2`. A function, not a closure, as [`quarters_in_order`].
#[inline(always)]
unsafe fn ge_words(v: __m256, t: __m256) -> __m256i {
    _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(v, t))
}

/// Store 16 bf16 values given the even ones' bits in the high halves of `e`'s 32-bit lanes and
/// the odd ones' in `o`'s. `NT`: as a non-temporal store (`p` 32-byte aligned).
#[inline(always)]
unsafe fn store_bf16_high<const NT: bool>(p: *mut u16, e: __m256i, o: __m256i) {
    // Word 2i of the result is value 2i (the even lane's bits moved down), word 2i + 1 is value
    // 2i + 1 (the odd lane's high half).
    let v = _mm256_blend_epi16::<0xAA>(_mm256_srli_epi32::<16>(e), o);
    if NT {
        _mm256_stream_si256(p as *mut __m256i, v)
    } else {
        _mm256_storeu_si256(p as *mut __m256i, v)
    }
}

impl Avx2EvenOdd {
    #[inline(always)]
    fn even(self) -> __m256 {
        (self.0).0
    }
    #[inline(always)]
    fn odd(self) -> __m256 {
        (self.0).1
    }
    #[inline(always)]
    fn of(e: __m256, o: __m256) -> Self {
        Avx2EvenOdd(Avx2(e, o))
    }
    /// The 16 values as f16, in order.
    #[inline(always)]
    unsafe fn f16_bits(self) -> __m256i {
        let e = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.even());
        let o = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.odd());
        _mm256_set_m128i(_mm_unpackhi_epi16(e, o), _mm_unpacklo_epi16(e, o))
    }
}

impl F32x16 for Avx2EvenOdd {
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        Avx2EvenOdd(Avx2::splat(v))
    }
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> Self {
        let (e, o) = deinterleave(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
        Self::of(e, o)
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        let (e, o) = deinterleave(
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(8) as *const __m128i)),
        );
        Self::of(e, o)
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> Self {
        let v = _mm256_loadu_si256(p as *const __m256i);
        let e = _mm256_slli_epi32::<16>(v);
        let o = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF_0000u32 as i32));
        Self::of(_mm256_castsi256_ps(e), _mm256_castsi256_ps(o))
    }
    #[inline(always)]
    unsafe fn store_f32(self, p: *mut f32) {
        let (a, b) = interleave(self.even(), self.odd());
        _mm256_storeu_ps(p, a);
        _mm256_storeu_ps(p.add(8), b);
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16) {
        _mm256_storeu_si256(p as *mut __m256i, self.f16_bits())
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16) {
        store_bf16_high::<false>(p, bf16_high(self.even()), bf16_high(self.odd()))
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan(self, p: *mut u16) {
        store_bf16_high::<false>(p, bf16_high_non_nan(self.even()), bf16_high_non_nan(self.odd()))
    }
    #[inline(always)]
    unsafe fn store_f32_nt(self, p: *mut f32) {
        let (a, b) = interleave(self.even(), self.odd());
        _mm256_stream_ps(p, a);
        _mm256_stream_ps(p.add(8), b);
    }
    #[inline(always)]
    unsafe fn store_f16_nt(self, p: *mut u16) {
        _mm256_stream_si256(p as *mut __m256i, self.f16_bits())
    }
    #[inline(always)]
    unsafe fn store_bf16_nt(self, p: *mut u16) {
        store_bf16_high::<true>(p, bf16_high(self.even()), bf16_high(self.odd()))
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan_nt(self, p: *mut u16) {
        store_bf16_high::<true>(p, bf16_high_non_nan(self.even()), bf16_high_non_nan(self.odd()))
    }
    const REORDERS: bool = true;
    #[inline(always)]
    unsafe fn store_lanes(self, p: *mut f32) {
        _mm256_storeu_ps(p, self.even());
        _mm256_storeu_ps(p.add(8), self.odd());
    }
    #[inline(always)]
    unsafe fn load_lanes(p: *const f32) -> Self {
        Self::of(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
    }
    #[inline(always)]
    fn abs(self) -> Self {
        Avx2EvenOdd(self.0.abs())
    }
    #[inline(always)]
    fn max_gt(a: Self, m: Self) -> Self {
        Avx2EvenOdd(Avx2::max_gt(a.0, m.0))
    }
    #[inline(always)]
    fn min_lt(a: Self, m: Self) -> Self {
        Avx2EvenOdd(Avx2::min_lt(a.0, m.0))
    }
    #[inline(always)]
    fn select_first(count: usize, a: Self, b: Self) -> Self {
        // SAFETY: a value of this type exists only where AVX2 was detected (module doc of simd).
        unsafe {
            let (even, odd) = (_mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), _mm256_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15));
            Avx2EvenOdd(select_below(count, a.0, b.0, even, odd))
        }
    }
    #[inline(always)]
    fn max_abs_bits(self, v: Self) -> Self {
        Avx2EvenOdd(self.0.max_abs_bits(v.0))
    }
    #[inline(always)]
    fn ge_mask(self, t: Self) -> u32 {
        // SAFETY: as in `select_first`.
        unsafe {
            let e = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(self.even(), t.even())) as usize;
            let o = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(self.odd(), t.odd())) as usize;
            (SPREAD[e] | (SPREAD[o] << 1)) as u32
        }
    }
    /// By a sorting network ([`super::sort16`]).
    #[inline(always)]
    fn kth_largest_magnitude(self, k: usize) -> f32 {
        // SAFETY: as in `select_first`.
        unsafe { super::sort16::kth_largest(self.even(), self.odd(), k) }
    }
    /// By a sorting network for up to 16 candidates ([`super::sort16`]).
    #[inline(always)]
    unsafe fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
        super::sort16::top_k_of_few(a, m, k)
    }
    /// [`super::top_k_avx2::mean_of_marked`], the lane maxima stored even lanes first.
    #[inline(always)]
    unsafe fn top_k_mean_in_registers<S: Storage>(row: super::MarkedRow<S>) -> Option<f32> {
        super::top_k_avx2::mean_of_marked::<Self, S, true>(row)
    }
    /// [`super::avx2::keep_lane_of_block`].
    #[inline(always)]
    unsafe fn keep_lane_of_block<S: Storage>(x: *const S, hi: f32, lo: f32, t0: f32, out: *mut f32) -> usize {
        super::avx2::keep_lane_of_block(x, hi, lo, t0, out)
    }
    /// As `Avx2`'s (`avx2::ge_mask_2_in_order`), the even and odd lanes of each group taken as
    /// its two halves: the packed quarters then hold lanes `(0 2 4 6)(1 3 5 7)(16 18 20 22)...`,
    /// which a byte shuffle within each half and a permute of 64-bit quarters put in order.
    #[inline(always)]
    fn ge_mask_2(a: Self, b: Self, t: Self) -> u32 {
        // SAFETY: as in `select_first`.
        unsafe {
            let p = _mm256_packs_epi32(ge_words(a.even(), t.even()), ge_words(a.odd(), t.odd()));
            let q = _mm256_packs_epi32(ge_words(b.even(), t.even()), ge_words(b.odd(), t.odd()));
            let interleave = _mm256_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15, 0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
            let bytes = _mm256_shuffle_epi8(_mm256_packs_epi16(p, q), interleave);
            _mm256_movemask_epi8(_mm256_permute4x64_epi64::<0b11_01_10_00>(bytes)) as u32
        }
    }
    #[inline(always)]
    fn to_array(self) -> [f32; W] {
        let mut out = [0.0f32; W];
        // SAFETY: as in `select_first`; `out` holds 16 values.
        unsafe { self.store_f32(out.as_mut_ptr()) };
        out
    }
}
