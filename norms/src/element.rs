//! Storage types: the element types a tensor may hold, and their one rounding.
//!
//! Every norm reads its input in a storage type `T`, computes in an accumulator type
//! (see [`crate::accum`]) and rounds **once** into `T` on store. [`Element`] is the bridge:
//! exact widening to `f32`/`f64` where the type allows it, and correctly rounded narrowing.

use half::{bf16, f16};
use std::fmt::Debug;

/// A storage dtype, for messages, reports and dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    /// fp8 E4M3 ("fn" flavour: no infinity, max 448, saturating conversion of finite values).
    F8E4M3,
    /// fp8 E5M2 (IEEE-like: has infinities, max 57344).
    F8E5M2,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
        }
    }
    /// Bits of precision (implicit bit included).
    pub fn mantissa_digits(self) -> u32 {
        match self {
            DType::F64 => 53,
            DType::F32 => 24,
            DType::F16 => 11,
            DType::BF16 => 8,
            DType::F8E4M3 => 4,
            DType::F8E5M2 => 3,
        }
    }
    /// Largest finite value.
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F64 => f64::MAX,
            DType::F32 => f32::MAX as f64,
            DType::F16 => 65504.0,
            DType::BF16 => bf16::MAX.to_f64(),
            DType::F8E4M3 => 448.0,
            DType::F8E5M2 => 57344.0,
        }
    }
    /// Smallest positive normal value.
    pub fn min_positive(self) -> f64 {
        match self {
            DType::F64 => f64::MIN_POSITIVE,
            DType::F32 => f32::MIN_POSITIVE as f64,
            DType::F16 => f16::MIN_POSITIVE.to_f64(),
            DType::BF16 => bf16::MIN_POSITIVE.to_f64(),
            DType::F8E4M3 => 2f64.powi(-6),
            DType::F8E5M2 => 2f64.powi(-14),
        }
    }
    /// Unit in the last place of `v` in this type (for subnormals, the subnormal spacing).
    pub fn ulp(self, v: f64) -> f64 {
        let a = v.abs();
        let p = self.mantissa_digits() as i32;
        let min_exp = self.min_positive().log2().round() as i32; // exponent of the smallest normal
        let e = if a < self.min_positive() || a == 0.0 { min_exp } else { a.log2().floor() as i32 };
        2f64.powi(e.max(min_exp) - (p - 1))
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = crate::NormError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f64" => DType::F64,
            "f32" => DType::F32,
            "f16" | "fp16" | "half" => DType::F16,
            "bf16" => DType::BF16,
            "f8e4m3" | "fp8" | "e4m3" => DType::F8E4M3,
            "f8e5m2" | "e5m2" => DType::F8E5M2,
            _ => return Err(crate::NormError::UnknownName { what: "dtype", value: s.to_string() }),
        })
    }
}

/// A storage element type.
///
/// The supertrait [`crate::compiled::Compiled`] (hidden) holds the row and batch kernels
/// compiled in this crate for the type, so that other crates link them instead of compiling
/// them again; it is implemented for the same six types.
pub trait Element: Copy + Send + Sync + Default + PartialEq + Debug + 'static + crate::compiled::Compiled {
    const DTYPE: DType;
    /// Exact widening.
    fn to_f64(self) -> f64;
    /// Correctly rounded narrowing (round to nearest, ties to even; non-finite stays non-finite
    /// where the type can hold it, NaN otherwise).
    fn from_f64(v: f64) -> Self;
    /// Exact widening for every type but f64 (rounded there).
    fn to_f32(self) -> f32;
    /// Correctly rounded narrowing from f32.
    fn from_f32(v: f32) -> Self;
    fn is_finite(self) -> bool {
        self.to_f64().is_finite()
    }
    /// Number of NaN and +-Inf values in `v` (from the bits where the type allows).
    fn count_nonfinite(v: &[Self]) -> u64 {
        v.iter().filter(|x| !x.is_finite()).count() as u64
    }
    /// Widen a chunk into f32 (vectorised where the type allows).
    fn load_f32(src: &[Self], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_f32();
        }
    }
    /// Round a chunk of f32 into this type, one rounding per element.
    fn store_f32(src: &[f32], dst: &mut [Self]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = Self::from_f32(*s);
        }
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline(always)]
    fn count_nonfinite(v: &[Self]) -> u64 {
        crate::convert::count_nonfinite_bits_u32(v, 0x7F80_0000)
    }
    fn load_f32(src: &[Self], dst: &mut [f32]) {
        dst[..src.len()].copy_from_slice(src);
    }
    fn store_f32(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(&src[..dst.len()]);
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn is_finite(self) -> bool {
        (self.to_bits() & 0x7C00) != 0x7C00
    }
    #[inline(always)]
    fn count_nonfinite(v: &[Self]) -> u64 {
        use half::slice::HalfFloatSliceExt;
        crate::convert::count_nonfinite_bits(v.reinterpret_cast(), 0x7C00)
    }
    fn load_f32(src: &[Self], dst: &mut [f32]) {
        crate::convert::f16_to_f32(src, dst)
    }
    fn store_f32(src: &[f32], dst: &mut [Self]) {
        crate::convert::f32_to_f16(src, dst)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn is_finite(self) -> bool {
        (self.to_bits() & 0x7F80) != 0x7F80
    }
    #[inline(always)]
    fn count_nonfinite(v: &[Self]) -> u64 {
        use half::slice::HalfFloatSliceExt;
        crate::convert::count_nonfinite_bits(v.reinterpret_cast(), 0x7F80)
    }
    #[inline(always)]
    fn load_f32(src: &[Self], dst: &mut [f32]) {
        crate::convert::bf16_to_f32(src, dst)
    }
    #[inline(always)]
    fn store_f32(src: &[f32], dst: &mut [Self]) {
        crate::convert::f32_to_bf16(src, dst)
    }
}

/// fp8 E4M3 (no infinities): finite values saturate to +-448 as NVIDIA's `satfinite`
/// conversion does; NaN and +-Inf become NaN, so a non-finite result is never stored as a
/// finite number.
impl Element for float8::F8E4M3 {
    const DTYPE: DType = DType::F8E4M3;
    fn to_f64(self) -> f64 {
        float8::F8E4M3::to_f64(&self)
    }
    fn from_f64(v: f64) -> Self {
        if v.is_finite() {
            float8::F8E4M3::from_f64(v)
        } else {
            float8::F8E4M3::NAN
        }
    }
    fn to_f32(self) -> f32 {
        float8::F8E4M3::to_f32(&self)
    }
    fn from_f32(v: f32) -> Self {
        Self::from_f64(v as f64)
    }
}

/// fp8 E5M2: finite values beyond the range saturate to +-57344; +-Inf and NaN are kept.
impl Element for float8::F8E5M2 {
    const DTYPE: DType = DType::F8E5M2;
    fn to_f64(self) -> f64 {
        float8::F8E5M2::to_f64(&self)
    }
    fn from_f64(v: f64) -> Self {
        if v.is_nan() {
            float8::F8E5M2::NAN
        } else if v.is_infinite() {
            if v > 0.0 {
                float8::F8E5M2::from_bits(0x7C)
            } else {
                float8::F8E5M2::from_bits(0xFC)
            }
        } else {
            float8::F8E5M2::from_f64(v)
        }
    }
    fn to_f32(self) -> f32 {
        float8::F8E5M2::to_f32(&self)
    }
    fn from_f32(v: f32) -> Self {
        Self::from_f64(v as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_of_one() {
        assert_eq!(DType::F16.ulp(1.0), 2f64.powi(-10));
        assert_eq!(DType::BF16.ulp(1.0), 2f64.powi(-7));
        assert_eq!(DType::F32.ulp(1.5), 2f64.powi(-23));
        assert_eq!(DType::F16.ulp(0.0), 2f64.powi(-24));
        assert_eq!(DType::F8E4M3.ulp(1.0), 0.125);
    }

    #[test]
    fn fp8_nonfinite_is_never_finite() {
        assert!(<float8::F8E4M3 as Element>::from_f64(f64::INFINITY).to_f64().is_nan());
        assert!(<float8::F8E4M3 as Element>::from_f64(f64::NAN).to_f64().is_nan());
        assert_eq!(<float8::F8E4M3 as Element>::from_f64(1e6).to_f64(), 448.0);
        assert_eq!(<float8::F8E5M2 as Element>::from_f64(f64::NEG_INFINITY).to_f64(), f64::NEG_INFINITY);
    }

    #[test]
    fn bf16_load_matches_scalar() {
        let v: Vec<bf16> = [-3.5f32, 0.0, 1e-30, 3e38, f32::NAN].iter().map(|&x| bf16::from_f32(x)).collect();
        let mut out = vec![0f32; v.len()];
        bf16::load_f32(&v, &mut out);
        for (a, b) in v.iter().zip(&out) {
            assert_eq!(a.to_f32().to_bits(), b.to_bits());
        }
    }
}
