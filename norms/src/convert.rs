//! Bulk conversions between 16-bit storage and f32, and bit-level finiteness checks.
//!
//! With F16C (every x86-64 CPU since 2012) f16 <-> f32 uses the hardware conversion 8 lanes at
//! a time; bf16 <-> f32 are integer operations written so the compiler vectorises them.
//! All are exact (widening) or correctly rounded to nearest even (narrowing), bit-identical
//! to `half`'s scalar conversions, NaN kept NaN.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

#[cfg(target_arch = "x86_64")]
fn has_f16c() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("f16c") && is_x86_feature_detected!("avx"))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn f16_to_f32_f16c(src: &[u16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let full = n - n % 8;
    let mut i = 0;
    while i < full {
        let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
        _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        i += 8;
    }
    for j in full..n {
        dst[j] = f16::from_bits(src[j]).to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn f32_to_f16_f16c(src: &[f32], dst: &mut [u16]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let full = n - n % 8;
    let mut i = 0;
    while i < full {
        let v = _mm256_loadu_ps(src.as_ptr().add(i));
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
        i += 8;
    }
    for j in full..n {
        dst[j] = f16::from_f32(src[j]).to_bits();
    }
}

/// Widen f16 to f32 (exact).
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() {
        // SAFETY: the features were detected at run time.
        unsafe { f16_to_f32_f16c(src.reinterpret_cast(), dst) };
        return;
    }
    src.convert_to_f32_slice(&mut dst[..src.len()]);
}

/// Round f32 to f16, nearest even.
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() {
        // SAFETY: the features were detected at run time.
        unsafe { f32_to_f16_f16c(src, dst.reinterpret_cast_mut()) };
        return;
    }
    let n = dst.len();
    dst.convert_from_f32_slice(&src[..n]);
}

/// Widen bf16 to f32 (exact: a 16-bit shift).
#[inline(always)]
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) {
    let bits: &[u16] = src.reinterpret_cast();
    for (d, &s) in dst.iter_mut().zip(bits) {
        *d = f32::from_bits((s as u32) << 16);
    }
}

/// Round f32 to bf16, nearest even; NaN stays a quiet NaN (branch-free so it vectorises).
#[inline(always)]
pub fn f32_to_bf16(src: &[f32], dst: &mut [bf16]) {
    let bits: &mut [u16] = dst.reinterpret_cast_mut();
    for (d, &s) in bits.iter_mut().zip(src) {
        let b = s.to_bits();
        let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
        let nan = ((b >> 16) as u16) | 0x0040;
        *d = if s.is_nan() { nan } else { rounded };
    }
}

/// Number of non-finite 16-bit values, from the exponent bits (no conversion).
#[inline(always)]
pub fn count_nonfinite_bits(bits: &[u16], exp_mask: u16) -> u64 {
    // Integer sums are associative, so this plain fold vectorises; u32 partials per 2^16 chunk.
    bits.chunks(1 << 16)
        .map(|c| c.iter().fold(0u32, |a, &b| a + ((b & exp_mask) == exp_mask) as u32) as u64)
        .sum()
}

/// Number of non-finite f32 values, from the exponent bits.
#[inline(always)]
pub fn count_nonfinite_bits_u32(v: &[f32], exp_mask: u32) -> u64 {
    v.chunks(1 << 16)
        .map(|c| c.iter().fold(0u32, |a, &x| a + ((x.to_bits() & exp_mask) == exp_mask) as u32) as u64)
        .sum()
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    /// Every f16 bit pattern widens exactly, and every f16 value (and the midpoints between
    /// neighbours, the rounding-critical inputs) narrows as half's scalar conversion does.
    fn f16_conversions_are_exhaustively_exact() {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = vec![0f32; all.len()];
        f16_to_f32(&all, &mut wide);
        for (h, w) in all.iter().zip(&wide) {
            let r = h.to_f32();
            assert!(r.to_bits() == w.to_bits() || (r.is_nan() && w.is_nan()), "{h:?}");
        }
        let mut probes: Vec<f32> = wide.clone();
        for w in wide.windows(2) {
            if w[0].is_finite() && w[1].is_finite() {
                probes.push(0.5 * (w[0] + w[1]));
                probes.push(f32::from_bits((0.5 * (w[0] + w[1])).to_bits() + 1));
            }
        }
        probes.extend([1e6f32, -1e6, 65520.0, 65519.99, f32::INFINITY, 1e-9]);
        let mut narrow = vec![f16::ZERO; probes.len()];
        f32_to_f16(&probes, &mut narrow);
        for (p, h) in probes.iter().zip(&narrow) {
            let r = f16::from_f32(*p);
            assert!(r.to_bits() == h.to_bits() || (r.is_nan() && h.is_nan()), "{p}: {r:?} vs {h:?}");
        }
    }

    fn bf16_conversions_match_half() {
        let mut probes: Vec<f32> = (0..=u16::MAX).map(|b| f32::from_bits((b as u32) << 16)).collect();
        let more: Vec<f32> = (0..200_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))).collect();
        probes.extend(more);
        probes.extend([f32::from_bits(0x3F80_8000), f32::from_bits(0x3F81_8000), f32::MAX, -f32::MAX]);
        let mut out = vec![bf16::ZERO; probes.len()];
        f32_to_bf16(&probes, &mut out);
        for (p, h) in probes.iter().zip(&out) {
            let r = bf16::from_f32(*p);
            assert!(r.to_bits() == h.to_bits() || (r.is_nan() && h.is_nan()), "{p:e}: {r:?} vs {h:?}");
        }
        let mut back = vec![0f32; out.len()];
        bf16_to_f32(&out, &mut back);
        for (h, w) in out.iter().zip(&back) {
            assert!(h.to_f32().to_bits() == w.to_bits() || w.is_nan());
        }
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![f16_conversions_are_exhaustively_exact, bf16_conversions_match_half];
}
