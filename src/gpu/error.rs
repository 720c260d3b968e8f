//! Typed errors of the GPU runtime. Every one names what is missing or which value was refused;
//! none of the runtime's paths panics on a machine without a GPU, driver or NVRTC.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum GpuError {
    /// The binary was built without the `cuda` feature (the default build).
    #[error("this normlab was built without the `cuda` feature, so it has no GPU runtime: rebuild with `cargo build --release --features cuda`")]
    NotBuilt,
    /// libcuda (the NVIDIA driver's library) could not be loaded.
    #[error("no CUDA driver: the NVIDIA driver library (libcuda.so) could not be loaded; install an NVIDIA driver on a machine with a GPU")]
    NoDriver,
    /// The driver loaded but reports no usable device.
    #[error("no CUDA device: {reason}")]
    NoDevice { reason: String },
    /// libnvrtc could not be loaded.
    #[error("NVRTC missing: libnvrtc could not be loaded ({detail}); install the CUDA toolkit or the `nvidia-cuda-nvrtc-cu12` wheel (`eval \"$(bash .ci/cuda-wheels.sh)\"`) and set NORMLAB_NVRTC_LIB to the library's path")]
    NvrtcMissing { detail: String },
    /// The CUDA headers the kernels include are not found.
    #[error("CUDA headers missing: cuda_fp16.h not found in {searched:?}; set NORMLAB_CUDA_INCLUDE to the directory holding cuda_fp16.h and cuda_bf16.h (the `nvidia-cuda-runtime-cu12` wheel has them)")]
    HeadersMissing { searched: Vec<PathBuf> },
    /// NVRTC refused the kernel source: its log.
    #[error("NVRTC failed to compile {source_name} for {arch} ({code}):\n{log}")]
    Compile { source_name: String, arch: String, code: String, log: String },
    /// The device's architecture is older than the kernels support.
    #[error("compute capability {major}.{minor} is not supported: the kernels need sm_80 (Ampere) or newer")]
    UnsupportedArch { major: i32, minor: i32 },
    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed: {message}")]
    Driver { call: &'static str, message: String },
    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC call {call} failed: {message}")]
    Nvrtc { call: &'static str, message: String },
    /// The launch request itself is invalid (k too large, row too wide, bad dtype, ...).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The kernels store fp16 and bf16 only.
    #[error("dtype {dtype} has no CUDA kernel: the kernels store f16 or bf16 (use the CPU path for f32/f64)")]
    UnsupportedDType { dtype: String },
    /// The weight projections store f32, f16 and bf16 parameters.
    #[error("dtype {dtype} has no CUDA projection kernel: the weight projections store f32, f16 or bf16 parameters (f64 parameters are projected on the CPU path only)")]
    UnsupportedProjectionDType { dtype: String },
    /// The GPU statistics are fp32: other accumulators exist on the CPU path only.
    #[error("accumulator {accum} is not available on CUDA: the kernels accumulate in f32 (use Accum::F32, or the CPU path)")]
    UnsupportedAccum { accum: String },
    /// An operand is not contiguous (the kernels read dense rows).
    #[error("{what}: the CUDA kernels need a contiguous tensor, got shape {shape:?} with strides {stride:?}")]
    NotContiguous { what: &'static str, shape: Vec<usize>, stride: Vec<usize> },
    /// A buffer has the wrong length for the launch.
    #[error("{what}: expected {expected} elements, got {got}")]
    Length { what: &'static str, expected: usize, got: usize },
    /// An error inside one gpu-check case, with the case's label.
    #[error("gpu-check case '{case}': {source}")]
    InCase { case: String, source: Box<GpuError> },
    /// gpu-check found kernels outside their error bounds.
    #[error("gpu-check: {failed} of {total} cases exceed their error bound (see the table)")]
    CheckFailed { failed: usize, total: usize },
}

/// A launch-planning error of normlab-kernels, carried as its message so that this type exists
/// without the `cuda` feature too.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("{0}")]
pub struct PlanError(pub String);

#[cfg(feature = "cuda")]
impl From<normlab_kernels::KernelError> for GpuError {
    fn from(e: normlab_kernels::KernelError) -> Self {
        GpuError::Plan(PlanError(e.to_string()))
    }
}

#[cfg(feature = "cuda")]
impl From<normlab_norms::NormError> for GpuError {
    fn from(e: normlab_norms::NormError) -> Self {
        GpuError::Plan(PlanError(e.to_string()))
    }
}

#[cfg(feature = "cuda")]
impl GpuError {
    /// A failed driver call, named.
    pub(crate) fn driver(call: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError {
        move |e| GpuError::Driver { call, message: format!("{e:?}") }
    }
    pub(crate) fn nvrtc(call: &'static str) -> impl FnOnce(cudarc::nvrtc::result::NvrtcError) -> GpuError {
        move |e| GpuError::Nvrtc { call, message: format!("{e:?}") }
    }
}

pub type Result<T, E = GpuError> = std::result::Result<T, E>;
