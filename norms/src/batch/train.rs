//! Train mode: each channel is normalized by its own batch statistics, and the backward
//! differentiates through them.
//!
//! A channel is gathered into the accumulator and handled by the row kernels (`row_stats`,
//! `normalize`, `row_backward`), so every numeric rule of the row forms holds per channel:
//! the compensated mean, eps in the accumulator, the overflow rescue, tie rules, NaN rows.
//!
//! # Backward with per-channel affine
//! With `x̂` the normalized channel, `y = γ_c x̂ + β_c` and `g = γ_c dy`, the row formulas
//! (see [`crate::row`]) give `dx` from `g`; the parameter gradients are channel sums:
//!
//! ```text
//! dγ_c = Σ_{n,h,w} dy · x̂        dβ_c = Σ_{n,h,w} dy
//! ```

use rayon::prelude::*;

use super::channel::{affine, store, store1, unscale, ChannelScratch};
use super::layout::Layout;
use crate::accum::Real;
use crate::counters::Counters;
use crate::element::Element;
use crate::error::Result;
use crate::lanes;
use crate::row::{count_nonfinite, ctx, normalize, row_backward, row_stats, widen, RowStats};
use crate::spec::NormSpec;

#[allow(clippy::too_many_arguments)]
pub(super) fn forward<T: Element, A: Real>(
    spec: &NormSpec,
    layout: &Layout,
    x: &[T],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    stats: &mut [RowStats],
) -> Result<Counters> {
    let m = layout.per_channel();
    let ctx = ctx::<A>(spec, m)?;
    let w = widen::<T, A>(weight);
    let b = widen::<T, A>(bias);
    let results: Vec<(Counters, RowStats, Vec<T>)> = (0..layout.channels())
        .into_par_iter()
        .map_init(
            || ChannelScratch::<A>::new(m),
            |scr, ch| {
                let mut c = Counters::default();
                let buf = &mut scr.row.a[..m];
                layout.gather(ch, x, buf);
                let st = row_stats(&ctx, buf, &mut scr.row.c, || layout.count_nonfinite(ch, x), &mut c);
                normalize(&ctx, buf, &st);
                affine(buf, w.as_ref().map(|w| w[ch]), b.as_ref().map(|b| b[ch]));
                let out = store::<T, A>(buf);
                c.nonfinite_out += count_nonfinite(&out);
                (c, st, out)
            },
        )
        .collect();
    let mut counters = Counters::default();
    let mut parts = Vec::with_capacity(results.len());
    for ((c, st, out), slot) in results.into_iter().zip(stats.iter_mut()) {
        counters += c;
        *slot = st;
        parts.push(out);
    }
    layout.scatter(&parts, y);
    Ok(counters)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn backward<T: Element, A: Real>(
    spec: &NormSpec,
    layout: &Layout,
    x: &[T],
    dy: &[T],
    stats: &[RowStats],
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    let m = layout.per_channel();
    let ctx = ctx::<A>(spec, m)?;
    let w = widen::<T, A>(weight);
    let (want_dw, want_db) = (dweight.is_some(), dbias.is_some());
    let results: Vec<(Vec<T>, Option<A>, Option<A>)> = (0..layout.channels())
        .into_par_iter()
        .map_init(
            || ChannelScratch::<A>::new(m),
            |scr, ch| {
                let st = &stats[ch];
                let (xb, g) = (&mut scr.row.a[..m], &mut scr.row.b[..m]);
                layout.gather(ch, x, xb);
                layout.gather(ch, dy, g);
                let db = want_db.then(|| lanes::sum_map(g, |v| v));
                if want_dw {
                    scr.dy.copy_from_slice(g);
                }
                affine(g, w.as_ref().map(|w| w[ch]), None);
                // Leaves x̂ in `xb` and dx (before undoing the rescale) in `g`.
                row_backward(&ctx, xb, g, st, None, None, None, &mut scr.row.c, &mut scr.mask);
                let dw = want_dw.then(|| lanes::sum_zip(&scr.dy, xb, |d, xh| d * xh));
                unscale(g, st.exp2);
                (store::<T, A>(g), dw, db)
            },
        )
        .collect();
    Ok(finish(layout, results, dx, dweight, dbias))
}

/// Scatter the per-channel `dx` and store the per-channel parameter gradients (one rounding
/// each), counting non-finite results. Shared with eval mode.
pub(super) fn finish<T: Element, A: Real>(
    layout: &Layout,
    results: Vec<(Vec<T>, Option<A>, Option<A>)>,
    dx: &mut [T],
    mut dweight: Option<&mut [T]>,
    mut dbias: Option<&mut [T]>,
) -> Counters {
    let mut counters = Counters::default();
    let mut parts = Vec::with_capacity(results.len());
    for (ch, (g, dw, db)) in results.into_iter().enumerate() {
        counters.nonfinite_out += count_nonfinite(&g);
        parts.push(g);
        if let (Some(out), Some(v)) = (dweight.as_deref_mut(), dw) {
            out[ch] = store1::<T, A>(v);
            counters.nonfinite_out += u64::from(!out[ch].is_finite());
        }
        if let (Some(out), Some(v)) = (dbias.as_deref_mut(), db) {
            out[ch] = store1::<T, A>(v);
            counters.nonfinite_out += u64::from(!out[ch].is_finite());
        }
    }
    layout.scatter(&parts, dx);
    counters
}
