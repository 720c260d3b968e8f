//! normlab's integration tests, one module per file, in one test binary: `cargo test --release
//! --test integration [MODULE::]` (e.g. `ops_grad::`). The GPU runtime's tests, `gpu_runtime` and
//! `gpu_cli`, stay binaries of their own: CI builds them again with feature `cuda`, and this
//! binary need not be.
//!
//! Why one binary: in release mode each test binary compiles its own copies of the generic code
//! it calls (normlab's and candle's) and links all of candle; twenty binaries made much of CI's
//! time. The helpers (`*_common`) are modules of this crate, used by the files that need
//! them.

mod compare_common;
mod model_common;
mod ops_common;
mod train_common;

mod cli_bench;
mod cli_constants;
mod compare_dir;
mod compare_mini;
mod compare_report;
mod compare_resume;
mod data_pipeline;
mod model_composed;
mod model_grad;
mod model_ngpt;
mod model_structure;
mod ops_composed;
mod ops_errors;
mod ops_forward;
mod ops_grad;
mod train_cli;
mod train_loop;
mod train_models;
