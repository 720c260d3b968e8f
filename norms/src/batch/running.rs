//! Running statistics of the batch forms: what train mode accumulates and eval mode uses.
//!
//! # Update rules (`momentum` = m)
//! - [`Convention::PyTorch`]: `running = (1 - m) * running + m * batch` (default m = 0.1).
//! - [`Convention::NormMattersCode`]: `running = m * running + (1 - m) * batch`, the reverse, as
//!   in the "Norm matters" code (`lp_norm.py`, `mean_bn.py`; m = 0.1 there, so the new batch
//!   gets weight 0.9).
//!
//! # What `spread` holds, and the eval denominator `D`
//! In the PyTorch convention, `spread` is the kind's natural statistic and eval puts eps where
//! training puts it:
//!
//! | kind | `spread` (per channel, over m = N·H·W elements) | eval `D` |
//! |---|---|---|
//! | `Layer` (batch norm) | variance, **unbiased** (`var_biased * m / (m - 1)`), as PyTorch | `sqrt(spread + eps)` |
//! | `Rms` | mean square `mean(x^2)` (already unbiased for the second moment) | `sqrt(spread + eps)` |
//! | `UnitL2` | the channel's L2 norm `‖x‖_2` (eps when the norm was clamped) | `max(spread, eps)` |
//! | `L1`, `LInf`, `TopK` | the sigma estimate `C * stat` (stat = mean, max, top-k mean of `|x - mu|`) | `spread + eps` |
//!
//! In the "Norm matters" convention `spread` is the **scale** `1 / D` of each training batch
//! (eps included, biased variance for `Layer`), exactly what that code keeps in its buffer
//! named `running_var`; eval multiplies by it: `D = 1 / spread`.
//!
//! `mean` is the running channel mean for centred kinds; uncentred kinds (`Rms`, `UnitL2`, and
//! L1/L-inf/Top-k with centring off) neither update nor use it (their eval mean is 0).
//!
//! A channel with a non-finite input has NaN batch statistics, and the NaN goes into the
//! running statistics (as in PyTorch): a non-finite input is propagated, never hidden.
//!
//! The batch values are recovered from the saved [`RowStats`] (`D = 2^exp2 / rscale`, so
//! `var = D^2 - eps`, `sigma = D - eps`, clamped at 0): they carry the accumulator's precision.

use std::cmp::Ordering;

use crate::error::{NormError, Result};
use crate::row::RowStats;
use crate::spec::{NormKind, NormSpec};

/// Which running-average rule (and which stored quantity) to use; see the module doc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Convention {
    /// `running = (1 - m) running + m batch`; `spread` is the kind's statistic.
    #[default]
    PyTorch,
    /// `running = m running + (1 - m) batch`; `spread` is the scale `1 / D`.
    NormMattersCode,
}

/// Per-channel running statistics (all f64), updated by train mode and used by eval mode.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunningStats {
    /// Running channel mean (centred kinds and mean-only batch norm). Starts at 0.
    pub mean: Vec<f64>,
    /// Running variance / mean square / norm / sigma / scale, by kind and convention (module
    /// doc). Starts at 1.
    pub spread: Vec<f64>,
    /// The momentum `m` of the update rule, in [0, 1].
    pub momentum: f64,
    pub convention: Convention,
    /// Number of train-mode updates applied (PyTorch's `num_batches_tracked`).
    pub updates: u64,
}

impl RunningStats {
    /// PyTorch defaults: mean 0, spread 1, momentum 0.1.
    pub fn new(channels: usize) -> Self {
        RunningStats {
            mean: vec![0.0; channels],
            spread: vec![1.0; channels],
            momentum: 0.1,
            convention: Convention::PyTorch,
            updates: 0,
        }
    }

    /// The "Norm matters" code's rule: momentum 0.1 weighting the old value, spread = scale.
    pub fn norm_matters(channels: usize) -> Self {
        RunningStats { convention: Convention::NormMattersCode, ..Self::new(channels) }
    }

    pub fn with_momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    /// Lengths must match the channel count and the momentum must be in [0, 1].
    pub fn validate(&self, channels: usize) -> Result<()> {
        crate::row::check_len("running mean", channels, self.mean.len())?;
        crate::row::check_len("running spread", channels, self.spread.len())?;
        if !(0.0..=1.0).contains(&self.momentum) {
            return Err(NormError::OutOfRange { what: "momentum", range: "[0, 1]", value: self.momentum });
        }
        Ok(())
    }

    /// Weight of the new batch value in the update.
    fn batch_weight(&self) -> f64 {
        match self.convention {
            Convention::PyTorch => self.momentum,
            Convention::NormMattersCode => 1.0 - self.momentum,
        }
    }

    /// Fold one training batch into the running values. `stats[ch]` are the channel's batch
    /// statistics over `m` elements (`m >= 2` for `Layer` in the PyTorch convention).
    pub(crate) fn update(&mut self, spec: &NormSpec, m: usize, stats: &[RowStats]) {
        let a = self.batch_weight();
        for (ch, st) in stats.iter().enumerate() {
            if spec.centred {
                self.mean[ch] = (1.0 - a) * self.mean[ch] + a * st.mean();
            }
            let v = batch_spread(spec, self.convention, m, st);
            self.spread[ch] = (1.0 - a) * self.spread[ch] + a * v;
        }
        self.updates += 1;
    }

    /// Fold one batch's channel means into `mean` only (mean-only batch norm).
    pub(crate) fn update_mean(&mut self, means: &[f64]) {
        let a = self.batch_weight();
        for (r, &v) in self.mean.iter_mut().zip(means) {
            *r = (1.0 - a) * *r + a * v;
        }
        self.updates += 1;
    }

    /// The eval denominator `D` of channel `ch` (module doc table), in f64.
    pub fn denominator(&self, spec: &NormSpec, ch: usize) -> f64 {
        let s = self.spread[ch];
        match self.convention {
            Convention::NormMattersCode => 1.0 / s,
            Convention::PyTorch => match spec.kind {
                NormKind::Rms | NormKind::Layer => (s + spec.eps).sqrt(),
                NormKind::UnitL2 => s.max(spec.eps),
                NormKind::L1 | NormKind::LInf | NormKind::TopK { .. } => s + spec.eps,
            },
        }
    }

    /// The fixed statistics eval mode normalizes channel `ch` with, as a [`RowStats`]:
    /// `mean_hi` = running mean (0 if uncentred), `rscale` = `1 / D` rounded by `round` (into
    /// the accumulator's precision), `exp2` = 0.
    pub(crate) fn frozen(&self, spec: &NormSpec, ch: usize, round: impl Fn(f64) -> f64) -> RowStats {
        let d = self.denominator(spec, ch);
        RowStats {
            mean_hi: if spec.centred { round(self.mean[ch]) } else { 0.0 },
            mean_lo: 0.0,
            rscale: round(1.0 / d),
            exp2: 0,
            // As the row kernel's `!(norm >= eps)`: a NaN norm counts as clamped.
            clamped: matches!(spec.kind, NormKind::UnitL2)
                && !matches!(self.spread[ch].partial_cmp(&spec.eps), Some(Ordering::Greater | Ordering::Equal)),
        }
    }
}

/// The batch value folded into `spread` for one channel (module doc table).
fn batch_spread(spec: &NormSpec, convention: Convention, m: usize, st: &RowStats) -> f64 {
    let d = st.denominator();
    if convention == Convention::NormMattersCode {
        return 1.0 / d;
    }
    // max(.., 0) keeps a NaN (f64::max would drop it): written as a comparison.
    let nonneg = |v: f64| if v < 0.0 { 0.0 } else { v };
    match spec.kind {
        NormKind::Layer => nonneg(d * d - spec.eps) * m as f64 / (m as f64 - 1.0),
        NormKind::Rms => nonneg(d * d - spec.eps),
        NormKind::UnitL2 => d,
        NormKind::L1 | NormKind::LInf | NormKind::TopK { .. } => nonneg(d - spec.eps),
    }
}
