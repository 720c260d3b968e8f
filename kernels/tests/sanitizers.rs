//! The sanitizer job on the real kernels: tests/sanitize/rownorm_driver.cpp runs every row kernel
//! (forward, backward with weight/bias gradients, finalize; f16 and bf16; warp and block
//! mappings; misaligned rows) on small shapes with one OS thread per CUDA thread, built with
//! ThreadSanitizer (data races on shared and global memory) and with AddressSanitizer +
//! UndefinedBehaviorSanitizer (out-of-bounds, misaligned accesses, UB). Any report fails.

use crate::common;

use common::{assert_sanitizer_clean, Sanitizer};

const DRIVER: &str = "tests/sanitize/rownorm_driver.cpp";

#[test]
fn kernels_are_clean_under_thread_sanitizer() {
    assert_sanitizer_clean(DRIVER, "rownorm_tsan", Sanitizer::Thread);
}

#[test]
fn kernels_are_clean_under_address_sanitizer() {
    assert_sanitizer_clean(DRIVER, "rownorm_asan", Sanitizer::AddressUndefined);
}
