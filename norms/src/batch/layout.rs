//! Tensor layouts of the batch forms and the strided walk over one channel.
//!
//! Both layouts are row-major. A channel `ch` of `Nchw { n, c, h, w }` is `n` contiguous
//! blocks of `h * w` elements, `c * h * w` apart, starting at `ch * h * w`; `Nc { n, c }` is the
//! same with `h * w = 1`. A channel's statistics run over all `n * h * w` of its elements.

use crate::accum::Real;
use crate::element::Element;
use crate::error::{NormError, Result};

/// The layout of a batch-form input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Layout {
    /// `[n, c]`: a batch of `n` vectors of `c` features (`BatchNorm1d` on 2-d input).
    Nc { n: usize, c: usize },
    /// `[n, c, h, w]`: a batch of `n` images of `c` channels (`BatchNorm2d`).
    Nchw { n: usize, c: usize, h: usize, w: usize },
}

impl Layout {
    /// Every dimension must be at least 1 and the element count must fit in `usize`.
    pub fn validate(&self) -> Result<()> {
        let dims: &[(&'static str, usize)] = match *self {
            Layout::Nc { n, c } => &[("layout dimension n (batch)", n), ("layout dimension c (channels)", c)],
            Layout::Nchw { n, c, h, w } => &[
                ("layout dimension n (batch)", n),
                ("layout dimension c (channels)", c),
                ("layout dimension h (height)", h),
                ("layout dimension w (width)", w),
            ],
        };
        for &(what, value) in dims {
            if value == 0 {
                return Err(NormError::Empty { what, value });
            }
        }
        let total = dims.iter().try_fold(1usize, |acc, &(_, v)| acc.checked_mul(v));
        if total.is_none() {
            return Err(NormError::Shape(format!("{self:?} has more elements than fit in usize")));
        }
        Ok(())
    }

    /// Batch size `n`.
    pub fn batch(&self) -> usize {
        match *self {
            Layout::Nc { n, .. } | Layout::Nchw { n, .. } => n,
        }
    }

    /// Number of channels `c` (the length of the affine parameters and running statistics).
    pub fn channels(&self) -> usize {
        match *self {
            Layout::Nc { c, .. } | Layout::Nchw { c, .. } => c,
        }
    }

    /// Contiguous elements of one channel in one sample: `h * w` (1 for `Nc`).
    pub fn spatial(&self) -> usize {
        match *self {
            Layout::Nc { .. } => 1,
            Layout::Nchw { h, w, .. } => h * w,
        }
    }

    /// Elements each channel's statistics run over: `n * h * w`.
    pub fn per_channel(&self) -> usize {
        self.batch() * self.spatial()
    }

    /// Total number of elements (of a validated layout: `validate` rejects a product that
    /// overflows `usize`).
    pub fn len(&self) -> usize {
        self.per_channel() * self.channels()
    }

    /// Always false for a validated layout (every dimension is at least 1).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offsets of the blocks of channel `ch`: `(first, stride, block)`.
    fn blocks(&self, ch: usize) -> (usize, usize, usize) {
        let s = self.spatial();
        (ch * s, self.channels() * s, s)
    }

    /// Widen channel `ch` of `src` into `dst` (length `per_channel`), in (n, h, w) order.
    pub(crate) fn gather<T: Element, A: Real>(&self, ch: usize, src: &[T], dst: &mut [A]) {
        let (first, stride, s) = self.blocks(ch);
        for (i, d) in dst.chunks_mut(s).enumerate() {
            let o = first + i * stride;
            A::load(&src[o..o + s], d);
        }
    }

    /// Count the non-finite elements of channel `ch` of `src` (in the storage type).
    pub(crate) fn count_nonfinite<T: Element>(&self, ch: usize, src: &[T]) -> u64 {
        let (first, stride, s) = self.blocks(ch);
        (0..self.batch()).map(|i| crate::row::count_nonfinite(&src[first + i * stride..][..s])).sum()
    }

    /// Write channel-contiguous results (`parts[ch]` of length `per_channel`, in (n, h, w)
    /// order) back into the layout. Parallel over samples; each element is copied once.
    pub(crate) fn scatter<T: Copy + Send + Sync>(&self, parts: &[Vec<T>], dst: &mut [T]) {
        use rayon::prelude::*;
        let s = self.spatial();
        dst.par_chunks_mut(self.channels() * s).enumerate().for_each(|(i, sample)| {
            for (d, p) in sample.chunks_mut(s).zip(parts) {
                d.copy_from_slice(&p[i * s..(i + 1) * s]);
            }
        });
    }
}
