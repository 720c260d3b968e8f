//! The kernel sources, embedded so that a runtime can compile them with NVRTC for the device it
//! finds (no toolkit needed at build time).
//!
//! Each family's constant is one self-contained source: the shared header [`NL_COMMON_CUH`]
//! followed by the family's `.cu` file (whose `#include "nl_common.cuh"` is guarded by
//! `#ifndef NL_COMMON_CUH`, so NVRTC never opens it). Both files start with a `#line 2 "<name>"`
//! directive, so NVRTC's diagnostics and the PTX line info name the file and line of the
//! original text.

/// The device helpers shared by every family (storage conversions, 16-byte vector lanes, row
/// groups, ...): the first part of each embedded source below.
pub const NL_COMMON_CUH: &str = include_str!("cuda/nl_common.cuh");
/// Row norms, forward and backward, fp16/bf16 (see the file's header for the design).
pub const ROWNORM_CU: &str = concat!(include_str!("cuda/nl_common.cuh"), include_str!("cuda/rownorm.cu"));
/// The SIMT emulator header the CPU build compiles the kernels against (not needed by NVRTC).
pub const SIMT_CPU_H: &str = include_str!("cuda/simt_cpu.h");
/// File name to give NVRTC for [`ROWNORM_CU`] (appears in its diagnostics).
pub const ROWNORM_CU_NAME: &str = "rownorm.cu";

/// NVRTC options used by the compile gate (and by a runtime), besides `--gpu-architecture`.
/// `-default-device` is not used: every kernel is `__global__`.
pub const NVRTC_OPTIONS: &[&str] = &["--std=c++17", "-lineinfo"];
/// Weight projections of nGPT/anGPT, f32/f16/bf16, one fused launch (see the file's header).
pub const PROJECT_CU: &str = concat!(include_str!("cuda/nl_common.cuh"), include_str!("cuda/project.cu"));
/// File name to give NVRTC for [`PROJECT_CU`].
pub const PROJECT_CU_NAME: &str = "project.cu";
/// Fused residual updates of nGPT and anGPT, forward and backward, fp16/bf16 (see the file's header).
pub const RESIDUAL_CU: &str = concat!(include_str!("cuda/nl_common.cuh"), include_str!("cuda/residual.cu"));
/// File name to give NVRTC for [`RESIDUAL_CU`].
pub const RESIDUAL_CU_NAME: &str = "residual.cu";
/// Batch (per-channel) norms, train/eval, forward/backward, fp16/bf16 (see the file's header).
pub const BATCHNORM_CU: &str = concat!(include_str!("cuda/nl_common.cuh"), include_str!("cuda/batchnorm.cu"));
/// File name to give NVRTC for [`BATCHNORM_CU`].
pub const BATCHNORM_CU_NAME: &str = "batchnorm.cu";

#[cfg(test)]
mod tests {
    use super::*;

    /// The `#line` layout the diagnostics rely on: the header, then the family's file, each
    /// starting with `#line 2 "<its name>"` on its first line, and the header ending with a
    /// newline (so the family's directive is a line of its own).
    #[test]
    fn embedded_sources_are_header_then_file_with_line_directives() {
        assert!(NL_COMMON_CUH.starts_with("#line 2 \"nl_common.cuh\""));
        assert!(NL_COMMON_CUH.ends_with('\n'));
        assert!(NL_COMMON_CUH.contains("#define NL_COMMON_CUH\n"));
        for (src, name) in [
            (ROWNORM_CU, ROWNORM_CU_NAME),
            (RESIDUAL_CU, RESIDUAL_CU_NAME),
            (BATCHNORM_CU, BATCHNORM_CU_NAME),
            (PROJECT_CU, PROJECT_CU_NAME),
        ] {
            let file = src.strip_prefix(NL_COMMON_CUH).unwrap_or_else(|| panic!("{name}: does not start with the header"));
            assert!(file.starts_with(&format!("#line 2 \"{name}\"")), "{name}: first line is not #line 2 \"{name}\"");
            assert!(
                file.contains("#ifndef NL_COMMON_CUH\n#include \"nl_common.cuh\""),
                "{name}: the header include is not guarded by #ifndef NL_COMMON_CUH"
            );
            assert_eq!(file.matches("#line").count(), 1, "{name}: one #line directive");
        }
    }
}
