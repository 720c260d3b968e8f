//! Unigram (order-0) entropy of a byte corpus.
//!
//! With `c_b` the count of byte `b` and `N = sum c_b`, the empirical distribution is
//! `p_b = c_b / N` and
//!
//! ```text
//! H = - sum_{b : c_b > 0} p_b * ln(p_b)      (nats),      H_bits = H / ln 2.
//! ```
//!
//! This is the cross-entropy a model reaches by predicting only byte frequencies, so a trained
//! byte-level model's validation loss (mean cross-entropy in nats) must go below `nats`.
//! Counts are exact integers; the sum runs in f64 in byte order, so the result is deterministic.

/// Order-0 entropy of a byte sequence and the counts it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UnigramEntropy {
    /// Entropy in bits per byte.
    pub bits: f64,
    /// Entropy in nats per byte (the unit of a cross-entropy loss with natural log).
    pub nats: f64,
    /// Number of distinct byte values present.
    pub distinct: usize,
    /// Number of bytes counted.
    pub tokens: usize,
}

/// How often each byte value occurs in `bytes`.
pub fn byte_counts(bytes: &[u8]) -> [u64; 256] {
    let mut counts = [0u64; 256];
    for &b in bytes {
        counts[usize::from(b)] += 1;
    }
    counts
}

/// Unigram entropy of `bytes` (formula in the module doc); `None` for an empty slice, whose
/// distribution is undefined.
pub fn unigram_entropy(bytes: &[u8]) -> Option<UnigramEntropy> {
    if bytes.is_empty() {
        return None;
    }
    let counts = byte_counts(bytes);
    let n = bytes.len() as f64;
    let mut nats = 0.0f64;
    let mut distinct = 0;
    for &c in counts.iter().filter(|&&c| c > 0) {
        let p = c as f64 / n;
        nats -= p * p.ln();
        distinct += 1;
    }
    // A one-symbol corpus gives -1 * ln 1 = -0.0; report +0.
    let nats = nats.max(0.0);
    Some(UnigramEntropy {
        bits: nats / std::f64::consts::LN_2,
        nats,
        distinct,
        tokens: bytes.len(),
    })
}
