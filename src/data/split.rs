//! Deterministic train/validation split: the validation part is the *tail* of the corpus.
//!
//! With `N` tokens and validation fraction `f` in (0, 1):
//!
//! ```text
//! n_val = ceil(N * f),   n_train = N - n_val,   train = tokens[0 .. n_train],   val = tokens[n_train .. N].
//! ```
//!
//! Why the tail and not a seeded shuffle of documents: the corpus files are built from documents in
//! sorted order (experiments/corpus/build.py), so the tail is a block of whole later documents plus
//! at most one cut document, with no seed needed and no text shared between the parts. For the
//! default Shakespeare corpus and `f = 0.1` the validation part is the last 505,728 bytes (most of
//! *Troilus and Cressida* to the end of *The Winter's Tale*); for the State of the Union corpus it
//! is the most recent addresses. Windows are sampled inside one part, never across the boundary.

use std::ops::Range;
use std::sync::Arc;

use super::corpus::Corpus;
use super::entropy::{unigram_entropy, UnigramEntropy};
use super::error::{DataError, Result};

/// Which part of a [`Split`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// The first `n_train` tokens.
    Train,
    /// The last `n_val` tokens.
    Val,
}

impl Part {
    /// "train" or "val", for messages.
    pub fn name(self) -> &'static str {
        match self {
            Part::Train => "train",
            Part::Val => "val",
        }
    }

    /// A distinct word for the random stream, so train and val draws are independent.
    pub(crate) fn stream(self) -> u64 {
        match self {
            Part::Train => 0x74_72_61_69_6e, // "train" in ASCII
            Part::Val => 0x76_61_6c,         // "val"
        }
    }
}

/// A corpus cut into train and validation parts (rule in the module doc).
#[derive(Clone, Debug)]
pub struct Split {
    bytes: Arc<[u8]>,
    n_train: usize,
    val_fraction: f64,
}

impl Split {
    /// Split `corpus` keeping the last `val_fraction` of it (rounded up to whole tokens) for
    /// validation. Errors: a fraction outside (0, 1) or not finite, or a part left empty.
    pub fn new(corpus: &Corpus, val_fraction: f64) -> Result<Self> {
        if !(val_fraction > 0.0 && val_fraction < 1.0) {
            return Err(DataError::BadValFraction {
                fraction: val_fraction,
            });
        }
        let len = corpus.len();
        // ceil(N * f) in f64: exact for any N below 2^53, far beyond any corpus held in memory.
        let n_val = ((len as f64) * val_fraction).ceil() as usize;
        let n_val = n_val.min(len);
        let n_train = len - n_val;
        if n_train == 0 {
            return Err(DataError::EmptySplit {
                len,
                fraction: val_fraction,
                part: "train",
            });
        }
        Ok(Self {
            bytes: corpus.shared_bytes(),
            n_train,
            val_fraction,
        })
    }

    /// The validation fraction this split was made with.
    pub fn val_fraction(&self) -> f64 {
        self.val_fraction
    }

    /// Token index range of `part` in the corpus.
    pub fn range(&self, part: Part) -> Range<usize> {
        match part {
            Part::Train => 0..self.n_train,
            Part::Val => self.n_train..self.bytes.len(),
        }
    }

    /// Number of tokens in `part`.
    pub fn len(&self, part: Part) -> usize {
        self.range(part).len()
    }

    /// The tokens of `part` as bytes.
    pub fn bytes(&self, part: Part) -> &[u8] {
        &self.bytes[self.range(part)]
    }

    /// Unigram entropy of `part` alone.
    pub fn unigram_entropy(&self, part: Part) -> UnigramEntropy {
        unigram_entropy(self.bytes(part)).expect("both parts are non-empty by construction")
    }

    pub(crate) fn shared_bytes(&self) -> Arc<[u8]> {
        Arc::clone(&self.bytes)
    }
}
