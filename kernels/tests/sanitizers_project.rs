//! The sanitizer job on the fused weight projections: tests/sanitize/project_driver.cpp runs
//! nl_project_{f32,f16,bf16}, each over one descriptor table of several matrices (unit and ball
//! rows and columns, Frobenius balls, widths not multiples of 8 or of the column tile, partial
//! tiles, a zero row, misaligned matrices) and again over the projected weights, with one OS
//! thread per CUDA thread, built with ThreadSanitizer (data races on shared and global memory)
//! and with AddressSanitizer + UndefinedBehaviorSanitizer (out-of-bounds, misaligned accesses,
//! UB). Any report fails.

use crate::common;

use common::{assert_sanitizer_clean, Sanitizer};

const DRIVER: &str = "tests/sanitize/project_driver.cpp";

#[test]
fn project_kernels_are_clean_under_thread_sanitizer() {
    assert_sanitizer_clean(DRIVER, "project_tsan", Sanitizer::Thread);
}

#[test]
fn project_kernels_are_clean_under_address_sanitizer() {
    assert_sanitizer_clean(DRIVER, "project_asan", Sanitizer::AddressUndefined);
}
