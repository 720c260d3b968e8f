//! Synthetic run directories for the comparison tests, written with the training loop's record
//! types (`metrics.jsonl` lines and `summary.json`), with realistic shapes: a decaying loss,
//! evaluations with per-layer norms, counters, and optionally a diverged run.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use normlab::compare::preset::Cell;
use normlab::model::Arch;
use normlab::train::record::{DivergedRecord, SCHEMA};
use normlab::train::{EvalRecord, LayerNorms, NormCounters, Precision, Record, RunSummary, StepRecord};

/// How a synthetic run behaves.
#[derive(Clone, Debug)]
pub struct Synth {
    /// Loss at step 0 and the floor it decays to.
    pub start: f64,
    pub floor: f64,
    /// Decay time constant in steps (smaller = faster convergence).
    pub tau: f64,
    /// Diverge (non-finite loss) at this step.
    pub diverge_at: Option<u64>,
    pub step_time_s: f64,
    pub acc_overflow_per_step: u64,
    pub residual_growth: f64,
}

/// The default behaviour of a cell: architecture sets the speed of convergence and the step
/// time, L2 in pure f16 diverges at step 37 with overflows, everything else is stable.
pub fn default_synth(cell: &Cell) -> Synth {
    let (tau, step_time_s, growth) = match cell.arch {
        Arch::GptPlus => (40.0, 0.010, 0.05),
        Arch::NGpt => (25.0, 0.011, 0.0),
        Arch::AnGpt => (28.0, 0.0102, 0.0),
    };
    let f16 = cell.precision == Precision::PureF16;
    let l2 = cell.variant == "l2";
    Synth {
        start: 5.5,
        floor: 2.0 + 0.01 * cell.seed as f64 + if cell.variant == "l1" { 0.01 } else { 0.0 },
        tau,
        diverge_at: (f16 && l2).then_some(37),
        step_time_s,
        acc_overflow_per_step: if f16 && l2 { 30 } else { 0 },
        residual_growth: growth,
    }
}

pub const STEPS: u64 = 100;
pub const EVAL_EVERY: u64 = 10;
pub const LAYERS: usize = 2;

/// The loss of `s` at `step` (NaN from the divergence on).
pub fn loss_at(s: &Synth, step: u64) -> f64 {
    if s.diverge_at.is_some_and(|d| step >= d) {
        return f64::NAN;
    }
    s.floor + (s.start - s.floor) * (-(step as f64) / s.tau).exp()
}

/// Write `runs/CELL/metrics.jsonl` and `summary.json` for `cell` behaving as `s`.
pub fn write_run(dir: &Path, cell: &Cell, s: &Synth) {
    let rd = dir.join("runs").join(&cell.name);
    std::fs::create_dir_all(&rd).unwrap();
    let mut lines = Vec::new();
    let mut counters = NormCounters::default();
    let mut diverged = None;
    let tokens_per_step = 8 * 64;
    for step in 0..STEPS {
        let loss = loss_at(s, step);
        counters.acc_overflow += s.acc_overflow_per_step;
        if !loss.is_finite() && diverged.is_none() {
            diverged = Some(step);
            lines.push(Record::Diverged(DivergedRecord { step, loss }));
        }
        lines.push(Record::Step(StepRecord {
            step,
            loss,
            lr: 3e-3,
            grad_norm: 1.0,
            step_time_s: s.step_time_s,
            tokens_per_s: tokens_per_step as f64 / s.step_time_s,
            wall_s: (step + 1) as f64 * s.step_time_s,
            counters: NormCounters { acc_overflow: s.acc_overflow_per_step, ..Default::default() },
            loss_scale: None,
            skipped: false,
        }));
        if step % EVAL_EVERY == 0 || step == STEPS - 1 {
            let layers = (0..LAYERS)
                .map(|layer| LayerNorms { layer, residual_norm: 1.0 + s.residual_growth * step as f64 * (layer + 1) as f64, attn_out_norm: 0.5, mlp_out_norm: 0.7 })
                .collect();
            lines.push(Record::Eval(EvalRecord { step, val_loss: loss + 0.05, wall_s: (step + 1) as f64 * s.step_time_s, layers, adam_m_var: BTreeMap::new() }));
        }
    }
    let text: String = lines.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect();
    std::fs::write(rd.join("metrics.jsonl"), text).unwrap();
    let final_loss = loss_at(s, STEPS - 1) + 0.05;
    let summary = RunSummary {
        schema: SCHEMA.into(),
        name: cell.name.clone(),
        arch: cell.arch.name().into(),
        norm: cell.norm.name(),
        precision: cell.precision.name().into(),
        seed: cell.seed,
        steps: STEPS,
        tokens: STEPS * tokens_per_step,
        final_val_loss: final_loss.is_finite().then_some(final_loss),
        best_val_loss: final_loss.is_finite().then_some(final_loss),
        diverged_at: diverged,
        counters,
        median_step_time_s: s.step_time_s,
        tokens_per_s: tokens_per_step as f64 / s.step_time_s,
        wall_s: STEPS as f64 * s.step_time_s,
        skipped_steps: 0,
        config_hash: "synthetic".into(),
    };
    std::fs::write(rd.join("summary.json"), serde_json::to_string_pretty(&summary).unwrap()).unwrap();
}

/// A preset over the three architectures, l2/l1, f32/pure_f16 and the given seeds.
pub fn preset_text(seeds: &str) -> String {
    format!(
        r#"
name = "synthetic"
description = "synthetic runs for tests"
nu_samples = 4000
[base.model]
d_model = 64
n_heads = 4
[base.train]
steps = {STEPS}
[matrix]
archs = ["gpt_plus", "ngpt", "angpt"]
variants = [{{ norm = {{ kind = "l2" }} }}, {{ norm = {{ kind = "l1" }} }}]
precisions = ["f32", "pure_f16"]
seeds = [{seeds}]
"#
    )
}

/// A fresh temporary directory under the target dir (unique per test and process).
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
