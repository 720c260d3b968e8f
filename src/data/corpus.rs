//! Loading a corpus file: plain or gzip'd text, checked against the `.sha256` beside it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checksum;
use super::entropy::{unigram_entropy, UnigramEntropy};
use super::error::{DataError, Result};

/// The committed default corpus, relative to the repository root (see `experiments/corpus/`).
pub const DEFAULT_CORPUS: &str = "experiments/corpus/shakespeare.txt.gz";

/// Absolute path of [`DEFAULT_CORPUS`] in this source tree (the crate root is the repository root).
pub fn default_corpus_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_CORPUS)
}

/// First two bytes of every gzip member (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A whole corpus in memory as bytes (byte-level tokens are the bytes themselves).
#[derive(Clone, Debug)]
pub struct Corpus {
    path: PathBuf,
    bytes: Arc<[u8]>,
    sha256: String,
    checksum_verified: bool,
}

impl Corpus {
    /// Read `path`, gunzip it if it starts with the gzip magic (whatever its extension), and
    /// verify the text against the checksum file beside it when there is one.
    ///
    /// Errors: [`DataError::NotFound`] naming the path, [`DataError::Io`] for unreadable or
    /// corrupt gzip data, [`DataError::ChecksumMismatch`] naming both hashes,
    /// [`DataError::EmptyCorpus`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let raw = std::fs::read(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => DataError::NotFound {
                path: path.to_path_buf(),
            },
            _ => DataError::Io {
                path: path.to_path_buf(),
                source,
            },
        })?;
        let bytes = if raw.starts_with(&GZIP_MAGIC) {
            let mut text = Vec::with_capacity(raw.len() * 3);
            flate2::read::MultiGzDecoder::new(raw.as_slice())
                .read_to_end(&mut text)
                .map_err(|source| DataError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            text
        } else {
            raw
        };
        if bytes.is_empty() {
            return Err(DataError::EmptyCorpus {
                path: path.to_path_buf(),
            });
        }
        let verified = checksum::verify_beside(path, &bytes)?;
        let sha256 = verified
            .clone()
            .unwrap_or_else(|| checksum::sha256_hex(&bytes));
        Ok(Self {
            path: path.to_path_buf(),
            bytes: bytes.into(),
            sha256,
            checksum_verified: verified.is_some(),
        })
    }

    /// The committed default corpus ([`default_corpus_path`]), checksum verified.
    pub fn load_default() -> Result<Self> {
        Self::load(default_corpus_path())
    }

    /// A corpus from bytes already in memory (tests, generated text); `name` stands in for the
    /// path in errors. No checksum to verify.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let path = name.into();
        let bytes: Vec<u8> = bytes.into();
        if bytes.is_empty() {
            return Err(DataError::EmptyCorpus { path });
        }
        let sha256 = checksum::sha256_hex(&bytes);
        Ok(Self {
            path,
            bytes: bytes.into(),
            sha256,
            checksum_verified: false,
        })
    }

    /// Where the corpus came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text as bytes (= the byte-level tokens).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Shared handle to the bytes, for splits and samplers without copying.
    pub(crate) fn shared_bytes(&self) -> Arc<[u8]> {
        Arc::clone(&self.bytes)
    }

    /// Number of tokens (bytes); never zero.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: an empty corpus is an error at load time.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Lower-case hex sha256 of the uncompressed text.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Whether a checksum file was found beside the corpus and matched.
    pub fn checksum_verified(&self) -> bool {
        self.checksum_verified
    }

    /// Unigram entropy of the whole corpus (see [`super::entropy`]).
    pub fn unigram_entropy(&self) -> UnigramEntropy {
        unigram_entropy(&self.bytes).expect("a corpus is never empty")
    }
}
