//! The sanitizer job on the fused weight projections: tests/sanitize/project_driver.cpp runs
//! nl_project_{f32,f16,bf16}, each over one descriptor table of several matrices (unit and ball
//! rows and columns, Frobenius balls, widths not multiples of 8 or of the column tile, partial
//! tiles, a zero row, misaligned matrices) and again over the projected weights, with one OS
//! thread per CUDA thread, built with ThreadSanitizer (data races on shared and global memory)
//! and with AddressSanitizer + UndefinedBehaviorSanitizer (out-of-bounds, misaligned accesses,
//! UB). Any report fails.

mod common;

use common::{compile_cxx, run_prog};

fn assert_clean(name: &str, flags: &[&str], marker: &str) {
    let p = compile_cxx("tests/sanitize/project_driver.cpp", name, flags);
    let (rc, out, err) = run_prog(&p, &[]);
    assert!(
        rc == 0 && out.contains("OK: all kernels ran clean") && !err.contains(marker) && !err.contains("runtime error"),
        "{name}: rc {rc}\nstdout:\n{out}\nstderr:\n{}",
        &err[..err.len().min(20000)]
    );
}

#[test]
fn project_kernels_are_clean_under_thread_sanitizer() {
    assert_clean("project_tsan", &["-O1", "-fsanitize=thread"], "ThreadSanitizer");
}

#[test]
fn project_kernels_are_clean_under_address_sanitizer() {
    assert_clean(
        "project_asan",
        &["-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"],
        "AddressSanitizer",
    );
}
