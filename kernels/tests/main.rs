//! normlab-kernels' integration tests, one module per file, in one test binary: `cargo test -p
//! normlab-kernels --release --test integration [MODULE::]` (e.g. `sanitizers::`).
//!
//! Why one binary: each test binary compiled its own copy of the generic f64 reference of
//! normlab-norms in release mode and linked it (the row and batch kernels are now compiled in
//! normlab-norms itself, norms/src/compiled.rs; the rest is still per binary). `common` is a
//! module of this crate, used by the files that need it.

mod common;

mod cxx_cache;
mod emulated;
mod emulated_batch;
mod emulated_project;
mod emulated_residual;
mod emulated_variants;
mod emulator_catches;
mod nvrtc_gate;
mod sanitizers;
mod sanitizers_batch;
mod sanitizers_project;
mod sanitizers_residual;
