//! The sanitizer job on the fused residual-update kernels: tests/sanitize/residual_driver.cpp
//! runs nGPT and anGPT forward (also in place), backward with da and the finalize, f16 and bf16,
//! warp and block mappings, misaligned rows and widths that are not multiples of 8, with one OS
//! thread per CUDA thread, built with ThreadSanitizer (data races on shared and global memory)
//! and with AddressSanitizer + UndefinedBehaviorSanitizer (out-of-bounds, misaligned accesses,
//! UB). Any report fails.

use crate::common;

use common::{assert_sanitizer_clean, Sanitizer};

const DRIVER: &str = "tests/sanitize/residual_driver.cpp";

#[test]
fn update_kernels_are_clean_under_thread_sanitizer() {
    assert_sanitizer_clean(DRIVER, "residual_tsan", Sanitizer::Thread);
}

#[test]
fn update_kernels_are_clean_under_address_sanitizer() {
    assert_sanitizer_clean(DRIVER, "residual_asan", Sanitizer::AddressUndefined);
}
