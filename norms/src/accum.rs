//! Accumulator arithmetic: the precision in which statistics and outputs are computed.
//!
//! The accumulator is an explicit choice ([`Accum`]):
//! - `F32` (default): what every good fp16/bf16 kernel does. Statistics never overflow for
//!   16-bit inputs; for f32/bf16 inputs large enough to overflow a sum of squares, the row is
//!   recomputed with an exact power-of-two rescaling (see `row::stats`), so nothing overflows
//!   or underflows for finite input.
//! - `F64`: the reference path everything else is tested against.
//! - `PureF16` / `PureBf16`: every arithmetic result is rounded to the half type, as a
//!   half-precision implementation without fp32 accumulation computes it (the setting of
//!   "Norm matters" 3.3). A sum of squares past 65504 becomes `inf` here, and is counted.
//!   No rescue is attempted: reproducing that failure is the point.

use half::{bf16, f16};
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::element::Element;

/// Runtime choice of accumulator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accum {
    #[default]
    F32,
    F64,
    /// Every intermediate rounded to f16 ("pure half").
    PureF16,
    /// Every intermediate rounded to bf16.
    PureBf16,
}

impl Accum {
    pub fn name(self) -> &'static str {
        match self {
            Accum::F32 => "f32",
            Accum::F64 => "f64",
            Accum::PureF16 => "pure-f16",
            Accum::PureBf16 => "pure-bf16",
        }
    }
    /// Whether this accumulator rescues overflowing/underflowing statistics by rescaling.
    pub fn is_wide(self) -> bool {
        matches!(self, Accum::F32 | Accum::F64)
    }
}

impl std::str::FromStr for Accum {
    type Err = crate::NormError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" => Accum::F32,
            "f64" => Accum::F64,
            "pure-f16" | "f16" => Accum::PureF16,
            "pure-bf16" | "bf16" => Accum::PureBf16,
            _ => return Err(crate::NormError::UnknownName { what: "accumulator", value: s.to_string() }),
        })
    }
}

/// Arithmetic of an accumulator. Every operation is one correctly rounded result in the
/// accumulator's precision.
pub trait Real:
    Copy
    + Send
    + Sync
    + Default
    + PartialOrd
    + Debug
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    const ACCUM: Accum;
    /// Sum-of-squares thresholds between which no rescaling is needed: below `TINY` a square
    /// may have been subnormal, above `HUGE` (or non-finite) it may have overflowed.
    const TINY: f64;
    const HUGE: f64;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn zero() -> Self;
    fn one() -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn is_finite(self) -> bool;
    fn is_nan(self) -> bool;
    /// Multiply by 2^e exactly (unless the result leaves the range).
    fn scale_pow2(self, e: i32) -> Self {
        Self::from_f64(self.to_f64() * 2f64.powi(e))
    }
    #[inline(always)]
    fn from_usize(n: usize) -> Self {
        Self::from_f64(n as f64)
    }
    /// Widen a chunk of storage into the accumulator (exact for every wide accumulator).
    fn load<T: Element>(src: &[T], dst: &mut [Self]);
    /// Round a chunk into storage: one rounding per element.
    fn store<T: Element>(src: &[Self], dst: &mut [T]);
    /// `x` itself when the storage type is the accumulator type (no conversion needed).
    #[inline(always)]
    fn view<T: Element>(x: &[T]) -> Option<&[Self]> {
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<Self>() {
            // SAFETY: T and Self are the same type.
            Some(unsafe { std::slice::from_raw_parts(x.as_ptr() as *const Self, x.len()) })
        } else {
            None
        }
    }
    /// Mutable form of [`Real::view`].
    #[inline(always)]
    fn view_mut<T: Element>(x: &mut [T]) -> Option<&mut [Self]> {
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<Self>() {
            // SAFETY: T and Self are the same type.
            Some(unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr() as *mut Self, x.len()) })
        } else {
            None
        }
    }
}

impl Real for f32 {
    const ACCUM: Accum = Accum::F32;
    const TINY: f64 = 1.0 / (1u128 << 100) as f64; // 2^-100
    const HUGE: f64 = (1u128 << 120) as f64; // 2^120
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn zero() -> Self {
        0.0
    }
    #[inline(always)]
    fn one() -> Self {
        1.0
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f32::abs(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn load<T: Element>(src: &[T], dst: &mut [Self]) {
        T::load_f32(src, dst)
    }
    #[inline(always)]
    fn store<T: Element>(src: &[Self], dst: &mut [T]) {
        T::store_f32(src, dst)
    }
}

impl Real for f64 {
    const ACCUM: Accum = Accum::F64;
    const TINY: f64 = 1e-250;
    const HUGE: f64 = 1e250;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn zero() -> Self {
        0.0
    }
    #[inline(always)]
    fn one() -> Self {
        1.0
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f64::abs(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline(always)]
    fn load<T: Element>(src: &[T], dst: &mut [Self]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_f64();
        }
    }
    #[inline(always)]
    fn store<T: Element>(src: &[Self], dst: &mut [T]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = T::from_f64(*s);
        }
    }
}

macro_rules! pure_half {
    ($name:ident, $half:ty, $accum:expr, $doc:literal) => {
        #[doc = $doc]
        ///
        /// Held as the f32 widening of a value of the half type; every operation computes the
        /// exact f32 result (exact or correctly rounded: an f32 op on two half values followed by
        /// a rounding to half is a correctly rounded half op, since f32 carries more than
        /// 2p+2 bits for p = 11 and p = 8) and rounds it to the half type.
        #[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
        pub struct $name(f32);

        impl $name {
            #[inline(always)]
            fn round(v: f32) -> Self {
                $name(<$half>::from_f32(v).to_f32())
            }
            pub fn get(self) -> f32 {
                self.0
            }
        }

        impl Add for $name {
            type Output = Self;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                Self::round(self.0 + o.0)
            }
        }
        impl Sub for $name {
            type Output = Self;
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                Self::round(self.0 - o.0)
            }
        }
        impl Mul for $name {
            type Output = Self;
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                Self::round(self.0 * o.0)
            }
        }
        impl Div for $name {
            type Output = Self;
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                Self::round(self.0 / o.0)
            }
        }
        impl Neg for $name {
            type Output = Self;
            #[inline(always)]
            fn neg(self) -> Self {
                $name(-self.0)
            }
        }

        impl Real for $name {
            const ACCUM: Accum = $accum;
            const TINY: f64 = 0.0;
            const HUGE: f64 = f64::INFINITY;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                $name(<$half as crate::element::Element>::from_f64(v).to_f32())
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.0 as f64
            }
            fn zero() -> Self {
                $name(0.0)
            }
            fn one() -> Self {
                $name(1.0)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                // sqrt of a half value: f32 sqrt then one rounding is correctly rounded.
                Self::round(self.0.sqrt())
            }
            #[inline(always)]
            fn abs(self) -> Self {
                $name(self.0.abs())
            }
            fn is_finite(self) -> bool {
                self.0.is_finite()
            }
            fn is_nan(self) -> bool {
                self.0.is_nan()
            }
            fn load<T: Element>(src: &[T], dst: &mut [Self]) {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = Self::round(s.to_f32());
                }
            }
            fn store<T: Element>(src: &[Self], dst: &mut [T]) {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = T::from_f32(s.0);
                }
            }
        }
    };
}

pure_half!(PureF16, f16, Accum::PureF16, "An f16 accumulator: every intermediate rounded to f16.");
pure_half!(PureBf16, bf16, Accum::PureBf16, "A bf16 accumulator: every intermediate rounded to bf16.");

/// Call `$body` with the type alias `$A` bound to the accumulator chosen at run time.
#[macro_export]
macro_rules! with_accum {
    ($accum:expr, $A:ident => $body:expr) => {
        match $accum {
            $crate::accum::Accum::F32 => {
                type $A = f32;
                $body
            }
            $crate::accum::Accum::F64 => {
                type $A = f64;
                $body
            }
            $crate::accum::Accum::PureF16 => {
                type $A = $crate::accum::PureF16;
                $body
            }
            $crate::accum::Accum::PureBf16 => {
                type $A = $crate::accum::PureBf16;
                $body
            }
        }
    };
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn pure_f16_square_overflows() {
        let x = PureF16::from_f64(300.0);
        assert!(!(x * x).is_finite(), "300^2 = 90000 > 65504 must overflow in f16");
        let y = PureBf16::from_f64(300.0);
        assert!((y * y).is_finite());
    }

    fn pure_f16_rounds_each_op() {
        // 2048 + 1 is not representable in f16 (spacing 2 there): the sum stays 2048.
        let a = PureF16::from_f64(2048.0);
        assert_eq!((a + PureF16::one()).to_f64(), 2048.0);
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![pure_f16_square_overflows, pure_f16_rounds_each_op];
}
