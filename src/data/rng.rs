//! A counter-based random number source: every draw is a pure function of
//! `(seed, stream, step, index, attempt)`.
//!
//! Why counter-based rather than a stateful generator: a resumed training run must see exactly the
//! batches an uninterrupted run would have seen at the same step, with no generator state to save,
//! and batch `step` must not depend on how many batches were drawn before it.
//!
//! The mixing function is the SplitMix64 finalizer (Steele, Lea, Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014): `z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
//! z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31`, a bijection on u64 with full avalanche.
//! Each key word is absorbed as `h = mix(h + GOLDEN ^ word)`. Integers in `[0, m)` come from
//! Lemire's multiply-shift with rejection ("Fast random integer generation in an interval",
//! 2019), so they are exactly uniform. The stream is fixed by this file: changing it changes every
//! batch of every experiment, so don't.

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64 finalizer.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fold `words` into one 64-bit key.
pub fn hash_words(words: &[u64]) -> u64 {
    words
        .iter()
        .fold(0u64, |h, &w| mix64(h.wrapping_add(GOLDEN) ^ w))
}

/// An exactly uniform integer in `[0, m)` determined by `key`; `m` must be at least 1.
pub fn uniform_below(key: u64, m: u64) -> u64 {
    debug_assert!(m > 0);
    // Reject the lowest (2^64 mod m) products so every result has the same number of preimages.
    let threshold = m.wrapping_neg() % m;
    let mut attempt = 0u64;
    loop {
        let x = hash_words(&[key, attempt]);
        let wide = u128::from(x) * u128::from(m);
        if (wide as u64) >= threshold {
            return (wide >> 64) as u64;
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix64_reference_values() {
        // SplitMix64 outputs for seed 0: state += GOLDEN, then mix (published reference sequence).
        assert_eq!(mix64(GOLDEN), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix64(GOLDEN.wrapping_mul(2)), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn uniform_below_stays_in_range_and_covers_it() {
        let mut seen = [0u32; 7];
        for i in 0..7000u64 {
            let v = uniform_below(hash_words(&[1, i]), 7);
            seen[v as usize] += 1;
        }
        // Each of 7 values expected 1000 times; a binomial sd is ~29, so 850..1150 is > 5 sd.
        assert!(seen.iter().all(|&c| (850..1150).contains(&c)), "{seen:?}");
        assert_eq!(uniform_below(12345, 1), 0);
    }
}
