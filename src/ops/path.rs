//! Which implementation runs an op: the fused CPU custom ops or the composed candle path.
//!
//! The norms (`crate::ops::norm`) and the model's fused layers (`crate::model`: causal softmax
//! attention, scale, LERP, SwiGLU) are candle custom ops whose forward exists for the CPU (the
//! norms also for CUDA, f16/bf16 storage with the f32 accumulator, with the feature
//! `candle-cuda`). Every other device runs a composition of candle primitives with candle's
//! autograd (`crate::ops::composed`, `crate::model::composed`). [`OpPath`] chooses; the rule
//! for the norms is [`norm_route`], the one place that decides it (the forward and the
//! pre-training check `crate::model::check_device` both call it).

use candle_core::{DType, DeviceLocation};
use normlab_norms::{Accum, NormKind, NormSpec};

use crate::ops::error::OpsError;

/// Which implementation of the custom ops a forward uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpPath {
    /// The fused custom ops on a CPU device, the composed path on any other device (the norms:
    /// see [`norm_route`]).
    #[default]
    Auto,
    /// Always the custom ops (only the CPU has them all: elsewhere they fail).
    Fused,
    /// Always the composed path, also on the CPU (tests compare it with the fused ops there).
    Composed,
}

impl OpPath {
    /// Whether the model's fused layers run composed for tensors on `device`.
    pub fn composed_on(self, device: &DeviceLocation) -> bool {
        match self {
            OpPath::Auto => !matches!(device, DeviceLocation::Cpu),
            OpPath::Fused => false,
            OpPath::Composed => true,
        }
    }
}

/// `cpu`, `cuda:0`, `metal:0`: a device as the error messages name it.
pub fn device_name(device: &DeviceLocation) -> String {
    match device {
        DeviceLocation::Cpu => "cpu".into(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// How one norm call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormRoute {
    /// The norm custom op (`cpu_fwd`; `cuda_fwd` with the feature `candle-cuda`).
    Op,
    /// The composed candle path, statistics computed in `work` (the accumulator's dtype).
    Composed { work: DType },
}

/// The widest row candle's CUDA `arg_sort_last_dim` sorts: its bitonic sort keeps
/// `next_power_of_two(n)` u32 indices of a row in the 48 KiB of shared memory a kernel gets
/// without opting in (candle 0.11 does not opt in), so `n <= 8192`.
pub const COMPOSED_TOPK_MAX_WIDTH: usize = 8192;

/// How a norm of `spec` over rows of `n` elements of `dtype`, statistics in `accum`, runs on
/// `device` under `path`, or why it cannot:
///
/// - `Fused`: the op, on every device (on CUDA its `cuda_fwd` has its own limits).
/// - `Auto` on the CPU: the op.
/// - `Auto` elsewhere: the op for f16/bf16 storage with the f32 accumulator (the CUDA kernels),
///   the composed path otherwise (f32 and f64 storage, or the f64 accumulator).
/// - `Composed`: the composed path on every device.
///
/// The composed path computes in the accumulator's dtype (f32 or f64); the pure f16/bf16
/// accumulators exist only as the CPU row kernels (no GPU kernel, no composed form: rounding
/// every operation to a half type is what they study), so they are an error wherever the op
/// does not run on the CPU. Top-k composed on a non-CPU device needs `n <=`
/// [`COMPOSED_TOPK_MAX_WIDTH`] (candle's CUDA arg-sort).
pub fn norm_route(path: OpPath, device: &DeviceLocation, dtype: DType, accum: Accum, spec: &NormSpec, n: usize) -> Result<NormRoute, OpsError> {
    let cpu = matches!(device, DeviceLocation::Cpu);
    let op = match path {
        OpPath::Fused => true,
        OpPath::Composed => false,
        OpPath::Auto => cpu || (matches!(dtype, DType::F16 | DType::BF16) && accum == Accum::F32),
    };
    if !(accum.is_wide() || op && cpu) {
        let why = if cpu {
            "the composed path accumulates in f32 or f64; the pure f16/bf16 statistics are the CPU norm op's (OpPath::Auto or Fused)"
        } else {
            "the pure f16/bf16 statistics exist only as the CPU row kernels (the GPU kernels, which have the backward, accumulate in f32, and the composed path in f32 or f64); train in f16_mixed/bf16_mixed on this device, or on the CPU"
        };
        return Err(OpsError::DeviceUnsupported { what: format!("the {} norm accumulator", accum.name()), device: device_name(device), why: why.into() });
    }
    if op {
        return Ok(NormRoute::Op);
    }
    if let NormKind::TopK { k } = spec.kind {
        if !cpu && n > COMPOSED_TOPK_MAX_WIDTH {
            return Err(OpsError::DeviceUnsupported {
                what: format!("the top-k norm (k = {k}) over rows of {n} {dtype:?} values"),
                device: device_name(device),
                why: format!("the composed top-k sorts each row with candle's arg_sort_last_dim, whose CUDA kernel takes rows of at most {COMPOSED_TOPK_MAX_WIDTH} values"),
            });
        }
    }
    let work = if accum == Accum::F64 { DType::F64 } else { DType::F32 };
    Ok(NormRoute::Composed { work })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUDA: DeviceLocation = DeviceLocation::Cuda { gpu_id: 0 };

    #[test]
    fn routes_follow_the_rule() {
        let spec = NormSpec::rms(1e-6);
        let r = |path, dev: &DeviceLocation, dt, acc| norm_route(path, dev, dt, acc, &spec, 64);
        let composed32 = Ok(NormRoute::Composed { work: DType::F32 });
        for dt in [DType::F32, DType::BF16, DType::F16, DType::F64] {
            assert_eq!(r(OpPath::Auto, &DeviceLocation::Cpu, dt, Accum::F32), Ok(NormRoute::Op));
            assert_eq!(r(OpPath::Fused, &CUDA, dt, Accum::F32), Ok(NormRoute::Op));
            assert_eq!(r(OpPath::Composed, &DeviceLocation::Cpu, dt, Accum::F32), composed32);
        }
        assert_eq!(r(OpPath::Auto, &CUDA, DType::BF16, Accum::F32), Ok(NormRoute::Op));
        assert_eq!(r(OpPath::Auto, &CUDA, DType::F16, Accum::F32), Ok(NormRoute::Op));
        assert_eq!(r(OpPath::Auto, &CUDA, DType::F32, Accum::F32), composed32);
        assert_eq!(r(OpPath::Auto, &CUDA, DType::F64, Accum::F64), Ok(NormRoute::Composed { work: DType::F64 }));
        assert_eq!(r(OpPath::Auto, &CUDA, DType::BF16, Accum::F64), Ok(NormRoute::Composed { work: DType::F64 }));
        // The pure accumulators: the CPU op only.
        assert_eq!(r(OpPath::Auto, &DeviceLocation::Cpu, DType::F16, Accum::PureF16), Ok(NormRoute::Op));
        for (path, dev) in [(OpPath::Auto, CUDA), (OpPath::Fused, CUDA), (OpPath::Composed, CUDA), (OpPath::Composed, DeviceLocation::Cpu)] {
            let e = r(path, &dev, DType::BF16, Accum::PureBf16).unwrap_err().to_string();
            assert!(e.contains("pure-bf16") && e.contains(&device_name(&dev)), "{path:?} {dev:?}: {e}");
        }
    }

    #[test]
    fn composed_top_k_is_limited_by_the_cuda_sort_width() {
        let spec = NormSpec::topk(4, 1e-6).with_centred(false);
        let ok = |n, dev: &DeviceLocation| norm_route(OpPath::Auto, dev, DType::F32, Accum::F32, &spec, n);
        assert!(ok(COMPOSED_TOPK_MAX_WIDTH, &CUDA).is_ok());
        let e = ok(COMPOSED_TOPK_MAX_WIDTH + 1, &CUDA).unwrap_err().to_string();
        assert!(e.contains("top-k") && e.contains("8193") && e.contains("F32") && e.contains("cuda:0"), "{e}");
        assert_eq!(norm_route(OpPath::Composed, &DeviceLocation::Cpu, DType::F32, Accum::F32, &spec, 9000), Ok(NormRoute::Composed { work: DType::F32 }));
    }
}
