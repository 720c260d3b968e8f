//! Eval mode: an elementwise affine map with fixed (running) statistics.
//!
//! With the frozen channel statistics `mu_c` and `s_c = 1 / D_c` (see [`super::running`]):
//!
//! ```text
//! y  = ((x - mu_c) * s_c) * γ_c + β_c
//! dx = (dy * γ_c) * s_c             (nothing flows through the statistics)
//! dγ_c = Σ dy · x̂,   dβ_c = Σ dy,   x̂ = (x - mu_c) * s_c
//! ```
//!
//! Elements are independent here, so a non-finite input makes only its own output non-finite
//! (it is counted in `nonfinite_in`); no channel is poisoned.

use rayon::prelude::*;

use super::channel::{affine, store, unscale, ChannelScratch};
use super::layout::Layout;
use crate::accum::Real;
use crate::counters::Counters;
use crate::element::Element;
use crate::error::Result;
use crate::lanes;
use crate::row::{count_nonfinite, ctx, normalize, widen, RowStats};
use crate::spec::NormSpec;

#[allow(clippy::too_many_arguments)]
pub(super) fn forward<T: Element, A: Real>(
    spec: &NormSpec,
    layout: &Layout,
    x: &[T],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    frozen: &[RowStats],
) -> Result<Counters> {
    let m = layout.per_channel();
    let ctx = ctx::<A>(spec, m)?;
    let w = widen::<T, A>(weight);
    let b = widen::<T, A>(bias);
    let results: Vec<(Counters, Vec<T>)> = (0..layout.channels())
        .into_par_iter()
        .map_init(
            || ChannelScratch::<A>::new(m),
            |scr, ch| {
                let buf = &mut scr.row.a[..m];
                layout.gather(ch, x, buf);
                normalize(&ctx, buf, &frozen[ch]);
                affine(buf, w.as_ref().map(|w| w[ch]), b.as_ref().map(|b| b[ch]));
                let out = store::<T, A>(buf);
                let c = Counters {
                    nonfinite_in: layout.count_nonfinite(ch, x),
                    acc_overflow: 0,
                    nonfinite_out: count_nonfinite(&out),
                };
                (c, out)
            },
        )
        .collect();
    let mut counters = Counters::default();
    let mut parts = Vec::with_capacity(results.len());
    for (c, out) in results {
        counters += c;
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
    frozen: &[RowStats],
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
                let st = &frozen[ch];
                let (xb, g) = (&mut scr.row.a[..m], &mut scr.row.b[..m]);
                layout.gather(ch, dy, g);
                let db = want_db.then(|| lanes::sum_map(g, |v| v));
                let dw = want_dw.then(|| {
                    layout.gather(ch, x, xb);
                    unscale(xb, st.exp2);
                    normalize(&ctx, xb, st);
                    lanes::sum_zip(g, xb, |d, xh| d * xh)
                });
                let s = A::from_f64(st.rscale);
                affine(g, w.as_ref().map(|w| w[ch]), None);
                g.iter_mut().for_each(|v| *v = *v * s);
                unscale(g, st.exp2);
                (store::<T, A>(g), dw, db)
            },
        )
        .collect();
    Ok(super::train::finish(layout, results, dx, dweight, dbias))
}
