//! Deterministic benchmark inputs: standard normal samples, identical for every run, thread
//! count and dtype (generated in f64, rounded once into the storage type).

use normlab_norms::Element;
use rayon::prelude::*;

/// Elements generated per parallel block; each block has its own seed, so the result does
/// not depend on how rayon splits the work.
const BLOCK: usize = 1 << 16;

/// SplitMix64: a small, well-mixed 64-bit generator (Steele, Lea, Flood 2014).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in (0, 1]: 53 random bits, never 0 (so `ln` below is finite).
fn uniform(state: &mut u64) -> f64 {
    ((splitmix64(state) >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `len` samples of `mean + std * N(0, 1)` (Box-Muller), rounded into `T`.
pub fn gaussian<T: Element>(len: usize, seed: u64, mean: f64, std: f64) -> Vec<T> {
    let mut out = vec![T::default(); len];
    out.par_chunks_mut(BLOCK).enumerate().for_each(|(b, chunk)| {
        let mut s = seed ^ (b as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        for pair in chunk.chunks_mut(2) {
            let r = (-2.0 * uniform(&mut s).ln()).sqrt();
            let t = std::f64::consts::TAU * uniform(&mut s);
            pair[0] = T::from_f64(mean + std * r * t.cos());
            if let Some(v) = pair.get_mut(1) {
                *v = T::from_f64(mean + std * r * t.sin());
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_roughly_standard() {
        let a: Vec<f32> = gaussian(300_001, 7, 0.0, 1.0);
        let b: Vec<f32> = gaussian(300_001, 7, 0.0, 1.0);
        assert_eq!(a, b);
        let c: Vec<f32> = gaussian(300_001, 8, 0.0, 1.0);
        assert_ne!(a, c);
        let n = a.len() as f64;
        let mean = a.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = a.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "var {var}");
        assert!(a.iter().all(|v| v.is_finite()));
    }
}
