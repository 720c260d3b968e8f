//! The per-chunk random stream of the Monte Carlo engine: xoshiro256++ (Blackman & Vigna),
//! seeded through SplitMix64 from `(seed, chunk)`.
//!
//! Why not ChaCha: the samplers draw 3 numbers per pipeline coordinate, and at ~1 ns per 64-bit
//! draw xoshiro256++ is several times cheaper than ChaCha8 while passing BigCrush; streams are
//! not cryptographic and need not be. Implemented here (not `rand::rngs::SmallRng`, whose
//! algorithm may change between rand versions) so a seed gives the same numbers for as long as
//! this file does not change.

use rand::{Error, RngCore};

/// SplitMix64 step: the standard seeding generator for xoshiro.
#[inline]
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256++.
#[derive(Debug, Clone)]
pub struct StreamRng {
    s: [u64; 4],
}

impl StreamRng {
    /// The stream of chunk `chunk` under `seed`: SplitMix64 started at a mix of both.
    pub fn new(seed: u64, chunk: u64) -> Self {
        let mut c = chunk.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let mut sm = seed ^ splitmix64(&mut c);
        let mut s = [0u64; 4];
        for v in s.iter_mut() {
            *v = splitmix64(&mut sm);
        }
        if s == [0; 4] {
            s[0] = 1;
        }
        StreamRng { s }
    }
}

impl RngCore for StreamRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    #[inline]
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn reference_sequence() {
        // xoshiro256++ from state {1, 2, 3, 4}: the reference implementation's first outputs.
        let mut r = StreamRng { s: [1, 2, 3, 4] };
        assert_eq!(r.next_u64(), 41943041);
        assert_eq!(r.next_u64(), 58720359);
        assert_eq!(r.next_u64(), 3588806011781223);
    }

    fn streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4).map({ let mut r = StreamRng::new(7, 0); move |_| r.next_u64() }).collect();
        let b: Vec<u64> = (0..4).map({ let mut r = StreamRng::new(7, 1); move |_| r.next_u64() }).collect();
        let c: Vec<u64> = (0..4).map({ let mut r = StreamRng::new(7, 0); move |_| r.next_u64() }).collect();
        assert_ne!(a, b);
        assert_eq!(a, c);
        // Uniform bits: the mean of many top bits is about 1/2.
        let mut r = StreamRng::new(1, 2);
        let ones: u32 = (0..100_000).map(|_| (r.next_u64() >> 63) as u32).sum();
        assert!((ones as f64 / 1e5 - 0.5).abs() < 0.01);
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![reference_sequence, streams_differ_and_repeat];
}
