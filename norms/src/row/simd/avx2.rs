//! [`F32x16`] as two AVX registers (lanes 0-7 and 8-15), with F16C for f16.
//!
//! Every method is `#[inline(always)]`: it is only ever called from functions compiled with
//! `#[target_feature(enable = "avx2,fma,f16c")]`, into which it (and the intrinsics it calls)
//! is inlined.

use std::arch::x86_64::*;
use std::ops::{Add, Mul, Sub};

use super::{F32x16, Storage, W};

#[derive(Clone, Copy)]
pub(crate) struct Avx2(pub(super) __m256, pub(super) __m256);

impl Add for Avx2 {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: a value of this type exists only where AVX2 was detected (module doc of simd).
        unsafe { Avx2(_mm256_add_ps(self.0, o.0), _mm256_add_ps(self.1, o.1)) }
    }
}

impl Sub for Avx2 {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx2(_mm256_sub_ps(self.0, o.0), _mm256_sub_ps(self.1, o.1)) }
    }
}

impl Mul for Avx2 {
    type Output = Self;
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx2(_mm256_mul_ps(self.0, o.0), _mm256_mul_ps(self.1, o.1)) }
    }
}

/// Round 8 lanes to bf16 as `convert::f32_to_bf16` does for a value that is not NaN, leaving
/// the bf16 bits in the high half of each 32-bit lane (the low half is garbage):
/// `b + 0x7FFF + ((b >> 16) & 1)`.
#[inline(always)]
pub(super) unsafe fn bf16_high_non_nan(v: __m256) -> __m256i {
    let b = _mm256_castps_si256(v);
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
    _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)))
}

/// [`bf16_high_non_nan`], and `b | 0x0040_0000` (high half: a quiet NaN, `(b >> 16) | 0x40`
/// as in `convert::f32_to_bf16`) for NaN.
#[inline(always)]
pub(super) unsafe fn bf16_high(v: __m256) -> __m256i {
    let nan = _mm256_or_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x0040_0000));
    let is_nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
    _mm256_blendv_epi8(bf16_high_non_nan(v), nan, is_nan)
}

/// [`bf16_high_non_nan`] moved to the low half of each 32-bit lane (the high half zero).
#[inline(always)]
unsafe fn bf16_bits_non_nan(v: __m256) -> __m256i {
    _mm256_srli_epi32::<16>(bf16_high_non_nan(v))
}

/// [`bf16_high`] moved to the low half of each 32-bit lane (the high half zero).
#[inline(always)]
unsafe fn bf16_bits(v: __m256) -> __m256i {
    _mm256_srli_epi32::<16>(bf16_high(v))
}

/// [`F32x16::select_first`] for a layout whose registers hold the lanes numbered `idx0` and
/// `idx1`: a register position takes `a` where its lane number is below `count`, else `b`.
#[inline(always)]
pub(super) unsafe fn select_below(count: usize, a: Avx2, b: Avx2, idx0: __m256i, idx1: __m256i) -> Avx2 {
    let c = _mm256_set1_epi32(count.min(W) as i32);
    let m0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, idx0));
    let m1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, idx1));
    Avx2(_mm256_blendv_ps(b.0, a.0, m0), _mm256_blendv_ps(b.1, a.1, m1))
}

/// Store 16 bf16 values from their bits in the low halves of two registers' 32-bit lanes.
/// `NT`: as a non-temporal store (`p` 32-byte aligned).
#[inline(always)]
unsafe fn store_bf16_bits<const NT: bool>(p: *mut u16, lo: __m256i, hi: __m256i) {
    // packus interleaves the two registers by 128-bit halves; the permute restores the order.
    let v = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
    if NT {
        _mm256_stream_si256(p as *mut __m256i, v)
    } else {
        _mm256_storeu_si256(p as *mut __m256i, v)
    }
}

/// `F32x16::max_abs_bits` on 8 lanes (`m`: 0x7FFF_FFFF in every lane). A function, not a
/// closure: a closure is a function of its own, and one the compiler chose not to inline did
/// not inherit its caller's target features, so every intrinsic in it became a call.
#[inline(always)]
unsafe fn max_abs_bits_8(acc: __m256, v: __m256, m: __m256i) -> __m256 {
    let bits = _mm256_and_si256(_mm256_castps_si256(v), m);
    _mm256_castsi256_ps(_mm256_max_epi32(_mm256_castps_si256(acc), bits))
}

/// The last three halvings of `lanes::combine` on its lanes 0-7 in `r` (lane j plus lane
/// j + 4, then j + 2, then j + 1; each lower lane the first operand, as there).
#[inline(always)]
pub(super) unsafe fn combine_8(r: __m256) -> f32 {
    let q = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps::<1>(r));
    let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<0b01>(h, h)))
}

/// For each 8-bit mask, the positions of its set bits in increasing order, then zeros: the
/// permutes that move the lanes of a register whose bit is set to the front, in order
/// ([`keep_lane_of_block`] reads the first four of a 4-bit mask's entry;
/// `top_k_avx2::mean_of_marked` all eight).
pub(super) static SET_BITS: [[u8; 8]; 256] = {
    let mut t = [[0u8; 8]; 256];
    let mut m = 0;
    while m < 256 {
        let (mut i, mut n) = (0u8, 0usize);
        while i < 8 {
            if m >> i & 1 == 1 {
                t[m][n] = i;
                n += 1;
            }
            i += 1;
        }
        m += 1;
    }
    t
};

/// `F32x16::keep_lane_of_block` in one SSE register, for every x86 layout: the four `z`
/// computed together, and those kept moved to the front by a permute from a table indexed by
/// the compare mask ([`SET_BITS`]; with one store, where one per value took about nine
/// instructions each).
#[inline(always)]
pub(super) unsafe fn keep_lane_of_block<S: Storage>(x: *const S, hi: f32, lo: f32, t0: f32, out: *mut f32) -> usize {
    let v = S::load_lane_of_block(x);
    let z = _mm_andnot_ps(_mm_set1_ps(-0.0), _mm_sub_ps(_mm_sub_ps(v, _mm_set1_ps(hi)), _mm_set1_ps(lo)));
    let keep = _mm_movemask_ps(_mm_cmp_ps::<_CMP_GE_OQ>(z, _mm_set1_ps(t0))) as usize;
    // The entry's first four positions, widened to 32-bit lanes.
    let order = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((SET_BITS.as_ptr().add(keep) as *const i32).read_unaligned()));
    _mm_storeu_ps(out, _mm_permutevar_ps(z, order));
    keep.count_ones() as usize
}

/// The compare masks of four registers of eight f32 lanes, in that order, narrowed to bytes
/// by two signed packs, which interleave by 128-bit halves: the 4-byte quarters of the result
/// hold the lanes in the order
/// `r0[0..4] r1[0..4] r2[0..4] r3[0..4] r0[4..8] r1[4..8] r2[4..8] r3[4..8]`.
#[inline(always)]
pub(super) unsafe fn packed_bytes(r: [__m256; 4]) -> __m256i {
    let c = [_mm256_castps_si256(r[0]), _mm256_castps_si256(r[1]), _mm256_castps_si256(r[2]), _mm256_castps_si256(r[3])];
    _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]))
}

/// [`packed_bytes`] with its quarters permuted by `order`, moved to a word: bit b for byte b.
#[inline(always)]
unsafe fn packed_masks(r: [__m256; 4], order: __m256i) -> u32 {
    _mm256_movemask_epi8(_mm256_permutevar8x32_epi32(packed_bytes(r), order)) as u32
}

/// [`F32x16::ge_mask_2`] for a layout whose registers hold lanes 0-7 and 8-15 of each group:
/// four compares, three packs, a permute that puts the quarters back in memory order, and
/// one `movemask`, where two `ge_mask` take eight instructions and two more to join them.
#[inline(always)]
pub(super) unsafe fn ge_mask_2_in_order(a: (__m256, __m256), b: (__m256, __m256), t: (__m256, __m256)) -> u32 {
    let ge = [
        _mm256_cmp_ps::<_CMP_GE_OQ>(a.0, t.0),
        _mm256_cmp_ps::<_CMP_GE_OQ>(a.1, t.1),
        _mm256_cmp_ps::<_CMP_GE_OQ>(b.0, t.0),
        _mm256_cmp_ps::<_CMP_GE_OQ>(b.1, t.1),
    ];
    packed_masks(ge, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// [`F32x16::sign`] of eight lanes: `1.0` where above zero, `-1.0` where below, else `+0.0`.
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn sign_8(v: __m256) -> __m256 {
    let zero = _mm256_setzero_ps();
    let pos = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(v, zero), _mm256_set1_ps(1.0));
    let neg = _mm256_and_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(v, zero), _mm256_set1_ps(-1.0));
    _mm256_or_ps(pos, neg)
}

impl F32x16 for Avx2 {
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        Avx2(_mm256_set1_ps(v), _mm256_set1_ps(v))
    }
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> Self {
        Avx2(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        Avx2(
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(8) as *const __m128i)),
        )
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> Self {
        // Quarters q0 q1 q2 q3 of the 16 values, reordered q0 q2 | q1 q3 so that the in-lane
        // interleave with zero puts values 0-7 (then 8-15) in the high halves of 32-bit lanes:
        // three instructions for 16 values instead of four (two widenings, two shifts).
        let v = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_loadu_si256(p as *const __m256i));
        let z = _mm256_setzero_si256();
        Avx2(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v)), _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v)))
    }
    #[inline(always)]
    unsafe fn store_f32(self, p: *mut f32) {
        _mm256_storeu_ps(p, self.0);
        _mm256_storeu_ps(p.add(8), self.1);
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16) {
        _mm_storeu_si128(p as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0));
        _mm_storeu_si128(p.add(8) as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.1));
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16) {
        store_bf16_bits::<false>(p, bf16_bits(self.0), bf16_bits(self.1))
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan(self, p: *mut u16) {
        store_bf16_bits::<false>(p, bf16_bits_non_nan(self.0), bf16_bits_non_nan(self.1))
    }
    #[inline(always)]
    unsafe fn store_f32_nt(self, p: *mut f32) {
        _mm256_stream_ps(p, self.0);
        _mm256_stream_ps(p.add(8), self.1);
    }
    #[inline(always)]
    unsafe fn store_f16_nt(self, p: *mut u16) {
        _mm_stream_si128(p as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0));
        _mm_stream_si128(p.add(8) as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.1));
    }
    #[inline(always)]
    unsafe fn store_bf16_nt(self, p: *mut u16) {
        store_bf16_bits::<true>(p, bf16_bits(self.0), bf16_bits(self.1))
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan_nt(self, p: *mut u16) {
        store_bf16_bits::<true>(p, bf16_bits_non_nan(self.0), bf16_bits_non_nan(self.1))
    }
    #[inline(always)]
    fn abs(self) -> Self {
        // SAFETY: as in `add`.
        unsafe {
            let m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
            Avx2(_mm256_and_ps(self.0, m), _mm256_and_ps(self.1, m))
        }
    }
    #[inline(always)]
    fn sign(self) -> Self {
        // SAFETY: as in `add`. Ordered comparisons: a NaN lane is neither, so 0.
        unsafe { Avx2(sign_8(self.0), sign_8(self.1)) }
    }
    #[inline(always)]
    fn max_gt(a: Self, m: Self) -> Self {
        // SAFETY: as in `add`. maxps returns its second operand unless the first is greater.
        unsafe { Avx2(_mm256_max_ps(a.0, m.0), _mm256_max_ps(a.1, m.1)) }
    }
    #[inline(always)]
    fn min_lt(a: Self, m: Self) -> Self {
        // SAFETY: as in `add`. minps returns its second operand unless the first is less.
        unsafe { Avx2(_mm256_min_ps(a.0, m.0), _mm256_min_ps(a.1, m.1)) }
    }
    #[inline(always)]
    fn select_first(count: usize, a: Self, b: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe { select_below(count, a, b, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)) }
    }
    #[inline(always)]
    fn max_abs_bits(self, v: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe {
            let m = _mm256_set1_epi32(0x7FFF_FFFF);
            Avx2(max_abs_bits_8(self.0, v.0, m), max_abs_bits_8(self.1, v.1, m))
        }
    }
    #[inline(always)]
    fn ge_mask(self, t: Self) -> u32 {
        // SAFETY: as in `add`.
        unsafe {
            let lo = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(self.0, t.0)) as u32;
            let hi = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(self.1, t.1)) as u32;
            lo | (hi << 8)
        }
    }
    /// By a sorting network ([`super::sort16`]).
    #[inline(always)]
    fn kth_largest_magnitude(self, k: usize) -> f32 {
        // SAFETY: as in `add`.
        unsafe { super::sort16::kth_largest(self.0, self.1, k) }
    }
    /// By a sorting network for up to 16 candidates ([`super::sort16`]).
    #[inline(always)]
    unsafe fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
        super::sort16::top_k_of_few(a, m, k)
    }
    /// [`keep_lane_of_block`].
    #[inline(always)]
    unsafe fn keep_lane_of_block<S: Storage>(x: *const S, hi: f32, lo: f32, t0: f32, out: *mut f32) -> usize {
        keep_lane_of_block(x, hi, lo, t0, out)
    }
    /// [`super::top_k_avx2::mean_of_marked`].
    #[inline(always)]
    unsafe fn top_k_mean_in_registers<S: Storage>(row: super::MarkedRow<S>) -> Option<f32> {
        super::top_k_avx2::mean_of_marked::<Self, S, false>(row)
    }
    /// [`ge_mask_2_in_order`].
    #[inline(always)]
    fn ge_mask_2(a: Self, b: Self, t: Self) -> u32 {
        // SAFETY: as in `add`.
        unsafe { ge_mask_2_in_order((a.0, a.1), (b.0, b.1), (t.0, t.1)) }
    }
    /// [`combine_8`] of lanes j + (lanes j + 8).
    #[inline(always)]
    fn combine(self) -> f32 {
        // SAFETY: as in `add`.
        unsafe { combine_8(_mm256_add_ps(self.0, self.1)) }
    }
    #[inline(always)]
    fn to_array(self) -> [f32; W] {
        let mut out = [0.0f32; W];
        // SAFETY: as in `add`; `out` holds 16 values.
        unsafe { self.store_f32(out.as_mut_ptr()) };
        out
    }
}
