//! The machine's copy bandwidth: the ceiling a streaming row norm is measured against.
//!
//! A parallel `memcpy` (one `copy_from_slice` per 1 MiB chunk, chunks spread over the rayon
//! pool, as the norms spread rows) of a buffer much larger than the last-level cache, counted
//! as `2 * buffer bytes` (read + write), the same way the norms' compulsory bytes are counted.
//!
//! On a shared machine the memory bandwidth a process gets moves with its neighbours' load
//! (seen on the development VM: 45 to 78 GB/s between two runs a minute apart). A copy timed
//! once at the start would set every fraction of the run from one moment, so
//! [`CopySampler`] keeps its buffers and is sampled between the cases of a benchmark; the
//! bandwidth is the median over all samples, and the spread (min/max) is reported with it.

use rayon::prelude::*;

use crate::bench::timing::{summarize, Timing};

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
    /// How many times the copy was sampled during the run (`timing` is over all samples).
    #[serde(default = "one")]
    pub rounds: usize,
}

fn one() -> usize {
    1
}

/// Copy a `buffer_bytes` buffer `reps` times (after one untimed copy that also faults the
/// pages in) and return the median bandwidth.
pub fn measure_copy(buffer_bytes: usize, reps: usize) -> CopyBandwidth {
    let mut s = CopySampler::new(buffer_bytes);
    s.sample(reps);
    s.result()
}

/// The copy's buffers, kept for sampling the bandwidth several times in one run.
pub struct CopySampler {
    src: Vec<u8>,
    dst: Vec<u8>,
    times: Vec<f64>,
    rounds: usize,
}

impl CopySampler {
    /// Allocate and fill the buffers and copy once untimed (which faults the pages in).
    pub fn new(buffer_bytes: usize) -> Self {
        let len = buffer_bytes.max(CHUNK);
        // Distinct, non-zero contents so no copy can be elided or served from zero pages.
        let src: Vec<u8> = (0..len).into_par_iter().map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8 | 1).collect();
        let mut s = CopySampler { src, dst: vec![0u8; len], times: Vec::new(), rounds: 0 };
        s.copy();
        s
    }

    fn copy(&mut self) {
        self.dst.par_chunks_mut(CHUNK).zip(self.src.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
        std::hint::black_box(&mut self.dst);
    }

    /// One round: `reps` timed copies (at least one).
    pub fn sample(&mut self, reps: usize) {
        for _ in 0..reps.max(1) {
            let t0 = std::time::Instant::now();
            self.copy();
            self.times.push(t0.elapsed().as_secs_f64());
        }
        self.rounds += 1;
    }

    /// The median bandwidth over every copy sampled so far (one round is sampled first if
    /// there was none).
    pub fn result(&mut self) -> CopyBandwidth {
        if self.times.is_empty() {
            self.sample(1);
        }
        let timing = summarize(&mut self.times.clone());
        let bytes_per_rep = 2 * self.src.len();
        CopyBandwidth { buffer_bytes: self.src.len(), bytes_per_rep, timing, gb_per_s: bytes_per_rep as f64 / timing.median_s / 1e9, rounds: self.rounds }
    }
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
        assert_eq!(bw.rounds, 1);
    }

    #[test]
    fn rounds_accumulate_into_one_median() {
        let mut s = CopySampler::new(2 << 20);
        s.sample(3);
        s.sample(2);
        let bw = s.result();
        assert_eq!((bw.rounds, bw.timing.reps), (2, 5));
        assert!(bw.timing.min_s <= bw.timing.median_s && bw.timing.median_s <= bw.timing.max_s);
        let mut empty = CopySampler::new(1 << 20);
        let bw = empty.result();
        assert_eq!((bw.rounds, bw.timing.reps), (1, 1));
        assert!(bw.gb_per_s.is_finite() && bw.gb_per_s > 0.0);
    }
}
