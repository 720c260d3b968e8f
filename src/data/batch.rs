//! Batches of token windows: random windows for training, consecutive windows for evaluation.
//!
//! A window is `seq + 1` consecutive tokens of one part of a [`Split`]; its first `seq` tokens are
//! the inputs and its last `seq` tokens the targets (next-token prediction).
//!
//! [`BatchSampler`]: row `i` of batch `step` starts at offset
//! `uniform_below(hash(seed, part, step, i), len - seq)` inside the part (see [`super::rng`]), so
//! a batch is a pure function of `(corpus, split, seed, step)`: a resumed run sees the same
//! batches as an uninterrupted one, and batch `step` costs the same to produce whatever came before.
//!
//! [`EvalWindows`]: the part cut into consecutive windows starting at `0, seq, 2 seq, ...` (each
//! window shares its last token with the next one's first, so every token after the first is a
//! target exactly once), grouped `batch` at a time; the same every time, for validation losses
//! comparable across steps and runs.

use std::sync::Arc;

use candle_core::{Device, Tensor};

use super::error::{DataError, Result};
use super::rng::{hash_words, uniform_below};
use super::split::{Part, Split};

/// One batch as candle tensors (dtype u32, the byte values).
#[derive(Clone, Debug)]
pub struct Batch {
    /// `[batch, seq]`: window tokens `0 .. seq`.
    pub inputs: Tensor,
    /// `[batch, seq]`: window tokens `1 .. seq + 1`.
    pub targets: Tensor,
}

/// Validate `batch` and `seq` against a part of `len` tokens.
fn check_shape(batch: usize, seq: usize, part: Part, len: usize) -> Result<()> {
    if batch == 0 {
        return Err(DataError::ZeroBatch);
    }
    if seq == 0 {
        return Err(DataError::ZeroSeq);
    }
    if seq >= len {
        return Err(DataError::SeqTooLong {
            seq,
            part: part.name(),
            len,
        });
    }
    Ok(())
}

/// Copy the windows starting at `starts` (offsets into `data`) into a flat `[rows, seq + 1]` vector.
fn gather(data: &[u8], starts: &[usize], seq: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(starts.len() * (seq + 1));
    for &s in starts {
        out.extend(data[s..s + seq + 1].iter().map(|&b| u32::from(b)));
    }
    out
}

/// Flat `[rows, seq + 1]` windows as `[rows, seq]` inputs and targets.
fn to_batch(flat: Vec<u32>, rows: usize, seq: usize, device: &Device) -> Result<Batch> {
    let windows = Tensor::from_vec(flat, (rows, seq + 1), device)?;
    let inputs = windows.narrow(1, 0, seq)?.contiguous()?;
    let targets = windows.narrow(1, 1, seq)?.contiguous()?;
    Ok(Batch { inputs, targets })
}

/// Random windows from one part of a split, determined by a seed and a step index.
#[derive(Clone, Debug)]
pub struct BatchSampler {
    bytes: Arc<[u8]>,
    start: usize,
    len: usize,
    part: Part,
    batch: usize,
    seq: usize,
    seed: u64,
}

impl BatchSampler {
    /// Sampler over `part` of `split` yielding `batch` windows of `seq + 1` tokens.
    ///
    /// Errors: [`DataError::ZeroBatch`], [`DataError::ZeroSeq`], and [`DataError::SeqTooLong`]
    /// when `seq + 1` tokens do not fit in the part.
    pub fn new(split: &Split, part: Part, batch: usize, seq: usize, seed: u64) -> Result<Self> {
        let range = split.range(part);
        check_shape(batch, seq, part, range.len())?;
        Ok(Self {
            bytes: split.shared_bytes(),
            start: range.start,
            len: range.len(),
            part,
            batch,
            seq,
            seed,
        })
    }

    /// Rows per batch.
    pub fn batch_size(&self) -> usize {
        self.batch
    }

    /// Input/target length.
    pub fn seq_len(&self) -> usize {
        self.seq
    }

    /// The part this sampler draws from.
    pub fn part(&self) -> Part {
        self.part
    }

    /// Start of each window of batch `step`, relative to the start of the part.
    pub fn offsets(&self, step: u64) -> Vec<usize> {
        // Valid starts are 0 ..= len - seq - 1: `len - seq` of them (>= 1 by construction).
        let starts = (self.len - self.seq) as u64;
        (0..self.batch as u64)
            .map(|row| {
                let key = hash_words(&[self.seed, self.part.stream(), step, row]);
                uniform_below(key, starts) as usize
            })
            .collect()
    }

    /// Batch `step` as a flat row-major `[batch, seq + 1]` vector of tokens.
    pub fn windows(&self, step: u64) -> Vec<u32> {
        let data = &self.bytes[self.start..self.start + self.len];
        gather(data, &self.offsets(step), self.seq)
    }

    /// Batch `step` as one `[batch, seq + 1]` u32 tensor on `device`.
    pub fn windows_tensor(&self, step: u64, device: &Device) -> Result<Tensor> {
        Ok(Tensor::from_vec(
            self.windows(step),
            (self.batch, self.seq + 1),
            device,
        )?)
    }

    /// Batch `step` as `[batch, seq]` inputs and targets on `device`.
    pub fn batch(&self, step: u64, device: &Device) -> Result<Batch> {
        to_batch(self.windows(step), self.batch, self.seq, device)
    }
}

/// Consecutive windows covering one part of a split, `batch` at a time, with no randomness.
#[derive(Clone, Debug)]
pub struct EvalWindows {
    bytes: Arc<[u8]>,
    start: usize,
    len: usize,
    batch: usize,
    seq: usize,
}

impl EvalWindows {
    /// Evaluation windows over `part` of `split`; same errors as [`BatchSampler::new`].
    pub fn new(split: &Split, part: Part, batch: usize, seq: usize) -> Result<Self> {
        let range = split.range(part);
        check_shape(batch, seq, part, range.len())?;
        Ok(Self {
            bytes: split.shared_bytes(),
            start: range.start,
            len: range.len(),
            batch,
            seq,
        })
    }

    /// Number of whole windows: `floor((len - 1) / seq)`.
    pub fn num_windows(&self) -> usize {
        (self.len - 1) / self.seq
    }

    /// Number of batches; the last one may hold fewer than `batch` rows.
    pub fn num_batches(&self) -> usize {
        self.num_windows().div_ceil(self.batch)
    }

    /// Window starts (relative to the part) of batch `index`, empty past the end.
    pub fn offsets(&self, index: usize) -> Vec<usize> {
        let first = index.saturating_mul(self.batch);
        let last = first.saturating_add(self.batch).min(self.num_windows());
        (first..last).map(|w| w * self.seq).collect()
    }

    /// Batch `index` as a flat `[rows, seq + 1]` vector (rows <= batch), `None` past the end.
    pub fn windows(&self, index: usize) -> Option<Vec<u32>> {
        let starts = self.offsets(index);
        if starts.is_empty() {
            return None;
        }
        let data = &self.bytes[self.start..self.start + self.len];
        Some(gather(data, &starts, self.seq))
    }

    /// Batch `index` as `[rows, seq]` inputs and targets on `device`, `None` past the end.
    pub fn batch(&self, index: usize, device: &Device) -> Result<Option<Batch>> {
        let Some(flat) = self.windows(index) else {
            return Ok(None);
        };
        let rows = flat.len() / (self.seq + 1);
        Ok(Some(to_batch(flat, rows, self.seq, device)?))
    }
}
