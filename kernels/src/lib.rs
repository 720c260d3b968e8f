//! # normlab-kernels
//!
//! The CUDA kernels of normlab (row forms of RMS, Layer, unit-L2, L1, L-inf and Top-k norms,
//! forward and backward, fp16 and bf16 storage with fp32 statistics) and everything needed to
//! prove them without a GPU:
//!
//! - [`sources`]: the CUDA C sources embedded as strings (`include_str!`), for NVRTC at run time.
//! - [`list`]: every kernel entry point (the names the .cu file's X-macro defines).
//! - [`plan`]: host-side launch planning: validation with typed errors (k > 32, rows too wide for
//!   shared memory, unsupported dtypes), thread mapping, grid, shared memory.
//! - [`params`]: the `#[repr(C)]` kernel parameter structs and the saved per-row statistics.
//! - [`project`]: host side of the fused nGPT/anGPT weight projection (`src/cuda/project.cu`):
//!   descriptor table, block prefix sums, typed errors, per-matrix reports.
//! - [`residual`]: host side of the fused nGPT/anGPT residual updates (`src/cuda/residual.cu`):
//!   launch planning with typed errors, parameter structs, per-row statistics.
//! - [`ptx`]: each entry's parameter (size, alignment) read from NVRTC's PTX, for the ABI
//!   checks against [`params`].
//! - [`bounds`]: the forward error bound against the f64 reference, shared by the emulator
//!   tests and `normlab gpu-check`.
//! - [`cpu`]: execution of the very same .cu files on the CPU through the SIMT emulator
//!   (`src/cuda/simt_cpu.h`), used by the tests against normlab-norms' f64 reference.
//!
//! See `kernels/README.md` for the thread mappings, byte counts and the compile-gate report.

pub mod batch;
pub mod bounds;
pub mod cpu;
pub mod error;
pub mod list;
pub mod params;
pub mod plan;
pub mod project;
pub mod ptx;
pub mod residual;
pub mod sources;

pub use error::{KernelError, Result};
pub use list::{Direction, KernelId, Mapping, Storage};
pub use params::KernelStats;
pub use plan::{Device, LaunchPlan};
