//! Typed errors of the data pipeline: every variant names the value or path at fault, so a bad
//! config or a damaged corpus file reads as a sentence, never as a panic.

use std::path::PathBuf;

/// Everything that can go wrong between a corpus file on disk and a batch of token tensors.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The corpus file does not exist.
    #[error("corpus file not found: {}", path.display())]
    NotFound { path: PathBuf },

    /// The corpus (or its checksum file) exists but could not be read or decompressed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The decoded text does not hash to the value in the `.sha256` file beside it.
    #[error(
        "checksum mismatch for {}: {} lists sha256 {expected}, the text hashes to {actual}",
        path.display(),
        checksum_file.display()
    )]
    ChecksumMismatch {
        path: PathBuf,
        checksum_file: PathBuf,
        expected: String,
        actual: String,
    },

    /// The `.sha256` file does not start with 64 hex digits.
    #[error("malformed checksum file {}: expected 64 hex digits first, found {found:?}", path.display())]
    BadChecksumFile { path: PathBuf, found: String },

    /// The corpus decodes to zero bytes.
    #[error("corpus {} is empty", path.display())]
    EmptyCorpus { path: PathBuf },

    /// The validation fraction must lie strictly between 0 and 1.
    #[error("validation fraction {fraction} is not in (0, 1)")]
    BadValFraction { fraction: f64 },

    /// The split would leave the train or validation part with no tokens.
    #[error(
        "corpus of {len} tokens with validation fraction {fraction} leaves the {part} split empty"
    )]
    EmptySplit {
        len: usize,
        fraction: f64,
        part: &'static str,
    },

    /// A batch size of zero was asked for.
    #[error("batch size must be at least 1, got 0")]
    ZeroBatch,

    /// A sequence length of zero was asked for.
    #[error("sequence length must be at least 1, got 0")]
    ZeroSeq,

    /// A window of `seq + 1` tokens does not fit in the split.
    #[error("sequence length {seq} needs {} tokens per window but the {part} split has only {len}", seq + 1)]
    SeqTooLong {
        seq: usize,
        part: &'static str,
        len: usize,
    },

    /// Building the candle tensor failed (e.g. the device could not allocate).
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
}

/// Result of the data pipeline.
pub type Result<T> = std::result::Result<T, DataError>;
