//! The sanitizer job on the fused residual-update kernels: tests/sanitize/residual_driver.cpp
//! runs nGPT and anGPT forward (also in place), backward with da and the finalize, f16 and bf16,
//! warp and block mappings, misaligned rows and widths that are not multiples of 8, with one OS
//! thread per CUDA thread, built with ThreadSanitizer (data races on shared and global memory)
//! and with AddressSanitizer + UndefinedBehaviorSanitizer (out-of-bounds, misaligned accesses,
//! UB). Any report fails.

mod common;

use common::{compile_cxx, run_prog};

fn assert_clean(name: &str, flags: &[&str], marker: &str) {
    let p = compile_cxx("tests/sanitize/residual_driver.cpp", name, flags);
    let (rc, out, err) = run_prog(&p, &[]);
    assert!(
        rc == 0 && out.contains("OK: all kernels ran clean") && !err.contains(marker) && !err.contains("runtime error"),
        "{name}: rc {rc}\nstdout:\n{out}\nstderr:\n{}",
        &err[..err.len().min(20000)]
    );
}

#[test]
fn update_kernels_are_clean_under_thread_sanitizer() {
    assert_clean("residual_tsan", &["-O1", "-fsanitize=thread"], "ThreadSanitizer");
}

#[test]
fn update_kernels_are_clean_under_address_sanitizer() {
    assert_clean(
        "residual_asan",
        &["-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"],
        "AddressSanitizer",
    );
}
