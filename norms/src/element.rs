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

/// `v` rounded to f32 **to odd**: the f32 next to `v` towards zero, with its last significand bit
/// set when that is not `v` itself (NaN stays NaN; beyond the f32 range: +-`f32::MAX`, odd).
///
/// Why: rounding `v` to nearest f32 and then to nearest f16 is two roundings, and the first can
/// land exactly on an f16 midpoint that `v` was not on (then ties-to-even picks the wrong side,
/// about once in 2^14 conversions). Rounding to odd keeps the sticky information in the last bit,
/// so one more rounding to nearest into any format with at least two significand bits fewer than
/// f32 (f16, bf16, fp8) gives `v` rounded once (Boldo and Melquiond, "Emulation of FMA and
/// correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008).
#[inline]
pub fn f64_to_f32_round_odd(v: f64) -> f32 {
    let r = v as f32;
    if r as f64 == v || v.is_nan() {
        return r;
    }
    // Nearest was away from zero (or overflowed to infinity): step one ulp back towards zero
    // (sign-magnitude bits: infinity - 1 is f32::MAX, the smallest subnormal - 1 is zero).
    let bits = if (r as f64).abs() > v.abs() { r.to_bits() - 1 } else { r.to_bits() };
    f32::from_bits(bits | 1)
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    /// Through [`f64_to_f32_round_odd`]: `half`'s own `f16::from_f64` rounds through a plain
    /// `as f32` with F16C (two roundings) and drops the low 32 bits without F16C.
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        f16::from_f32(f64_to_f32_round_odd(v))
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
    /// Through [`f64_to_f32_round_odd`]: `half`'s own `bf16::from_f64` drops the low 32 bits
    /// of the f64 before rounding, so values just past a bf16 midpoint round the wrong way.
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        bf16::from_f32(f64_to_f32_round_odd(v))
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

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn ulp_of_one() {
        assert_eq!(DType::F16.ulp(1.0), 2f64.powi(-10));
        assert_eq!(DType::BF16.ulp(1.0), 2f64.powi(-7));
        assert_eq!(DType::F32.ulp(1.5), 2f64.powi(-23));
        assert_eq!(DType::F16.ulp(0.0), 2f64.powi(-24));
        assert_eq!(DType::F8E4M3.ulp(1.0), 0.125);
    }

    fn fp8_nonfinite_is_never_finite() {
        assert!(<float8::F8E4M3 as Element>::from_f64(f64::INFINITY).to_f64().is_nan());
        assert!(<float8::F8E4M3 as Element>::from_f64(f64::NAN).to_f64().is_nan());
        assert_eq!(<float8::F8E4M3 as Element>::from_f64(1e6).to_f64(), 448.0);
        assert_eq!(<float8::F8E5M2 as Element>::from_f64(f64::NEG_INFINITY).to_f64(), f64::NEG_INFINITY);
    }

    /// Every finite value of a small float type, ascending, as (value, bit pattern); -0 left out.
    fn finite_values<T: Element>(width: u32, from_bits: impl Fn(u32) -> T) -> Vec<(f64, u32)> {
        let mut v: Vec<(f64, u32)> = (0..1u32 << width)
            .map(|b| (from_bits(b).to_f64(), b))
            .filter(|(x, _)| x.is_finite() && !(*x == 0.0 && x.is_sign_negative()))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }

    /// `v` rounded once to nearest (ties to the even bit pattern) by search over `vals`: the
    /// reference. Beyond the largest finite value: infinity from the midpoint to the next binade
    /// on (`inf` true; f16, bf16) or the largest value (saturating fp8).
    fn nearest(v: f64, vals: &[(f64, u32)], inf: bool) -> f64 {
        let (max, _) = vals[vals.len() - 1];
        let a = v.abs();
        let top = vals[vals.len() - 2].0;
        if a >= max {
            // The overflow threshold is max + half its ulp; at it, ties go to infinity (even).
            let r = if inf && a >= max + (max - top) / 2.0 { f64::INFINITY } else { max };
            return r.copysign(v);
        }
        let i = vals.partition_point(|&(x, _)| x <= a) - 1;
        let ((lo, lb), (hi, hb)) = (vals[i], vals[i + 1]);
        let mid = lo + (hi - lo) / 2.0; // exact: a few significand bits, far from f64's limits
        let r = if a < mid || (a == mid && lb % 2 == 0) {
            lo
        } else if a > mid || hb % 2 == 0 {
            hi
        } else {
            lo
        };
        r.copysign(v)
    }

    /// Values around every kind of place a narrowing can go wrong: exact midpoints, midpoints
    /// missed by less than half an f32 ulp (where rounding through f32 lands on the midpoint,
    /// or dropping low bits makes one), random points between neighbours, the overflow
    /// threshold and the subnormal range.
    fn probes(vals: &[(f64, u32)], seed: u64) -> Vec<f64> {
        let mut s = seed;
        let mut next = || crate::nu::rng::splitmix64(&mut s);
        let mut out = Vec::new();
        for _ in 0..20_000 {
            let i = (next() % (vals.len() as u64 - 1)) as usize;
            let (lo, hi) = (vals[i].0, vals[i + 1].0);
            let mid = lo + (hi - lo) / 2.0;
            let f32_half_ulp = (mid.abs().max(1e-45) * 2f64.powi(-25)).max(2f64.powi(-150));
            let tiny = f32_half_ulp * ((next() % 1000) as f64 + 1.0) / 1001.0;
            let frac = (next() >> 11) as f64 / (1u64 << 53) as f64;
            let sign = if next() % 2 == 0 { 1.0 } else { -1.0 };
            out.extend([mid, mid + tiny, mid - tiny, lo + (hi - lo) * frac].map(|x| sign * x));
        }
        let (max, top) = (vals[vals.len() - 1].0, vals[vals.len() - 2].0);
        let edge = max + (max - top) / 2.0;
        out.extend([edge, edge * (1.0 + 1e-12), edge * (1.0 - 1e-12), -edge, 1e300, -1e300, 1e-300, -1e-300, 0.0]);
        out
    }

    fn check_narrowing<T: Element>(width: u32, from_bits: impl Fn(u32) -> T, inf: bool) {
        let vals = finite_values(width, from_bits);
        let (mut wrong, mut twice_wrong) = (0, 0);
        for v in probes(&vals, width as u64 * 7 + inf as u64) {
            let want = nearest(v, &vals, inf);
            let got = T::from_f64(v).to_f64();
            if got.to_bits() != want.to_bits() && !(got == 0.0 && want == 0.0) {
                wrong += 1;
                if wrong < 5 {
                    eprintln!("{:?}: {v:e} -> {got:e}, nearest is {want:e}", T::DTYPE);
                }
            }
            // The same probes catch two roundings (through a plain `as f32`).
            let twice = T::from_f32(v as f32).to_f64();
            twice_wrong += (twice.to_bits() != want.to_bits() && !(twice == 0.0 && want == 0.0)) as usize;
        }
        assert_eq!(wrong, 0, "{:?}: {wrong} values not rounded once to nearest", T::DTYPE);
        assert!(twice_wrong > 0, "{:?}: the probes do not catch a double rounding", T::DTYPE);
    }

    fn f16_from_f64_rounds_once_to_nearest() {
        check_narrowing::<f16>(16, |b| f16::from_bits(b as u16), true);
    }

    fn bf16_from_f64_rounds_once_to_nearest() {
        check_narrowing::<bf16>(16, |b| bf16::from_bits(b as u16), true);
    }

    fn fp8_from_f64_rounds_once_to_nearest_and_saturates() {
        check_narrowing::<float8::F8E4M3>(8, |b| float8::F8E4M3::from_bits(b as u8), false);
        check_narrowing::<float8::F8E5M2>(8, |b| float8::F8E5M2::from_bits(b as u8), false);
    }

    fn round_odd_keeps_the_sticky_bit() {
        // 1 + 2^-30 is not an f32: towards zero is 1.0, made odd.
        assert_eq!(f64_to_f32_round_odd(1.0 + 2f64.powi(-30)).to_bits(), 1f32.to_bits() | 1);
        assert_eq!(f64_to_f32_round_odd(-(1.0 + 2f64.powi(-30))).to_bits(), (-1f32).to_bits() | 1);
        // Exact values are kept, NaN stays NaN, beyond f32: f32::MAX (odd), tiny: the smallest subnormal.
        assert_eq!(f64_to_f32_round_odd(0.75), 0.75);
        assert!(f64_to_f32_round_odd(f64::NAN).is_nan());
        assert_eq!(f64_to_f32_round_odd(1e300), f32::MAX);
        assert_eq!(f64_to_f32_round_odd(-1e-300).to_bits(), 0x8000_0001);
        // Nearest would round up to 1 + 2^-23 here; towards zero then odd gives the same f32 bits + 1.
        let v = 1.0 + 2f64.powi(-23) - 2f64.powi(-40);
        assert_eq!(f64_to_f32_round_odd(v).to_bits(), 1f32.to_bits() | 1);
        // The near-tie gpu-check met (a ball projection, f16): x s = 6.15501394348539e-3 lies just
        // below the midpoint of 0.0061531067 and 0.0061569214; through a plain f32 it rounded up.
        assert_eq!(<f16 as Element>::from_f64(-6.15501394348539e-3).to_f64(), -0.006_153_106_689_453_125);
        // Just past the bf16 midpoint of 1 and 1 + 2^-7: dropping the low 32 bits made it a tie (to 1).
        assert_eq!(<bf16 as Element>::from_f64(1.00390625 + 2f64.powi(-40)).to_f64(), 1.0078125);
    }

    fn bf16_load_matches_scalar() {
        let v: Vec<bf16> = [-3.5f32, 0.0, 1e-30, 3e38, f32::NAN].iter().map(|&x| bf16::from_f32(x)).collect();
        let mut out = vec![0f32; v.len()];
        bf16::load_f32(&v, &mut out);
        for (a, b) in v.iter().zip(&out) {
            assert_eq!(a.to_f32().to_bits(), b.to_bits());
        }
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![ulp_of_one, fp8_nonfinite_is_never_finite, f16_from_f64_rounds_once_to_nearest, bf16_from_f64_rounds_once_to_nearest, fp8_from_f64_rounds_once_to_nearest_and_saturates, round_odd_keeps_the_sticky_bit, bf16_load_matches_scalar];
}
