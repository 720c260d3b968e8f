//! Batch (per-channel) forms: every norm of [`crate::spec`] over the channels of an `[N, C]` or
//! `[N, C, H, W]` tensor, with running statistics, train and eval modes, and mean-only batch
//! norm ([`mean_only`]).
//!
//! A channel's statistics run over all `m = N·H·W` of its elements ("Norm matters" 3.1). In
//! **train** mode each channel is normalized exactly as a row of `m` elements would be by the
//! row forms (same kernels, same numerics: the channel is gathered into the accumulator,
//! normalized and rounded once into storage), then the channel's scalar affine is applied:
//!
//! ```text
//! y = x̂ * γ_c + β_c,    x̂ = (x - mu_c) / D_c     (mu_c, D_c over the channel; spec table)
//! ```
//!
//! so `forward` on a layout equals [`crate::row::forward`] on the transposed `[C, m]` tensor
//! with the weight and bias broadcast, bitwise. The scale constants use `n = m`
//! (`C_inf(m)`, `C_topk(m, k)`, `c(m)`), and Top-k needs `k <= m`.
//!
//! In **eval** mode the running statistics ([`RunningStats`]) replace the batch statistics and
//! the layer is an elementwise affine map (see `eval`); the backward of either mode is
//! [`backward`] with the same `mode`.
//!
//! # Determinism
//! Channels are independent and each is reduced in a fixed order (the row kernels' lanes);
//! running statistics are updated serially in channel order. Results are bitwise identical
//! for any number of threads. The parallelism is over channels only (a channel is one
//! sequential reduction, as a row is), so a call uses at most C threads.
//!
//! # Example
//! ```
//! use normlab_norms::batch::{self, Layout, Mode, RunningStats};
//! use normlab_norms::{Accum, NormSpec, RowStats};
//!
//! // Classic batch norm over 4 samples of 2 channels, 1x2 images.
//! let layout = Layout::Nchw { n: 4, c: 2, h: 1, w: 2 };
//! let x: Vec<f32> = (0..16).map(|i| (i * i % 7) as f32 - 3.0).collect();
//! let (gamma, beta) = ([1.0f32, 2.0], [0.0f32, 0.5]);
//! let spec = NormSpec::layer(1e-5);
//! let mut y = vec![0.0f32; 16];
//! let mut running = RunningStats::new(2);
//! let mut stats = [RowStats::default(); 2];
//! let c = batch::forward(&spec, Accum::F32, layout, &x, Some(&gamma), Some(&beta), &mut y,
//!                        Mode::Train, Some(&mut running), Some(&mut stats)).unwrap();
//! assert!(c.is_clean());
//! // Channel 1 (elements 2, 3 of every sample) now has mean beta = 0.5.
//! let ch1: f32 = (0..4).map(|i| y[4 * i + 2] + y[4 * i + 3]).sum::<f32>() / 8.0;
//! assert!((ch1 - 0.5).abs() < 1e-5);
//! assert_eq!(running.updates, 1);
//!
//! // Backward through the batch statistics.
//! let dy = vec![1.0f32; 16];
//! let (mut dx, mut dgamma, mut dbeta) = (vec![0.0f32; 16], [0.0f32; 2], [0.0f32; 2]);
//! batch::backward(&spec, Accum::F32, layout, &x, &dy, Mode::Train, &stats, Some(&gamma),
//!                 &mut dx, Some(&mut dgamma), Some(&mut dbeta)).unwrap();
//! assert_eq!(dbeta, [8.0, 8.0]);
//! assert!(dx.iter().all(|v| v.abs() < 1e-5)); // a constant dy does not move a normalized output
//!
//! // Eval: the running statistics are used instead.
//! batch::forward(&spec, Accum::F32, layout, &x, Some(&gamma), Some(&beta), &mut y,
//!                Mode::Eval, Some(&mut running), None).unwrap();
//! ```

mod channel;
mod eval;
mod layout;
pub mod mean_only;
mod running;
mod train;

pub use layout::Layout;
pub use running::{Convention, RunningStats};

use crate::accum::{Accum, Real};
use crate::counters::Counters;
use crate::element::Element;
use crate::error::{NormError, Result};
use crate::row::{check_len, check_opt_len, RowStats};
use crate::spec::{NormKind, NormSpec};

/// Train mode (batch statistics, running statistics updated) or eval mode (running
/// statistics, elementwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Train,
    Eval,
}

pub(crate) fn eval_needs_running() -> NormError {
    NormError::Unsupported {
        what: "eval mode without running statistics".into(),
        why: "eval normalizes with the running statistics: pass Some(&mut RunningStats)".into(),
    }
}

/// Validate the layout and the spec for it; returns `(channels, elements per channel)`.
fn check_layout(spec: &NormSpec, layout: &Layout) -> Result<(usize, usize)> {
    layout.validate()?;
    let m = layout.per_channel();
    spec.validate(m)?;
    Ok((layout.channels(), m))
}

/// Forward of a batch form.
///
/// `x` and `y` are in `layout`; `weight` (γ) and `bias` (β) have one value per channel.
/// - `Mode::Train`: normalize by the batch statistics; if `running` is given, fold them in
///   (see [`RunningStats`]). `stats` (length C), if given, receives what the train backward needs.
/// - `Mode::Eval`: normalize by `running` (required). `stats`, if given, receives the fixed
///   statistics used, which is what the eval backward needs.
///
/// Errors: zero dimensions, wrong lengths, an invalid spec for `m = N·H·W` elements
/// (e.g. `k > m`), an invalid momentum, eval without running statistics, and the unbiased
/// running variance of `Layer` over `m = 1` element per channel (PyTorch refuses it too).
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    layout: Layout,
    x: &[T],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    mode: Mode,
    running: Option<&mut RunningStats>,
    stats: Option<&mut [RowStats]>,
) -> Result<Counters> {
    // Compiled in this crate for each storage type (crate::compiled).
    T::batch_forward(spec, accum, layout, x, weight, bias, y, mode, running, stats)
}

/// [`forward`]'s body, which [`crate::compiled`] instantiates for each storage type.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_generic<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    layout: Layout,
    x: &[T],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    mode: Mode,
    running: Option<&mut RunningStats>,
    stats: Option<&mut [RowStats]>,
) -> Result<Counters> {
    let (c, m) = check_layout(spec, &layout)?;
    check_len("input", layout.len(), x.len())?;
    check_len("output", layout.len(), y.len())?;
    check_opt_len("weight", c, weight)?;
    check_opt_len("bias", c, bias)?;
    check_opt_len("stats", c, stats.as_deref())?;
    if let Some(r) = running.as_deref() {
        r.validate(c)?;
    }
    let mut own = Vec::new();
    let stats = match stats {
        Some(s) => s,
        None => {
            own.resize(c, RowStats::default());
            &mut own[..]
        }
    };
    match mode {
        Mode::Train => {
            if let Some(r) = running.as_deref() {
                if m == 1 && spec.kind == NormKind::Layer && r.convention == Convention::PyTorch {
                    return Err(NormError::Unsupported {
                        what: format!("an unbiased running variance over m = {m} element per channel"),
                        why: "m / (m - 1) is undefined: use a batch with N·H·W >= 2".into(),
                    });
                }
            }
            let counters = crate::with_accum!(accum, A => train::forward::<T, A>(spec, &layout, x, weight, bias, y, stats))?;
            if let Some(r) = running {
                r.update(spec, m, stats);
            }
            Ok(counters)
        }
        Mode::Eval => {
            let r = running.ok_or_else(eval_needs_running)?;
            crate::with_accum!(accum, A => {
                for (ch, s) in stats.iter_mut().enumerate() {
                    *s = r.frozen(spec, ch, |v| Real::to_f64(<A as Real>::from_f64(v)));
                }
                eval::forward::<T, A>(spec, &layout, x, weight, bias, y, stats)
            })
        }
    }
}

/// Backward of a batch form: `dx` from `dy`, and optionally `dγ` and `dβ` (per channel).
///
/// `stats` are those the forward returned in the same `mode`: in `Mode::Train` the gradient
/// flows through the batch mean and denominator (formulas in [`crate::row`], per channel); in
/// `Mode::Eval` the statistics are constants and `dx = dy · γ_c / D_c`. In both,
/// `dγ_c = Σ dy · x̂` and `dβ_c = Σ dy` over the channel's `N·H·W` elements.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    layout: Layout,
    x: &[T],
    dy: &[T],
    mode: Mode,
    stats: &[RowStats],
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    // Compiled in this crate for each storage type (crate::compiled).
    T::batch_backward(spec, accum, layout, x, dy, mode, stats, weight, dx, dweight, dbias)
}

/// [`backward`]'s body, which [`crate::compiled`] instantiates for each storage type.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_generic<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    layout: Layout,
    x: &[T],
    dy: &[T],
    mode: Mode,
    stats: &[RowStats],
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
) -> Result<Counters> {
    let (c, _) = check_layout(spec, &layout)?;
    check_len("input", layout.len(), x.len())?;
    check_len("dy", layout.len(), dy.len())?;
    check_len("dx", layout.len(), dx.len())?;
    check_len("stats", c, stats.len())?;
    check_opt_len("weight", c, weight)?;
    check_opt_len("dweight", c, dweight.as_deref())?;
    check_opt_len("dbias", c, dbias.as_deref())?;
    crate::with_accum!(accum, A => match mode {
        Mode::Train => train::backward::<T, A>(spec, &layout, x, dy, stats, weight, dx, dweight, dbias),
        Mode::Eval => eval::backward::<T, A>(spec, &layout, x, dy, stats, weight, dx, dweight, dbias),
    })
}
