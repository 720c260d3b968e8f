//! Mean-only batch norm ("Norm matters" 3.4, `MeanBN` / `MeanBatchNorm2d`): the layer that
//! follows a bounded-weight-norm convolution.
//!
//! ```text
//! train:  y = x - mu_c + β_c          mu_c = mean of channel c over N, H, W
//!         dx = dy - mean_c(dy)        (the gradient through mu_c)
//! eval:   y = x - running_mean_c + β_c,   dx = dy
//! both:   dβ_c = Σ_{n,h,w} dy
//! ```
//!
//! There is no variance division and no γ. The channel mean is the row kernels' compensated
//! two-step mean (`hi = Σx/m`, `lo = Σ(x - hi)/m`, `x - mu = (x - hi) - lo`) with the same
//! overflow rescue and NaN rule: it is computed by the L1 statistics pass (eps = 1, C = 1, so
//! its scale is always finite and only its mean is used). Running statistics update only
//! `mean` (either [`super::Convention`]).
//!
//! ```
//! use normlab_norms::batch::{mean_only, Layout, Mode, RunningStats};
//! use normlab_norms::Accum;
//! let layout = Layout::Nc { n: 2, c: 2 };
//! let x = [1.0f32, 10.0, 3.0, 20.0];
//! let mut y = [0.0f32; 4];
//! let mut run = RunningStats::new(2);
//! mean_only::forward(Accum::F32, layout, &x, Some(&[0.5, 0.0]), &mut y, Mode::Train, Some(&mut run)).unwrap();
//! assert_eq!(y, [-0.5, -5.0, 1.5, 5.0]);
//! assert_eq!(run.mean, vec![0.2, 1.5]); // 0.9 * 0 + 0.1 * batch mean
//! ```

use rayon::prelude::*;

use super::channel::{affine, store, store1, ChannelScratch};
use super::layout::Layout;
use super::running::RunningStats;
use super::Mode;
use crate::accum::{Accum, Real};
use crate::counters::Counters;
use crate::element::Element;
use crate::error::Result;
use crate::lanes;
use crate::row::{check_len, check_opt_len, count_nonfinite, ctx, normalize, row_stats, widen, RowStats};
use crate::spec::{ConstMode, NormSpec};

/// Forward of mean-only batch norm. `bias` (β) has one value per channel. In train mode the
/// batch means update `running` when given; eval mode requires `running`.
pub fn forward<T: Element>(
    accum: Accum,
    layout: Layout,
    x: &[T],
    bias: Option<&[T]>,
    y: &mut [T],
    mode: Mode,
    running: Option<&mut RunningStats>,
) -> Result<Counters> {
    // Compiled in this crate for each storage type (crate::compiled).
    T::mean_only_forward(accum, layout, x, bias, y, mode, running)
}

/// [`forward`]'s body, which [`crate::compiled`] instantiates for each storage type.
pub(crate) fn forward_generic<T: Element>(
    accum: Accum,
    layout: Layout,
    x: &[T],
    bias: Option<&[T]>,
    y: &mut [T],
    mode: Mode,
    running: Option<&mut RunningStats>,
) -> Result<Counters> {
    layout.validate()?;
    let c = layout.channels();
    check_len("input", layout.len(), x.len())?;
    check_len("output", layout.len(), y.len())?;
    check_opt_len("bias", c, bias)?;
    if let Some(r) = running.as_deref() {
        r.validate(c)?;
    }
    match mode {
        Mode::Train => {
            let (counters, means) = crate::with_accum!(accum, A => train_forward::<T, A>(&layout, x, bias, y))?;
            if let Some(r) = running {
                r.update_mean(&means);
            }
            Ok(counters)
        }
        Mode::Eval => {
            let r = running.ok_or_else(super::eval_needs_running)?;
            Ok(crate::with_accum!(accum, A => eval_forward::<T, A>(&layout, x, bias, y, &r.mean)))
        }
    }
}

/// Backward of mean-only batch norm (it needs only `dy`): `dx` and optionally `dβ`.
pub fn backward<T: Element>(
    accum: Accum,
    layout: Layout,
    dy: &[T],
    mode: Mode,
    dx: &mut [T],
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    // Compiled in this crate for each storage type (crate::compiled).
    T::mean_only_backward(accum, layout, dy, mode, dx, dbias)
}

/// [`backward`]'s body, which [`crate::compiled`] instantiates for each storage type.
pub(crate) fn backward_generic<T: Element>(
    accum: Accum,
    layout: Layout,
    dy: &[T],
    mode: Mode,
    dx: &mut [T],
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    layout.validate()?;
    check_len("dy", layout.len(), dy.len())?;
    check_len("dx", layout.len(), dx.len())?;
    check_opt_len("dbias", layout.channels(), dbias.as_deref())?;
    Ok(crate::with_accum!(accum, A => backward_impl::<T, A>(&layout, dy, mode, dx, dbias)))
}

/// The statistics pass used for the mean (module doc).
fn mean_spec() -> NormSpec {
    NormSpec::l1(1.0).with_constant(ConstMode::One)
}

fn train_forward<T: Element, A: Real>(
    layout: &Layout,
    x: &[T],
    bias: Option<&[T]>,
    y: &mut [T],
) -> Result<(Counters, Vec<f64>)> {
    let m = layout.per_channel();
    let ctx = ctx::<A>(&mean_spec(), m)?;
    let b = widen::<T, A>(bias);
    let results: Vec<(Counters, f64, Vec<T>)> = (0..layout.channels())
        .into_par_iter()
        .map_init(
            || ChannelScratch::<A>::new(m),
            |scr, ch| {
                let mut c = Counters::default();
                let buf = &mut scr.row.a[..m];
                layout.gather(ch, x, buf);
                let st = row_stats(&ctx, buf, &mut scr.row.c, || layout.count_nonfinite(ch, x), &mut c);
                // `normalize` with rscale = 2^exp2 computes ((x - hi) - lo) * 2^exp2: the
                // centred value, the rescue rescale undone exactly.
                let centre = RowStats { rscale: A::from_f64(2f64.powi(st.exp2)).to_f64(), ..st };
                normalize(&ctx, buf, &centre);
                affine(buf, None, b.as_ref().map(|b| b[ch]));
                let out = store::<T, A>(buf);
                c.nonfinite_out += count_nonfinite(&out);
                (c, st.mean(), out)
            },
        )
        .collect();
    let mut counters = Counters::default();
    let mut means = Vec::with_capacity(results.len());
    let mut parts = Vec::with_capacity(results.len());
    for (c, mean, out) in results {
        counters += c;
        means.push(mean);
        parts.push(out);
    }
    layout.scatter(&parts, y);
    Ok((counters, means))
}

fn eval_forward<T: Element, A: Real>(layout: &Layout, x: &[T], bias: Option<&[T]>, y: &mut [T], mean: &[f64]) -> Counters {
    let m = layout.per_channel();
    let b = widen::<T, A>(bias);
    let results: Vec<(Counters, Vec<T>)> = (0..layout.channels())
        .into_par_iter()
        .map_init(
            || vec![A::zero(); m],
            |buf, ch| {
                layout.gather(ch, x, buf);
                let mu = A::from_f64(mean[ch]);
                buf.iter_mut().for_each(|v| *v = *v - mu);
                affine(buf, None, b.as_ref().map(|b| b[ch]));
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
    counters
}

fn backward_impl<T: Element, A: Real>(
    layout: &Layout,
    dy: &[T],
    mode: Mode,
    dx: &mut [T],
    dbias: Option<&mut [T]>,
) -> Counters {
    let m = layout.per_channel();
    let inv_m = A::one() / A::from_usize(m);
    let results: Vec<(Vec<T>, A)> = (0..layout.channels())
        .into_par_iter()
        .map_init(
            || vec![A::zero(); m],
            |g, ch| {
                layout.gather(ch, dy, g);
                let db = lanes::sum_map(g, |v| v);
                if mode == Mode::Train {
                    let mean = db * inv_m;
                    g.iter_mut().for_each(|v| *v = *v - mean);
                }
                (store::<T, A>(g), db)
            },
        )
        .collect();
    let mut counters = Counters::default();
    let mut parts = Vec::with_capacity(results.len());
    let mut dbias = dbias;
    for (ch, (g, db)) in results.into_iter().enumerate() {
        counters.nonfinite_out += count_nonfinite(&g);
        parts.push(g);
        if let Some(out) = dbias.as_deref_mut() {
            out[ch] = store1::<T, A>(db);
            counters.nonfinite_out += u64::from(!out[ch].is_finite());
        }
    }
    layout.scatter(&parts, dx);
    counters
}
