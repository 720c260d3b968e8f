//! fp8 E4M3 storage of a tensor: quantize to E4M3 with a per-tensor power-of-two scale and read
//! back ("Q/DQ"), as a candle op with a straight-through backward.
//!
//! What this models: an activation that is written to memory as fp8 E4M3 (one byte) with a
//! per-tensor scale, and read back by the next op. The forward returns exactly the values the
//! next op would read: `y = E4M3(x * s) / s`, in x's dtype.
//!
//! Scaling ("current scaling", decided per call from the tensor itself): `s = 2^k` with `k` the
//! largest integer such that `amax * 2^k <= 448` (E4M3's largest finite value), `amax` the
//! largest finite `|x|` of the whole tensor (1 when it is 0 or there is no finite value). Hence:
//! - no finite value saturates (`|x s| <= 448`, and a value at most 448 rounds to at most 448);
//! - the largest values use the top binade of E4M3 and the tensor keeps E4M3's full dynamic
//!   range (about 2^15 from 448 down to the smallest normal 2^-6, 2^-9 with subnormals) below
//!   its amax; smaller values become subnormals (fewer than 4 significant bits) or zero, and are
//!   counted;
//! - a power of two makes `x * s` and `/ s` exact, so the only rounding is the one into E4M3
//!   (round to nearest, ties to even: `normlab_norms`' `Element for F8E4M3`, NVIDIA's
//!   `satfinite` conversion); the read-back values are exact in f32 and bf16 (and in f16 unless
//!   they fall below its subnormal range);
//! - NaN and +-Inf are stored as NaN (E4M3 has no infinity) and counted.
//!
//! Backward: straight-through (the gradient of the rounding is taken as the identity), so
//! `dL/dx = dL/dy`, in x's dtype. Gradients are not quantized.
//!
//! Counters ([`Fp8Counters`]) go to the caller's [`Telemetry`].

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Result, Shape, Tensor, WithDType};
use normlab_norms::{Element, F8E4M3};
use rayon::prelude::*;

use crate::ops::error::OpsError;
use crate::ops::storage::{read, with_dtype};
use crate::ops::telemetry::Telemetry;

/// E4M3's largest finite value.
pub const E4M3_MAX: f64 = 448.0;
/// E4M3's smallest positive normal value (2^-6); below it values are subnormal.
pub const E4M3_MIN_NORMAL: f64 = 0.015625;

/// What the E4M3 stores of a period did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fp8Counters {
    /// Values rounded into E4M3.
    pub values: u64,
    /// Non-zero finite values that became zero.
    pub underflow: u64,
    /// Values stored as E4M3 subnormals (non-zero, below 2^-6 after scaling: 1 to 3
    /// significant bits instead of 4).
    pub subnormal: u64,
    /// NaN or +-Inf inputs (stored as NaN).
    pub nonfinite: u64,
}

impl Fp8Counters {
    pub fn is_zero(&self) -> bool {
        *self == Fp8Counters::default()
    }
}

/// Field-wise sum.
impl std::ops::Add for Fp8Counters {
    type Output = Fp8Counters;
    fn add(self, o: Fp8Counters) -> Fp8Counters {
        Fp8Counters {
            values: self.values + o.values,
            underflow: self.underflow + o.underflow,
            subnormal: self.subnormal + o.subnormal,
            nonfinite: self.nonfinite + o.nonfinite,
        }
    }
}

/// The scale `2^k` for a tensor whose largest finite magnitude is `amax` (1 when `amax` is 0,
/// not finite, or negative): the largest power of two with `amax * 2^k <= 448`.
pub fn e4m3_scale(amax: f64) -> f64 {
    if !(amax.is_finite() && amax > 0.0) {
        return 1.0;
    }
    // Start from the log and correct it: log2 may be off by one ulp near powers of two.
    let mut k = ((E4M3_MAX / amax).log2().floor() as i32).clamp(-1000, 1000);
    while k > -1000 && amax * 2f64.powi(k) > E4M3_MAX {
        k -= 1;
    }
    while k < 1000 && amax * 2f64.powi(k + 1) <= E4M3_MAX {
        k += 1;
    }
    2f64.powi(k)
}

/// Round one value (already multiplied by the scale) into E4M3 and back to f64.
#[inline]
pub fn e4m3_round(v: f64) -> f64 {
    Element::to_f64(<F8E4M3 as Element>::from_f64(v))
}

/// The op of one call.
struct Fp8Store {
    telemetry: Option<Arc<Telemetry>>,
}

fn quantize<T: Element + WithDType>(x: &[T]) -> (Vec<T>, Fp8Counters) {
    let amax = x.par_iter().map(|&v| Element::to_f64(v).abs()).filter(|a| a.is_finite()).reduce(|| 0.0, f64::max);
    let s = e4m3_scale(amax);
    let inv = 1.0 / s;
    let mut y = vec![T::default(); x.len()];
    const CHUNK: usize = 4096;
    let counters = y
        .par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .map(|(ys, xs)| {
            let mut c = Fp8Counters { values: xs.len() as u64, ..Default::default() };
            for (o, &v) in ys.iter_mut().zip(xs) {
                let v = Element::to_f64(v);
                let q = e4m3_round(v * s);
                if !v.is_finite() {
                    c.nonfinite += 1;
                } else if q == 0.0 && v != 0.0 {
                    c.underflow += 1;
                } else if q != 0.0 && q.abs() < E4M3_MIN_NORMAL {
                    c.subnormal += 1;
                }
                *o = <T as Element>::from_f64(q * inv);
            }
            c
        })
        .reduce(Fp8Counters::default, |a, b| a + b);
    (y, counters)
}

impl CustomOp1 for Fp8Store {
    fn name(&self) -> &'static str {
        "normlab-fp8-e4m3-store"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let out = with_dtype!(storage.dtype(), T => {
            let xs = read::<T>("input", storage, layout)?;
            let (y, c) = quantize::<T>(&xs);
            if let Some(t) = &self.telemetry {
                t.record_fp8(c);
            }
            Ok::<_, candle_core::Error>(T::to_cpu_storage_owned(y))
        })?;
        Ok((out, layout.shape().clone()))
    }

    /// Straight-through: the rounding's gradient is taken as the identity.
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad.clone()))
    }
}

/// `x` stored as fp8 E4M3 with a per-tensor power-of-two scale and read back (see the module
/// doc), in x's dtype (f64, f32, f16 or bf16), with a straight-through gradient. The call's
/// [`Fp8Counters`] are added into `telemetry`.
///
/// CPU only (the op has no `cuda_fwd`, and no composed form: the counters and the per-tensor
/// scale would each cost a device synchronisation): a tensor on another device is
/// [`OpsError::DeviceUnsupported`] ([`check_fp8_device`]).
pub fn fp8_e4m3_store(x: &Tensor, telemetry: Option<&Arc<Telemetry>>) -> Result<Tensor> {
    match x.dtype() {
        DType::F64 | DType::F32 | DType::F16 | DType::BF16 => {}
        dtype => return Err(OpsError::UnsupportedDType { dtype }.into()),
    }
    check_fp8_device(&x.device().location())?;
    x.apply_op1(Fp8Store { telemetry: telemetry.cloned() })
}

/// The fp8 store runs on the CPU only: elsewhere [`OpsError::DeviceUnsupported`].
pub fn check_fp8_device(device: &candle_core::DeviceLocation) -> std::result::Result<(), OpsError> {
    if matches!(device, candle_core::DeviceLocation::Cpu) {
        return Ok(());
    }
    Err(OpsError::DeviceUnsupported {
        what: "fp8 E4M3 storage of the norm sites' inputs and outputs (train.fp8_norm_io)".into(),
        device: crate::ops::path::device_name(device),
        why: "the fp8 store is a CPU op (no CUDA kernel, no composed form); run it on the CPU or turn fp8_norm_io off".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Every finite E4M3 value, decoded from its bits by the format's definition (1 sign, 4
    /// exponent bits with bias 7, 3 mantissa bits; exponent 0 subnormal; 0x7F / 0xFF NaN),
    /// independently of the conversion under test.
    fn e4m3_table() -> Vec<f64> {
        let mut v = Vec::new();
        for b in 0u32..256 {
            if b & 0x7F == 0x7F {
                continue;
            }
            let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
            let e = ((b >> 3) & 0xF) as i32;
            let m = (b & 7) as f64;
            let mag = if e == 0 { m / 8.0 * 2f64.powi(-6) } else { (1.0 + m / 8.0) * 2f64.powi(e - 7) };
            v.push(sign * mag);
        }
        v
    }

    /// Round to nearest in the table, ties to the even code (the one whose mantissa is even),
    /// saturating at +-448: a brute-force reference of the conversion.
    fn nearest(table: &[f64], x: f64) -> f64 {
        if x.abs() >= E4M3_MAX {
            return E4M3_MAX.copysign(x);
        }
        let mut best = 0.0f64;
        let mut best_d = f64::INFINITY;
        for &t in table {
            let d = (t - x).abs();
            let even = |t: f64| {
                let a = t.abs();
                if a < E4M3_MIN_NORMAL {
                    ((a / 2f64.powi(-9)).round() as i64) % 2 == 0
                } else {
                    let e = a.log2().floor();
                    ((a / 2f64.powf(e) * 8.0).round() as i64) % 2 == 0
                }
            };
            if d < best_d || (d == best_d && even(t) && !even(best)) {
                best = t;
                best_d = d;
            }
        }
        if best == 0.0 {
            0.0f64.copysign(x)
        } else {
            best
        }
    }

    #[test]
    fn scale_is_the_largest_power_of_two_that_fits() {
        for amax in [1.0, 448.0, 449.0, 0.3, 1e-20, 3e30, 7.0, 56.0, 56.000001] {
            let s = e4m3_scale(amax);
            assert_eq!(s.log2().fract(), 0.0, "{amax}");
            assert!(amax * s <= E4M3_MAX && amax * 2.0 * s > E4M3_MAX, "{amax}: {s}");
        }
        assert_eq!(e4m3_scale(448.0), 1.0);
        assert_eq!(e4m3_scale(56.0), 8.0);
        assert_eq!(e4m3_scale(0.0), 1.0);
        assert_eq!(e4m3_scale(f64::INFINITY), 1.0);
    }

    /// The read-back values are exactly the E4M3 values nearest `x * s`, divided by `s`, for
    /// every dtype; a skipped or wrong cast fails here.
    #[test]
    fn values_round_trip_as_e4m3() {
        let table = e4m3_table();
        let n = 1000;
        // Magnitudes over 16 binades below 1 (some become subnormal, some zero), signs mixed.
        let mut x: Vec<f64> = (0..n).map(|i| ((i as f64 * 0.7548776662).fract() - 0.5) * 2f64.powi((i % 16) as i32 - 14)).collect();
        x[0] = 3.0; // the amax: s = 2^7, 3 * 128 = 384
        x[1] = 0.0;
        x[2] = 1.0 + 1.0 / 16.0; // a tie at s = 128: 136 lies between 128 and 144 (spacing 16)
        let s = e4m3_scale(3.0);
        assert_eq!(s, 128.0);
        for dt in [DType::F64, DType::F32, DType::BF16, DType::F16] {
            let t = Tensor::from_vec(x.clone(), n, &Device::Cpu).unwrap().to_dtype(dt).unwrap();
            let xin: Vec<f64> = t.to_dtype(DType::F64).unwrap().to_vec1().unwrap();
            let tel = Telemetry::new();
            let y: Vec<f64> = fp8_e4m3_store(&t, Some(&tel)).unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap();
            let mut changed = 0;
            for (i, (&a, &b)) in xin.iter().zip(&y).enumerate() {
                let want = nearest(&table, a * s) / s;
                assert_eq!(b, want, "{dt:?} [{i}]: x = {a}, got {b}, want {want}");
                assert!(table.contains(&(b * s)), "{dt:?} [{i}]: {b} * {s} is not an E4M3 value");
                changed += usize::from(a != b);
            }
            assert!(changed > n / 2, "{dt:?}: only {changed} values changed: was the cast skipped?");
            let c = tel.snapshot().fp8;
            assert_eq!(c.values, n as u64);
            let under = xin.iter().zip(&y).filter(|(a, b)| **a != 0.0 && **b == 0.0).count() as u64;
            assert!(under > 0 && c.underflow == under, "{dt:?}: {c:?} vs {under}");
            let sub = y.iter().filter(|b| **b != 0.0 && (**b * s).abs() < E4M3_MIN_NORMAL).count() as u64;
            assert!(sub > 0 && c.subnormal == sub, "{dt:?}: {c:?} vs {sub}");
            assert_eq!(c.nonfinite, 0);
        }
        // The tie rounds to the even mantissa: 136 -> 128.
        let y = fp8_e4m3_store(&Tensor::new(&[3f32, 1.0625], &Device::Cpu).unwrap(), None).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(y, vec![3.0, 1.0]);
    }

    #[test]
    fn nonfinite_becomes_nan_and_does_not_set_the_scale() {
        let x = Tensor::new(&[1f32, f32::INFINITY, f32::NAN, -0.5, 1000.0], &Device::Cpu).unwrap();
        let tel = Telemetry::new();
        let y = fp8_e4m3_store(&x, Some(&tel)).unwrap().to_vec1::<f32>().unwrap();
        assert!(y[1].is_nan() && y[2].is_nan());
        // amax 1000 (finite): s = 1/4, 1000/4 = 250 -> 256 (spacing 16 above 128 is 16: 240, 256).
        assert_eq!(y[4], 1024.0);
        assert_eq!(y[0], 1.0);
        assert_eq!(y[3], -0.5);
        let c = tel.snapshot().fp8;
        assert_eq!((c.values, c.nonfinite), (5, 2));
    }

    #[test]
    fn backward_is_straight_through() {
        let x = Var::new(&[0.1f32, -2.3, 7.7, 0.0], &Device::Cpu).unwrap();
        let w = Tensor::new(&[1.5f32, -0.25, 3.0, 2.0], &Device::Cpu).unwrap();
        let g = (fp8_e4m3_store(&x, None).unwrap() * &w).unwrap().sum_all().unwrap().backward().unwrap();
        assert_eq!(g.get(&x).unwrap().to_vec1::<f32>().unwrap(), vec![1.5, -0.25, 3.0, 2.0]);
        // Strided input, and a dtype the op refuses.
        let m = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &Device::Cpu).unwrap().t().unwrap();
        assert_eq!(fp8_e4m3_store(&m, None).unwrap().to_vec2::<f32>().unwrap(), vec![vec![1.0, 3.0], vec![2.0, 4.0]]);
        let u = Tensor::new(&[1u32], &Device::Cpu).unwrap();
        assert!(fp8_e4m3_store(&u, None).unwrap_err().to_string().contains("U32"));
    }
}
