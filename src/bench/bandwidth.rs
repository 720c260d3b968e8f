//! The machine's copy bandwidth: the ceiling a streaming row norm is measured against.
//!
//! A parallel `memcpy` (one `copy_from_slice` per 1 MiB chunk, chunks spread over the rayon
//! pool, as the norms spread rows) of a buffer much larger than the last-level cache, counted
//! as `2 * buffer bytes` (read + write), the same way the norms' compulsory bytes are counted.

use rayon::prelude::*;

use crate::bench::timing::{measure, Timing};

const CHUNK: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CopyBandwidth {
    /// Size of the source buffer (the destination has the same size).
    pub buffer_bytes: usize,
    /// Bytes counted per copy: read + write = 2 * buffer_bytes.
    pub bytes_per_rep: usize,
    pub timing: Timing,
    /// `bytes_per_rep / median` in 1e9 bytes per second.
    pub gb_per_s: f64,
}

/// Copy a `buffer_bytes` buffer `reps` times (after one untimed copy that also faults the
/// pages in) and return the median bandwidth.
pub fn measure_copy(buffer_bytes: usize, reps: usize) -> CopyBandwidth {
    let len = buffer_bytes.max(CHUNK);
    // Distinct, non-zero contents so no copy can be elided or served from zero pages.
    let src: Vec<u8> = (0..len).into_par_iter().map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8 | 1).collect();
    let mut dst = vec![0u8; len];
    let timing = measure::<std::convert::Infallible>(1, reps, || {
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
        std::hint::black_box(&mut dst);
        Ok(())
    })
    .unwrap_or_else(|e| match e {});
    let bytes_per_rep = 2 * len;
    CopyBandwidth { buffer_bytes: len, bytes_per_rep, timing, gb_per_s: bytes_per_rep as f64 / timing.median_s / 1e9 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_and_write() {
        let bw = measure_copy(4 << 20, 3);
        assert_eq!(bw.buffer_bytes, 4 << 20);
        assert_eq!(bw.bytes_per_rep, 8 << 20);
        assert_eq!(bw.timing.reps, 3);
        assert!(bw.gb_per_s.is_finite() && bw.gb_per_s > 0.0);
        let expect = bw.bytes_per_rep as f64 / bw.timing.median_s / 1e9;
        assert!((bw.gb_per_s - expect).abs() <= 1e-12 * expect);
    }
}
