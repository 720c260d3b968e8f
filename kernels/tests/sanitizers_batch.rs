//! The sanitizer job on the batch-norm kernels: tests/sanitize/batch_driver.cpp runs every kind
//! (BN, RMS, unit L2, L1 centred and uncentred, L-inf, Top-k, mean-only) on [N, C] and
//! [N, C, H, W], train (statistics, running update, apply) and eval, backward with dweight/dbias
//! (or dx only), f16 and bf16, with and without affine, on small shapes with every tail (C not a
//! multiple of 8 or of the NC tiles, odd H*W and 16-byte slabs, partial chunks, one sample,
//! misaligned buffers), every entry point of the family at least once per dtype, with one OS
//! thread per CUDA thread, built with ThreadSanitizer (data races on shared and global memory)
//! and with AddressSanitizer + UndefinedBehaviorSanitizer (out-of-bounds, misaligned accesses,
//! UB). Any report fails.

use crate::common;

use common::{assert_sanitizer_clean, Sanitizer};

const DRIVER: &str = "tests/sanitize/batch_driver.cpp";

#[test]
fn batch_kernels_are_clean_under_thread_sanitizer() {
    assert_sanitizer_clean(DRIVER, "batch_tsan", Sanitizer::Thread);
}

#[test]
fn batch_kernels_are_clean_under_address_sanitizer() {
    assert_sanitizer_clean(DRIVER, "batch_asan", Sanitizer::AddressUndefined);
}
