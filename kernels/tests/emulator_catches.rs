//! The emulator itself is tested: planted bugs in a test-only kernel (tests/planted/planted.cu)
//! must be caught, and the same kernel without the bug must pass (so each check can fail).
//!
//! | planted bug | caught by |
//! |---|---|
//! | first `__syncthreads` missing | serial engine, fwd order (wrong sums); ThreadSanitizer |
//! | second `__syncthreads` missing | serial engine, rev order (wrong broadcast); ThreadSanitizer |
//! | out-of-bounds read `x[n]` | AddressSanitizer (heap-buffer-overflow) |
//! | `__syncthreads` in a divergent branch | the emulator's barrier check (abort with both call sites) |

use crate::common;

use common::{compile_cxx, run_prog, Sanitizer};

#[test]
fn missing_syncthreads_is_caught_by_thread_orders() {
    let p = compile_cxx("tests/planted/planted.cu", "planted_serial", &["-O1"]);
    for order in ["fwd", "rev"] {
        let (rc, out, err) = run_prog(&p, &["ok", order]);
        assert_eq!(rc, 0, "correct kernel must pass in {order} order: {out}{err}");
    }
    let (rc, out, _) = run_prog(&p, &["nosync1", "fwd"]);
    assert!(rc == 1 && out.contains("MISMATCH"), "missing first __syncthreads not caught in fwd order: rc {rc}, {out}");
    let (rc, out, _) = run_prog(&p, &["nosync2", "rev"]);
    assert!(rc == 1 && out.contains("MISMATCH"), "missing second __syncthreads not caught in rev order: rc {rc}, {out}");
    let (rc, _, err) = run_prog(&p, &["divergent", "fwd"]);
    assert!(rc != 0 && err.contains("divergent barrier"), "divergent __syncthreads not reported: rc {rc}, {err}");
}

#[test]
fn missing_syncthreads_is_caught_by_thread_sanitizer() {
    // The flags of the sanitizer drivers (tests/sanitizers*.rs).
    let p = compile_cxx("tests/planted/planted.cu", "planted_tsan", Sanitizer::Thread.flags());
    let (rc, out, err) = run_prog(&p, &["ok", "par"]);
    assert!(rc == 0 && !err.contains("ThreadSanitizer"), "correct kernel must be race-free: rc {rc}, {out}{err}");
    for case in ["nosync1", "nosync2"] {
        let (_, _, err) = run_prog(&p, &[case, "par"]);
        assert!(err.contains("ThreadSanitizer: data race"), "{case}: no data race reported:\n{err}");
    }
}

#[test]
fn out_of_bounds_read_is_caught_by_address_sanitizer() {
    // The flags of the sanitizer drivers (tests/sanitizers*.rs).
    let p = compile_cxx("tests/planted/planted.cu", "planted_asan", Sanitizer::AddressUndefined.flags());
    let (rc, out, err) = run_prog(&p, &["ok", "par"]);
    assert!(rc == 0 && !err.contains("AddressSanitizer"), "correct kernel must be clean: rc {rc}, {out}{err}");
    let (rc, _, err) = run_prog(&p, &["oob", "par"]);
    assert!(rc != 0 && err.contains("heap-buffer-overflow"), "out-of-bounds read not caught: rc {rc}\n{err}");
}
