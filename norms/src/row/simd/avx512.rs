//! [`F32x16`] as one AVX-512 register: the 16 lanes of the crate's reductions are exactly one
//! `zmm`, so every operation is one instruction (half those of [`super::avx2::Avx2`]).
//!
//! Only AVX-512F is used, except by [`Avx512Bf16`]'s bf16 stores. Every method is
//! `#[inline(always)]`: it is only ever called from functions compiled with
//! `#[target_feature(enable = "avx512f,avx2,fma,f16c")]` (for [`Avx512Bf16`]'s bf16 stores,
//! with `avx512bf16,avx512dq` too).

use std::arch::x86_64::*;
use std::ops::{Add, Mul, Sub};

use super::{F32x16, Storage, W};

/// One `zmm`. `BF16`: bf16 stores round by the AVX512_BF16 instruction ([`Avx512Bf16`]).
#[derive(Clone, Copy)]
pub(crate) struct Avx512Regs<const BF16: bool>(__m512);

/// [`Avx512Regs`] on AVX-512F alone.
pub(crate) type Avx512 = Avx512Regs<false>;

/// [`Avx512Regs`] whose bf16 stores round by `vcvtneps2bf16` (AVX512_BF16): one instruction
/// for the five integer operations and the narrowing of [`bf16_bits_non_nan`], with NaN
/// rounded as `convert::f32_to_bf16` rounds it (no separate NaN case). The instruction reads
/// a subnormal as zero whatever MXCSR says, so a register holding one (`vfpclassps`,
/// AVX512DQ) is rounded by the integer operations instead. Checked against
/// `convert::f32_to_bf16` on all 2^32 f32 bit patterns on the AVX-512 guest of the README:
/// equal on every one but the subnormals. A value of this type may only exist where the CPU
/// has AVX512_BF16 and AVX512DQ as well as AVX-512F.
pub(crate) type Avx512Bf16 = Avx512Regs<true>;

impl<const BF16: bool> Avx512Regs<BF16> {
    /// The value of a register.
    /// # Safety
    /// AVX-512F available (module doc of simd).
    #[inline(always)]
    pub(super) unsafe fn from_register(v: __m512) -> Self {
        Avx512Regs(v)
    }
}

impl<const BF16: bool> Add for Avx512Regs<BF16> {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: a value of this type exists only where AVX-512F was detected (module doc of simd).
        unsafe { Avx512Regs(_mm512_add_ps(self.0, o.0)) }
    }
}

impl<const BF16: bool> Sub for Avx512Regs<BF16> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx512Regs(_mm512_sub_ps(self.0, o.0)) }
    }
}

impl<const BF16: bool> Mul for Avx512Regs<BF16> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx512Regs(_mm512_mul_ps(self.0, o.0)) }
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

/// The 16 bf16 values of `v`, rounded as [`bf16_bits`] rounds them (NaN included): by
/// `vcvtneps2bf16` ([`Avx512Bf16`]), unless some lane is subnormal.
/// # Safety
/// The CPU has AVX512_BF16 and AVX512DQ (and AVX-512F).
#[inline(always)]
unsafe fn bf16_by_instruction(v: __m512) -> __m256i {
    // 0x20: the class "denormal" of vfpclassps, either sign.
    if _mm512_fpclass_ps_mask::<0x20>(v) != 0 {
        return bf16_with_subnormals(v);
    }
    std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v))
}

/// [`bf16_bits`], narrowed: [`bf16_by_instruction`]'s path for registers holding a
/// subnormal, out of its loop's way.
#[cold]
#[inline(never)]
#[target_feature(enable = "avx512f")]
unsafe fn bf16_with_subnormals(v: __m512) -> __m256i {
    _mm512_cvtepi32_epi16(bf16_bits(v))
}

impl<const BF16: bool> Avx512Regs<BF16> {
    /// The 16 bf16 values, rounded as `convert::f32_to_bf16` rounds them.
    #[inline(always)]
    unsafe fn bf16(self) -> __m256i {
        if BF16 {
            bf16_by_instruction(self.0)
        } else {
            _mm512_cvtepi32_epi16(bf16_bits(self.0))
        }
    }
    /// [`Avx512Regs::bf16`] for the lanes that are not NaN (the others are garbage).
    #[inline(always)]
    unsafe fn bf16_non_nan(self) -> __m256i {
        if BF16 {
            bf16_by_instruction(self.0)
        } else {
            _mm512_cvtepi32_epi16(bf16_bits_non_nan(self.0))
        }
    }
}

impl<const BF16: bool> F32x16 for Avx512Regs<BF16> {
    const AVX512: bool = true;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        Avx512Regs(_mm512_set1_ps(v))
    }
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> Self {
        Avx512Regs(_mm512_loadu_ps(p))
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        Avx512Regs(_mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)))
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> Self {
        let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
        Avx512Regs(_mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)))
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
        _mm256_storeu_si256(p as *mut __m256i, self.bf16())
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan(self, p: *mut u16) {
        _mm256_storeu_si256(p as *mut __m256i, self.bf16_non_nan())
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
        _mm256_stream_si256(p as *mut __m256i, self.bf16())
    }
    #[inline(always)]
    unsafe fn store_bf16_non_nan_nt(self, p: *mut u16) {
        _mm256_stream_si256(p as *mut __m256i, self.bf16_non_nan())
    }
    #[inline(always)]
    fn abs(self) -> Self {
        // SAFETY: as in `add`.
        unsafe { Avx512Regs(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(self.0), _mm512_set1_epi32(0x7FFF_FFFF)))) }
    }
    #[inline(always)]
    fn sign(self) -> Self {
        // SAFETY: as in `add`. Ordered comparisons: a NaN lane is neither, so 0.
        unsafe {
            let zero = _mm512_setzero_ps();
            let pos = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(self.0, zero);
            let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, zero);
            let s = _mm512_mask_blend_ps(neg, zero, _mm512_set1_ps(-1.0));
            Avx512Regs(_mm512_mask_blend_ps(pos, s, _mm512_set1_ps(1.0)))
        }
    }
    #[inline(always)]
    fn max_gt(a: Self, m: Self) -> Self {
        // SAFETY: as in `add`. vmaxps returns its second operand unless the first is greater.
        unsafe { Avx512Regs(_mm512_max_ps(a.0, m.0)) }
    }
    #[inline(always)]
    fn min_lt(a: Self, m: Self) -> Self {
        // SAFETY: as in `add`. vminps returns its second operand unless the first is less.
        unsafe { Avx512Regs(_mm512_min_ps(a.0, m.0)) }
    }
    #[inline(always)]
    fn select_first(count: usize, a: Self, b: Self) -> Self {
        let k: __mmask16 = if count >= W { 0xFFFF } else { ((1u32 << count) - 1) as __mmask16 };
        // SAFETY: as in `add`.
        unsafe { Avx512Regs(_mm512_mask_blend_ps(k, b.0, a.0)) }
    }
    #[inline(always)]
    fn max_abs_bits(self, v: Self) -> Self {
        // SAFETY: as in `add`.
        unsafe {
            let bits = _mm512_and_si512(_mm512_castps_si512(v.0), _mm512_set1_epi32(0x7FFF_FFFF));
            Avx512Regs(_mm512_castsi512_ps(_mm512_max_epi32(_mm512_castps_si512(self.0), bits)))
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
