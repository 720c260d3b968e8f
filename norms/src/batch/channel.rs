//! Per-channel kernels shared by train and eval mode: scratch memory, the per-channel scalar
//! affine map, and one rounding of a channel's results into storage.

use crate::accum::Real;
use crate::element::Element;
use crate::row::Scratch;

/// Scratch memory of one worker: the row kernel's three buffers (input / gradient / Top-k
/// scratch), a copy of `dy` for the weight gradient, and the Top-k selection mask.
pub(crate) struct ChannelScratch<A> {
    pub row: Scratch<A>,
    pub dy: Vec<A>,
    pub mask: Vec<bool>,
}

impl<A: Real> ChannelScratch<A> {
    pub fn new(m: usize) -> Self {
        ChannelScratch { row: Scratch::new(m), dy: vec![A::zero(); m], mask: vec![false; m] }
    }
}

/// `v <- v * w + b` with the channel's scalar weight and bias. Evaluated as `(v * w) + b`,
/// the same operations in the same order as the row kernel's fused affine, so a channel gives
/// bitwise the result of the row form over the transposed channel with constant `w`, `b`.
#[inline]
pub(crate) fn affine<A: Real>(v: &mut [A], w: Option<A>, b: Option<A>) {
    match (w, b) {
        (None, None) => {}
        (Some(w), None) => v.iter_mut().for_each(|v| *v = *v * w),
        (None, Some(b)) => v.iter_mut().for_each(|v| *v = *v + b),
        (Some(w), Some(b)) => v.iter_mut().for_each(|v| *v = *v * w + b),
    }
}

/// Round a channel's accumulator values once into a fresh storage vector.
pub(crate) fn store<T: Element, A: Real>(v: &[A]) -> Vec<T> {
    let mut out = vec![T::default(); v.len()];
    A::store(v, &mut out);
    out
}

/// Round one accumulator scalar into storage.
pub(crate) fn store1<T: Element, A: Real>(v: A) -> T {
    let mut out = [T::default()];
    A::store(&[v], &mut out);
    out[0]
}

/// Multiply by `2^-e` (undoing the rescue rescale of a channel), a no-op for `e = 0`. Uses the
/// row forms' two-factor scaling: a single factor `2^-e` overflows the accumulator for channels
/// of subnormals (e = -134 in f32).
pub(crate) fn unscale<A: Real>(v: &mut [A], e: i32) {
    if e != 0 {
        crate::row::scale_by_pow2(v, e);
    }
}
