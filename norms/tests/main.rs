//! normlab-norms' integration tests, one module per file, in one test binary: `cargo test -p
//! normlab-norms --release --test integration [MODULE::]` (e.g. `row_lowprec::`).
//!
//! Why one binary: in release mode each test binary compiled its own copy of the generic
//! kernels it called (the fused forwards for every storage type and kind), about two minutes
//! each on the 2-core CI machine; fifteen binaries made most of CI's time. The row and batch
//! kernels are now compiled once in the library (`src/compiled.rs`), but every binary still
//! links and compiles its own other generics and test helpers. The helpers
//! (`common`, `batch_common`) are modules of this crate, used by the files that need them.

mod batch_common;
mod common;

mod batch_grad;
mod batch_reference;
mod batch_rescue;
mod batch_running;
mod nu_closed_forms;
mod nu_engine;
mod residual_grad;
mod row_determinism;
mod row_edge;
mod row_errors;
mod row_grad;
mod row_lowprec;
mod row_reference;
mod weight_bounded;
mod weight_projection;
