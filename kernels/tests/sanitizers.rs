//! The sanitizer job on the real kernels: tests/sanitize/rownorm_driver.cpp runs every row kernel
//! (forward, backward with weight/bias gradients, finalize; f16 and bf16; warp and block
//! mappings; misaligned rows) on small shapes with one OS thread per CUDA thread, built with
//! ThreadSanitizer (data races on shared and global memory) and with AddressSanitizer +
//! UndefinedBehaviorSanitizer (out-of-bounds, misaligned accesses, UB). Any report fails.

mod common;

use common::{compile_cxx, run_prog};

fn assert_clean(name: &str, flags: &[&str], marker: &str) {
    let p = compile_cxx("tests/sanitize/rownorm_driver.cpp", name, flags);
    let (rc, out, err) = run_prog(&p, &[]);
    assert!(
        rc == 0 && out.contains("OK: all kernels ran clean") && !err.contains(marker) && !err.contains("runtime error"),
        "{name}: rc {rc}\nstdout:\n{out}\nstderr:\n{}",
        &err[..err.len().min(20000)]
    );
}

#[test]
fn kernels_are_clean_under_thread_sanitizer() {
    assert_clean("rownorm_tsan", &["-O1", "-fsanitize=thread"], "ThreadSanitizer");
}

#[test]
fn kernels_are_clean_under_address_sanitizer() {
    assert_clean(
        "rownorm_asan",
        &["-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"],
        "AddressSanitizer",
    );
}
