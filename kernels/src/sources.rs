//! The kernel sources, embedded so that a runtime can compile them with NVRTC for the device it
//! finds (no toolkit needed at build time).

/// Row norms, forward and backward, fp16/bf16 (see the file's header for the design).
pub const ROWNORM_CU: &str = include_str!("cuda/rownorm.cu");
/// The SIMT emulator header the CPU build compiles the kernels against (not needed by NVRTC).
pub const SIMT_CPU_H: &str = include_str!("cuda/simt_cpu.h");
/// File name to give NVRTC for [`ROWNORM_CU`] (appears in its diagnostics).
pub const ROWNORM_CU_NAME: &str = "rownorm.cu";

/// NVRTC options used by the compile gate (and by a runtime), besides `--gpu-architecture`.
/// `-default-device` is not used: every kernel is `__global__`.
pub const NVRTC_OPTIONS: &[&str] = &["--std=c++17", "-lineinfo"];
/// Weight projections of nGPT/anGPT, f32/f16/bf16, one fused launch (see the file's header).
pub const PROJECT_CU: &str = include_str!("cuda/project.cu");
/// File name to give NVRTC for [`PROJECT_CU`].
pub const PROJECT_CU_NAME: &str = "project.cu";
/// Fused residual updates of nGPT and anGPT, forward and backward, fp16/bf16 (see the file's header).
pub const RESIDUAL_CU: &str = include_str!("cuda/residual.cu");
/// File name to give NVRTC for [`RESIDUAL_CU`].
pub const RESIDUAL_CU_NAME: &str = "residual.cu";
/// Batch (per-channel) norms, train/eval, forward/backward, fp16/bf16 (see the file's header).
pub const BATCHNORM_CU: &str = include_str!("cuda/batchnorm.cu");
/// File name to give NVRTC for [`BATCHNORM_CU`].
pub const BATCHNORM_CU_NAME: &str = "batchnorm.cu";
