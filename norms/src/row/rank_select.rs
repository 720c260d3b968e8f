//! Branch-free selection among a few non-negative f32 values, for the fused Top-k forward.
//!
//! # Why
//! Top-k's statistic needs the k-th largest of the 16 lane maxima (a threshold) and then the
//! k largest of the few values at or above it. Sorting 16 values, and `select_nth_unstable`
//! plus a sort of about a dozen, are a few hundred unpredictable branches per row: on a
//! 1024-wide row they cost more than reading the row. Ranks computed by comparing every pair
//! are a fixed sequence of vector compares and adds instead.
//!
//! # Why bit patterns
//! The values are magnitudes `|z|` (sign bit clear, never NaN where these are used: the lane
//! maxima skip NaN, and candidates pass an ordered `>=`). For such values the order of the
//! f32 values is the order of their bit patterns, which lie below 2^31: compared as i32 (one
//! instruction per vector on AVX2, which has no unsigned compare), exact and total. Even a
//! NaN (a pattern above infinity's) would only sort first, as `stats::desc_total` sorts it.
//!
//! # The rule
//! The (p+1)-th largest value (with multiplicity) is the smallest value with at most p values
//! strictly above it: every such value is at least the (p+1)-th largest, and the (p+1)-th
//! largest is one. Only "strictly above" counts are needed (m vector compare-and-add steps),
//! and equal values need no tie-break: they are the same bits wherever they land.

/// Bits of non-negative f32 values as i32, ordered as the values.
#[inline(always)]
fn keys<const N: usize>(values: &[f32], pad: i32) -> [i32; N] {
    let mut b = [pad; N];
    for (d, v) in b.iter_mut().zip(values) {
        *d = v.to_bits() as i32;
    }
    b
}

/// For each key, how many of `b[..m]` are strictly above it.
#[inline(always)]
fn above<const N: usize>(b: &[i32; N], m: usize) -> [i32; N] {
    let mut above = [0i32; N];
    for &bj in &b[..m] {
        for i in 0..N {
            above[i] += (bj > b[i]) as i32;
        }
    }
    above
}

/// The smallest key with at most `p` keys strictly above it: the (p+1)-th largest. The minimum
/// is taken as a tree of halves (`v[i] = min(v[i], v[i + w/2])`), which the compiler turns
/// into a few vector minimums; a running minimum would be a serial chain of N steps.
#[inline(always)]
fn nth_from_above<const N: usize>(b: &[i32; N], above: &[i32; N], p: usize) -> i32 {
    debug_assert!(N.is_power_of_two());
    let mut v = [0i32; N];
    for i in 0..N {
        v[i] = if above[i] <= p as i32 { b[i] } else { i32::MAX };
    }
    let mut w = N;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            v[i] = v[i].min(v[i + w]);
        }
    }
    v[0]
}

/// The k-th largest (counted with multiplicity, 1 <= k <= 16) of 16 non-negative values: the
/// same value as the (k - 1)-th entry of the descending sort in `stats::kth_largest_lane_max`.
#[inline(always)]
pub(crate) fn kth_largest_of_16(values: [f32; 16], k: usize) -> f32 {
    debug_assert!((1..=16).contains(&k));
    let b = keys::<16>(&values, 0);
    f32::from_bits(nth_from_above(&b, &above(&b, 16), k - 1) as u32)
}

/// Largest candidate count [`top_k_of_few`] takes.
pub(crate) const FEW: usize = 32;

/// Move the k largest of the `m` non-negative values `a[..m]` (1 <= k <= m <= [`FEW`]) to
/// `a[..k]`, in descending order: the values `stats::top_k_of_candidates` leaves there.
#[inline(always)]
pub(crate) fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
    debug_assert!(1 <= k && k <= m && m <= FEW && m <= a.len());
    if m <= 16 {
        top_k_of_at_most::<16>(a, m, k)
    } else {
        top_k_of_at_most::<FEW>(a, m, k)
    }
}

/// [`top_k_of_few`] for m <= N. The padding keys (-1) are below every value, so they are
/// strictly above none, and have m > p values above them: never chosen.
#[inline(always)]
fn top_k_of_at_most<const N: usize>(a: &mut [f32], m: usize, k: usize) {
    let b = keys::<N>(&a[..m], -1);
    let above = above(&b, m);
    for (p, d) in a[..k].iter_mut().enumerate() {
        *d = f32::from_bits(nth_from_above(&b, &above, p) as u32);
    }
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;
    use crate::row::stats;

    /// A small deterministic generator of magnitudes with many ties (and zeros, subnormals,
    /// infinities): the cases where a rank rule could go wrong. Also used by `simd::tests`.
    pub(crate) fn magnitudes(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                match s % 8 {
                    0 => 0.0,
                    1 => f32::INFINITY,
                    2 => f32::from_bits(1 + (s >> 40) as u32 % 4),
                    3 | 4 => (s >> 32) as u32 as f32 % 5.0,
                    _ => f32::from_bits((s >> 33) as u32 & 0x7F7F_FFFF),
                }
            })
            .collect()
    }

    fn kth_largest_of_16_is_the_sorted_entry() {
        for seed in 0..3000 {
            let v: [f32; 16] = magnitudes(seed, 16).try_into().unwrap();
            for k in 1..=16 {
                let want = stats::kth_largest_lane_max(v, k);
                assert_eq!(kth_largest_of_16(v, k).to_bits(), want.to_bits(), "seed {seed} k {k}: {v:?}");
            }
        }
    }

    fn top_k_of_few_matches_the_selection_and_sort() {
        for seed in 0..3000u64 {
            let m = 1 + seed as usize % FEW;
            let v = magnitudes(seed, m);
            for k in 1..=m {
                let mut got = v.clone();
                top_k_of_few(&mut got, m, k);
                let mut want = v.clone();
                stats::top_k_of_candidates(&mut want, m, k);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got[..k]), bits(&want[..k]), "seed {seed} m {m} k {k}: {v:?}");
            }
        }
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![kth_largest_of_16_is_the_sorted_entry, top_k_of_few_matches_the_selection_and_sort];
}
