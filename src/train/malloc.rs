//! Allocator settings for training on the CPU.
//!
//! candle allocates a fresh buffer for the result of every op, forward and backward, and frees
//! it soon after. With glibc's default thresholds, buffers above the (dynamic) mmap threshold
//! are mapped from the kernel and unmapped again, and the top of the heap is trimmed back to the
//! kernel, so the next step faults the same pages in again and the kernel zeroes them: at the
//! benchmark size (`normlab bench train-step`) about a sixth of a step went to page faults and
//! page clearing. [`retain_freed_memory`] raises the mmap threshold to glibc's maximum (32 MiB)
//! and the trim threshold to 1 GiB, so freed buffers stay in the heap and are reused; the
//! process keeps its peak heap instead of returning it between ops. Nothing else changes.

/// Keep freed buffers in the heap for reuse (glibc only; a no-op elsewhere). Returns whether the
/// settings were applied. Idempotent; call it once at start-up, before the work.
pub fn retain_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets allocator parameters; the values are within glibc's limits
        // (M_MMAP_THRESHOLD <= 32 MiB on 64-bit targets).
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1 && libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn settings_are_accepted() {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(super::retain_freed_memory());
        // Allocations still work on both sides of the new thresholds.
        let v = vec![1u8; 64 << 20];
        let w = vec![2u8; 1 << 20];
        assert_eq!(v[12345] + w[4321], 3);
    }
}
