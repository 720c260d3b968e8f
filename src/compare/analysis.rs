//! From runs to numbers: runs grouped by (arch, variant, precision) over seeds, with the
//! statistics of the summary table.
//!
//! Definitions (also in docs/summary-schema.md):
//! - **final validation loss**: mean +- sample std (n - 1) over the seeds whose run did not
//!   diverge and ended with a finite loss;
//! - **baseline** of a group: GPT+ with the `l2` variant (its own RMSNorm) in the same precision;
//! - **target loss**: the baseline's mean final validation loss, defined only when the baseline
//!   learned something: below `ln(vocab)`, the loss of the uniform predictor (a target worse than
//!   guessing would make every "speedup" meaningless);
//! - **steps to target**: the first step at which a run's validation loss is <= the target,
//!   linearly interpolated between the two evaluations around the crossing; a group's value is
//!   the mean over seeds, defined only when every seed got there. The baseline itself reaches
//!   its own final loss at its last step by definition (its seeds scatter around their mean, and
//!   a non-monotone curve may touch that value earlier: neither is a speedup over itself);
//! - **speedup**: the baseline's step count divided by the steps to target (how many times
//!   fewer steps the variant needs to reach GPT+'s final loss, as the papers report it);
//!   exactly 1 for the baseline;
//! - **overhead**: mean median step time over the baseline's, minus 1.

use serde::Serialize;

use super::load::RunData;
use super::preset::Cell;
use crate::model::Arch;
use crate::train::Precision;

/// The baseline variant label (GPT+'s own norm).
pub const BASELINE_VARIANT: &str = "l2";

/// Mean and sample standard deviation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stat {
    pub mean: f64,
    /// `None` for a single value.
    pub std: Option<f64>,
    pub n: usize,
}

impl Stat {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let std = (n > 1).then(|| (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
        Some(Stat { mean, std, n })
    }
}

/// Mean counters per run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct MeanCounters {
    pub nonfinite_in: f64,
    pub acc_overflow: f64,
    pub nonfinite_out: f64,
    pub skipped_steps: f64,
}

/// One cell of the matrix with its finished run.
#[derive(Clone, Debug)]
pub struct CellRun {
    pub cell: Cell,
    pub data: RunData,
}

impl CellRun {
    /// The run's final validation loss when it is usable (finite, run not diverged).
    pub fn usable_final_loss(&self) -> Option<f64> {
        if self.diverged_at().is_some() {
            return None;
        }
        self.data.summary.final_val_loss.filter(|v| v.is_finite())
    }

    /// The first non-finite step, from the summary or the metrics.
    pub fn diverged_at(&self) -> Option<u64> {
        self.data.summary.diverged_at.or(self.data.diverged.as_ref().map(|d| d.step))
    }
}

/// The statistics of one (arch, variant, precision) group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupStats {
    pub arch: String,
    pub variant: String,
    pub precision: String,
    pub seeds: Vec<u64>,
    pub cells: Vec<String>,
    pub steps: u64,
    pub final_val_loss: Option<Stat>,
    pub diverged_runs: usize,
    /// Step of divergence of each diverged run.
    pub diverged_at: Vec<u64>,
    pub counters: MeanCounters,
    /// Mean over seeds of each run's median step time.
    pub step_time_s: Option<Stat>,
    pub tokens_per_s: Option<Stat>,
    /// The baseline group's label (`gpt_plus/l2/PRECISION`) when the preset has it.
    pub baseline: Option<String>,
    pub target_loss: Option<f64>,
    /// Why there is no target loss (no baseline in this precision, or it did not learn).
    pub target_note: Option<String>,
    /// Runs that reached the target loss.
    pub reached_target: usize,
    pub steps_to_target: Option<Stat>,
    pub speedup: Option<f64>,
    pub overhead: Option<f64>,
}

impl GroupStats {
    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.arch, self.variant, self.precision)
    }
    pub fn runs(&self) -> usize {
        self.cells.len()
    }
}

/// First step at which `evals` reach `target` (interpolated), if they do.
pub fn steps_to_reach(evals: &[(u64, f64)], target: f64) -> Option<f64> {
    let mut prev: Option<(u64, f64)> = None;
    for &(s, l) in evals {
        if !l.is_finite() {
            return None;
        }
        if l <= target {
            return Some(match prev {
                Some((ps, pl)) if pl > l => ps as f64 + (pl - target) / (pl - l) * (s - ps) as f64,
                _ => s as f64,
            });
        }
        prev = Some((s, l));
    }
    None
}

/// Group runs by (arch, variant, precision) in the order of first appearance.
pub fn group_runs(runs: &[CellRun]) -> Vec<Vec<&CellRun>> {
    let mut groups: Vec<Vec<&CellRun>> = Vec::new();
    for r in runs {
        match groups.iter_mut().find(|g| g[0].cell.arch == r.cell.arch && g[0].cell.variant == r.cell.variant && g[0].cell.precision == r.cell.precision) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
}

fn basic_stats(g: &[&CellRun]) -> GroupStats {
    let c = &g[0].cell;
    let finals: Vec<f64> = g.iter().filter_map(|r| r.usable_final_loss()).collect();
    let diverged_at: Vec<u64> = g.iter().filter_map(|r| r.diverged_at()).collect();
    let n = g.len() as f64;
    let sum = |f: &dyn Fn(&CellRun) -> u64| g.iter().map(|r| f(r) as f64).sum::<f64>() / n;
    let counters = MeanCounters {
        nonfinite_in: sum(&|r| r.data.summary.counters.nonfinite_in),
        acc_overflow: sum(&|r| r.data.summary.counters.acc_overflow),
        nonfinite_out: sum(&|r| r.data.summary.counters.nonfinite_out),
        skipped_steps: sum(&|r| r.data.summary.skipped_steps),
    };
    let times: Vec<f64> = g.iter().map(|r| r.data.summary.median_step_time_s).filter(|v| v.is_finite() && *v > 0.0).collect();
    let tps: Vec<f64> = g.iter().map(|r| r.data.summary.tokens_per_s).filter(|v| v.is_finite() && *v > 0.0).collect();
    GroupStats {
        arch: c.arch.name().to_string(),
        variant: c.variant.clone(),
        precision: c.precision.name().to_string(),
        seeds: g.iter().map(|r| r.cell.seed).collect(),
        cells: g.iter().map(|r| r.cell.name.clone()).collect(),
        steps: g.iter().map(|r| r.data.summary.steps).max().unwrap_or(0),
        final_val_loss: Stat::of(&finals),
        diverged_runs: diverged_at.len(),
        diverged_at,
        counters,
        step_time_s: Stat::of(&times),
        tokens_per_s: Stat::of(&tps),
        baseline: None,
        target_loss: None,
        target_note: None,
        reached_target: 0,
        steps_to_target: None,
        speedup: None,
        overhead: None,
    }
}

/// The statistics of every group, with baseline-relative numbers filled in.
pub fn analyse(runs: &[CellRun]) -> Vec<GroupStats> {
    let groups = group_runs(runs);
    let mut stats: Vec<GroupStats> = groups.iter().map(|g| basic_stats(g)).collect();
    let base_of = |precision: &str, stats: &[GroupStats]| stats.iter().position(|s| s.arch == Arch::GptPlus.name() && s.variant == BASELINE_VARIANT && s.precision == precision);
    for i in 0..stats.len() {
        let Some(b) = base_of(&stats[i].precision, &stats) else {
            stats[i].target_note = Some(format!("no gpt_plus/{BASELINE_VARIANT} run in {}", stats[i].precision));
            continue;
        };
        let base = stats[b].clone();
        let s = &mut stats[i];
        s.baseline = Some(base.label());
        if let (Some(t), Some(bt)) = (s.step_time_s, base.step_time_s) {
            s.overhead = Some(t.mean / bt.mean - 1.0);
        }
        let Some(target) = base.final_val_loss.map(|f| f.mean) else {
            s.target_note = Some(format!("{} has no usable final loss", base.label()));
            continue;
        };
        let vocab = groups[b][0].cell.config.model.vocab;
        let uniform = (vocab as f64).ln();
        if target >= uniform {
            s.target_note = Some(format!("{} did not learn: final loss {target:.4} >= ln({vocab}) = {uniform:.4}", base.label()));
            continue;
        }
        s.target_loss = Some(target);
        if i == b {
            let own: Vec<f64> = groups[i].iter().filter(|r| r.usable_final_loss().is_some()).map(|r| r.data.summary.steps as f64).collect();
            s.reached_target = own.len();
            s.steps_to_target = Stat::of(&own);
            s.speedup = Some(1.0);
            continue;
        }
        let reached: Vec<f64> = groups[i].iter().filter_map(|r| steps_to_reach(&eval_series(r), target)).collect();
        s.reached_target = reached.len();
        if reached.len() == groups[i].len() {
            s.steps_to_target = Stat::of(&reached);
            s.speedup = s.steps_to_target.filter(|st| st.mean > 0.0).map(|st| base.steps as f64 / st.mean);
        }
    }
    stats
}

/// `(step, val_loss)` of a run's evaluations.
pub fn eval_series(r: &CellRun) -> Vec<(u64, f64)> {
    r.data.evals.iter().map(|e| (e.step, e.val_loss)).collect()
}

/// The precision the claims are judged in: f32 when the preset has it, else the first one.
pub fn reference_precision(runs: &[CellRun]) -> Option<Precision> {
    if runs.iter().any(|r| r.cell.precision == Precision::F32) {
        return Some(Precision::F32);
    }
    runs.first().map(|r| r.cell.precision)
}

/// Find a group by its coordinates.
pub fn find<'a>(stats: &'a [GroupStats], arch: &str, variant: &str, precision: &str) -> Option<&'a GroupStats> {
    stats.iter().find(|s| s.arch == arch && s.variant == variant && s.precision == precision)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossing_is_interpolated() {
        let e = [(0, 5.0), (10, 4.0), (20, 2.0), (30, 1.0)];
        assert_eq!(steps_to_reach(&e, 3.0), Some(15.0));
        assert_eq!(steps_to_reach(&e, 5.5), Some(0.0));
        assert_eq!(steps_to_reach(&e, 0.5), None);
        assert_eq!(steps_to_reach(&[(0, 5.0), (10, f64::NAN), (20, 1.0)], 2.0), None);
        let s = Stat::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.mean, s.std, s.n), (2.0, Some(1.0), 3));
        assert_eq!(Stat::of(&[2.0]).unwrap().std, None);
    }
}
