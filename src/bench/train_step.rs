//! `normlab bench train-step`: one CPU training step of GPT+, nGPT and anGPT, measured in one
//! process, interleaved, so their ratios are meaningful on a busy machine.
//!
//! What a step is: `train::step::Trainer::step` on one fixed batch of the bundled corpus:
//! forward, cross-entropy, backward, gradients to f32, global norm and clipping, AdamW, the
//! post-step projection (nGPT/anGPT). Exactly what `benches/train_step.rs` times.
//!
//! How it is timed: every model is built and warmed up, then the timed runs go round-robin
//! (GPT+, nGPT, anGPT, GPT+, ...; the starting model rotates every round) so that a slow
//! phase of the machine (another process's build) hits the three models alike instead of one of
//! them. Each model's median over its runs is reported, and the ratios of the medians to
//! GPT+'s: the issue's goals are nGPT <= 1.10 and anGPT <= 1.03 times GPT+.
//!
//! Two clocks: wall time, and the CPU time of the whole process (all threads) during the step.
//! On a machine shared with other work, wall time includes the time the step waited for a core,
//! and candle's thread pool spins while it waits for descheduled workers; run with
//! `RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1` and compare the CPU-time ratios there, which are
//! the least disturbed. On a quiet machine the wall-time ratios with all threads are the goal.
//!
//! # JSON schema `normlab.bench.train_step/1`
//!
//! ```text
//! {
//!   "schema": "normlab.bench.train_step/1",
//!   "provenance": { ... as `normlab bench norms` ... },
//!   "config": { "d_model", "n_heads", "n_layers", "mlp_ratio", "batch_size", "seq_len", "precision",
//!               "warmup", "reps", "archs": [name] },
//!   "models": [ { "arch", "params", "timing": { "median_s", "min_s", "max_s", "reps" }, "cpu_timing": { same, process CPU
//!                 seconds per step }, "tokens_per_s" } ],
//!   "ratios": [ { "arch", "ratio_to_gpt_plus" (median / GPT+ median), "cpu_ratio_to_gpt_plus" (same for CPU time),
//!                 "goal_max", "meets_goal" (wall-time ratio <= goal) } ]
//! }
//! ```

use std::fmt::Write as _;

use candle_core::Device;

use crate::bench::machine::Provenance;
use crate::bench::timing::{summarize, Timing};
use crate::bench::BenchError;
use crate::data::{BatchSampler, Corpus, Part, Split};
use crate::model::{build, Arch, LanguageModel, ModelConfig};
use crate::train::step::Trainer;
use crate::train::{Precision, TrainConfig};

pub const SCHEMA: &str = "normlab.bench.train_step/1";
/// Issue 5's goals: step time relative to GPT+ at the benchmarked size.
pub const GOAL_NGPT: f64 = 1.10;
pub const GOAL_ANGPT: f64 = 1.03;

/// What to measure. [`TrainStepConfig::default`] is the size of `benches/train_step.rs`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainStepConfig {
    pub d_model: usize,
    pub n_heads: usize,
    pub n_layers: usize,
    pub mlp_ratio: usize,
    pub batch_size: usize,
    pub seq_len: usize,
    pub precision: Precision,
    /// Untimed steps per model before the timed rounds.
    pub warmup: usize,
    /// Timed steps per model.
    pub reps: usize,
    pub archs: Vec<Arch>,
}

impl Default for TrainStepConfig {
    fn default() -> Self {
        TrainStepConfig {
            d_model: 128,
            n_heads: 4,
            n_layers: 4,
            mlp_ratio: 4,
            batch_size: 8,
            seq_len: 128,
            precision: Precision::F32,
            warmup: 3,
            reps: 30,
            archs: Arch::ALL.to_vec(),
        }
    }
}

impl TrainStepConfig {
    /// The model configuration of `arch` at this size.
    pub fn model(&self, arch: Arch) -> ModelConfig {
        ModelConfig { arch, d_model: self.d_model, n_heads: self.n_heads, n_layers: self.n_layers, mlp_ratio: self.mlp_ratio, ..Default::default() }
    }

    fn validate(&self) -> Result<(), BenchError> {
        if self.reps == 0 {
            return Err(BenchError::invalid("reps", 0, "need at least 1 timed step"));
        }
        if self.archs.is_empty() {
            return Err(BenchError::invalid("archs", "[]", "name at least one architecture"));
        }
        for (what, v) in [("batch_size", self.batch_size), ("seq_len", self.seq_len)] {
            if v == 0 {
                return Err(BenchError::invalid(what, 0, "must be at least 1"));
            }
        }
        for arch in &self.archs {
            self.model(*arch).validate().map_err(|e| BenchError::invalid("model", arch.name(), e))?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelTiming {
    pub arch: Arch,
    /// Number of scalar parameters.
    pub params: usize,
    pub timing: Timing,
    /// CPU time of the process (all threads) per step.
    pub cpu_timing: Timing,
    pub tokens_per_s: f64,
}

/// CPU time consumed by the whole process so far, in seconds.
pub fn process_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec; the clock id is a constant every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ratio {
    pub arch: Arch,
    /// This model's median step time over GPT+'s.
    pub ratio_to_gpt_plus: f64,
    /// The same for the CPU-time medians.
    pub cpu_ratio_to_gpt_plus: f64,
    pub goal_max: Option<f64>,
    pub meets_goal: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainStepReport {
    pub schema: String,
    pub provenance: Provenance,
    pub config: TrainStepConfig,
    pub models: Vec<ModelTiming>,
    /// Present when GPT+ was measured: one per other architecture.
    pub ratios: Vec<Ratio>,
}

fn setup_err(what: &'static str, arch: Arch, e: impl std::fmt::Display) -> BenchError {
    BenchError::invalid(what, arch.name(), e)
}

/// Measure; `progress` is called with a label before each phase.
pub fn run(cfg: &TrainStepConfig, progress: &mut dyn FnMut(&str)) -> Result<TrainStepReport, BenchError> {
    cfg.validate()?;
    let provenance = Provenance::detect();
    let device = Device::Cpu;
    let train = TrainConfig { batch_size: cfg.batch_size, seq_len: cfg.seq_len, precision: cfg.precision, ..Default::default() };
    let corpus = Corpus::load_default().map_err(|e| BenchError::invalid("corpus", "bundled", e))?;
    let split = Split::new(&corpus, 0.1).map_err(|e| BenchError::invalid("corpus", "bundled", e))?;
    let sampler = BatchSampler::new(&split, Part::Train, cfg.batch_size, cfg.seq_len, 1).map_err(|e| BenchError::invalid("batch", cfg.batch_size, e))?;
    let batch = sampler.batch(0, &device).map_err(|e| BenchError::invalid("batch", cfg.batch_size, e))?;

    let mut models: Vec<(Arch, Box<dyn LanguageModel>, Trainer)> = Vec::new();
    for &arch in &cfg.archs {
        progress(&format!("build {}", arch.name()));
        let model = build(&cfg.model(arch), cfg.precision.storage_dtype(), 1, &device).map_err(|e| setup_err("model", arch, e))?;
        let trainer = Trainer::new(model.as_ref(), &train).map_err(|e| setup_err("trainer", arch, e))?;
        models.push((arch, model, trainer));
    }
    for (arch, model, trainer) in models.iter_mut() {
        progress(&format!("warm up {}", arch.name()));
        for _ in 0..cfg.warmup {
            trainer.step(model.as_ref(), &batch, 1e-3).map_err(|e| setup_err("step", *arch, e))?;
        }
    }
    let k = models.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(cfg.reps); k];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::with_capacity(cfg.reps); k];
    for rep in 0..cfg.reps {
        progress(&format!("round {}/{}", rep + 1, cfg.reps));
        for j in 0..k {
            let i = (rep + j) % k;
            let (arch, model, trainer) = &mut models[i];
            let (c0, t0) = (process_cpu_s(), std::time::Instant::now());
            trainer.step(model.as_ref(), &batch, 1e-3).map_err(|e| setup_err("step", *arch, e))?;
            times[i].push(t0.elapsed().as_secs_f64());
            cpu[i].push(process_cpu_s() - c0);
        }
    }
    let tokens = (cfg.batch_size * cfg.seq_len) as f64;
    let timings: Vec<ModelTiming> = models
        .iter()
        .zip(times.iter_mut().zip(cpu.iter_mut()))
        .map(|((arch, model, _), (t, c))| {
            let timing = summarize(t);
            ModelTiming { arch: *arch, params: model.params().num_elements(), timing, cpu_timing: summarize(c), tokens_per_s: tokens / timing.median_s }
        })
        .collect();
    let base = timings.iter().find(|m| m.arch == Arch::GptPlus).map(|m| (m.timing.median_s, m.cpu_timing.median_s));
    let ratios = match base {
        Some((b, bc)) => timings
            .iter()
            .filter(|m| m.arch != Arch::GptPlus)
            .map(|m| {
                let r = m.timing.median_s / b;
                let goal = match m.arch {
                    Arch::NGpt => Some(GOAL_NGPT),
                    Arch::AnGpt => Some(GOAL_ANGPT),
                    Arch::GptPlus => None,
                };
                Ratio { arch: m.arch, ratio_to_gpt_plus: r, cpu_ratio_to_gpt_plus: m.cpu_timing.median_s / bc, goal_max: goal, meets_goal: goal.map(|g| r <= g) }
            })
            .collect(),
        None => Vec::new(),
    };
    Ok(TrainStepReport { schema: SCHEMA.to_string(), provenance, config: cfg.clone(), models: timings, ratios })
}

/// The report as a text table.
pub fn render_text(r: &TrainStepReport) -> String {
    let c = &r.config;
    let mut s = String::new();
    let m = &r.provenance.machine;
    let _ = writeln!(
        s,
        "train step on the CPU: d {} heads {} layers {} mlp x{}, batch {} x {} tokens, {}; {} warm-up + {} timed steps per model, interleaved",
        c.d_model, c.n_heads, c.n_layers, c.mlp_ratio, c.batch_size, c.seq_len, c.precision.name(), c.warmup, c.reps
    );
    let _ = writeln!(
        s,
        "machine: {} ({} logical cores, {} rayon threads, load {})",
        m.cpu_model.as_deref().unwrap_or("unknown CPU"),
        m.logical_cores,
        m.rayon_threads,
        m.load_avg_1m.map(|l| format!("{l:.2}")).unwrap_or_else(|| "?".into())
    );
    let _ = writeln!(s, "{:<10} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12}", "model", "params", "median ms", "min ms", "max ms", "cpu ms", "tokens/s");
    for t in &r.models {
        let _ = writeln!(
            s,
            "{:<10} {:>10} {:>12.2} {:>12.2} {:>12.2} {:>12.2} {:>12.0}",
            t.arch.name(),
            t.params,
            t.timing.median_s * 1e3,
            t.timing.min_s * 1e3,
            t.timing.max_s * 1e3,
            t.cpu_timing.median_s * 1e3,
            t.tokens_per_s
        );
    }
    for q in &r.ratios {
        let goal = match (q.goal_max, q.meets_goal) {
            (Some(g), Some(ok)) => format!(" (goal <= {g:.2}: {})", if ok { "met" } else { "MISSED" }),
            _ => String::new(),
        };
        let _ = writeln!(s, "{} / gpt_plus = {:.3}{goal}; CPU time {:.3}", q.arch.name(), q.ratio_to_gpt_plus, q.cpu_ratio_to_gpt_plus);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_reports_every_model_and_ratio() {
        let cfg = TrainStepConfig { d_model: 16, n_heads: 2, n_layers: 1, batch_size: 2, seq_len: 8, warmup: 1, reps: 3, ..Default::default() };
        let mut labels = Vec::new();
        let r = run(&cfg, &mut |l| labels.push(l.to_string())).unwrap();
        assert_eq!(r.models.iter().map(|m| m.arch).collect::<Vec<_>>(), Arch::ALL.to_vec());
        assert!(r.models.iter().all(|m| m.timing.reps == 3 && m.timing.median_s > 0.0 && m.params > 0 && m.cpu_timing.median_s > 0.0));
        assert_eq!(r.ratios.len(), 2);
        for q in &r.ratios {
            let want = r.models.iter().find(|m| m.arch == q.arch).unwrap().timing.median_s / r.models[0].timing.median_s;
            assert_eq!(q.ratio_to_gpt_plus, want);
            assert_eq!(q.meets_goal, Some(want <= q.goal_max.unwrap()));
        }
        assert!(labels.iter().any(|l| l == "round 3/3"));
        let text = render_text(&r);
        assert!(text.contains("ngpt / gpt_plus") && text.contains("angpt / gpt_plus"), "{text}");
        let bad = TrainStepConfig { reps: 0, ..cfg };
        assert!(run(&bad, &mut |_| {}).unwrap_err().to_string().contains("reps"));
    }
}
