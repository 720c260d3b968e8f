//! The benchmark driver: copy bandwidth first, then for each shape x dtype the candle-nn
//! baselines and every norm kind forward and backward, all in one process so the numbers
//! are comparable.
//!
//! The timed runs of one shape x dtype are spread over rounds, and each round runs every case
//! (the baselines first) with its warm-up: a ratio to candle then compares times taken
//! minutes apart at most, over the same stretch of the machine's load, instead of a
//! baseline timed once before everything else. On the shared 2-core machine the same code
//! moved by up to 1.6x between runs minutes apart.

use candle_core::WithDType;
use normlab_norms::{bf16, f16, row, Element, NormKind, NormSpec};
use std::sync::atomic::Ordering;

use crate::bench::bandwidth::CopySampler;
use crate::bench::candle_ref::{CandleBaseline, CandleOp};
use crate::bench::cases::{kind_spec, spec_label, BenchDType, Direction, Shape, BENCH_EPS, DEFAULT_TOPK_K, FULL_SHAPES, KIND_NAMES, QUICK_SHAPES};
use crate::bench::error::BenchError;
use crate::bench::machine::{memory_from, Provenance};
use crate::bench::report::{BaselineResult, CaseResult, ConfigEcho, Report, Summary, SCHEMA};
use crate::bench::timing::{reps_in_round, sample, summarize, Timing};
use crate::bench::workload::Workload;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    pub shapes: Vec<Shape>,
    pub dtypes: Vec<BenchDType>,
    pub kinds: Vec<NormSpec>,
    pub reps: usize,
    /// Rounds the `reps` timed runs of every case are spread over (each round: every case
    /// of the shape x dtype in turn, each with `warmup` untimed runs first). 1..=reps.
    pub rounds: usize,
    pub warmup: usize,
    pub copy_buffer_bytes: usize,
    pub copy_reps: usize,
    pub quick: bool,
    /// Whether the forward stages streamed rows (`row::STAGED_OUTPUT`, set for the run and
    /// restored after it). True but for A/B measurements (the CLI's hidden `--unstaged`).
    pub staged_output: bool,
}

impl BenchConfig {
    /// The benchmark: both shapes, f32/f16/bf16, every kind (top-k with k = 8),
    /// 10 timed runs in 5 rounds, each after 3 warm-up runs, a 256 MiB copy buffer.
    ///
    /// Three warm-ups, because a case that follows another one starts from that case's cache
    /// contents: with one, the f32 4096x1024 forwards (32 MiB of input and output, the size of
    /// this machine's L3) were about 1.4x slower than timed in one block (rms 0.70 against
    /// 0.47-0.48 ms); with three they are as fast (0.46-0.49 ms).
    pub fn full() -> Self {
        BenchConfig {
            shapes: FULL_SHAPES.to_vec(),
            dtypes: BenchDType::ALL.to_vec(),
            kinds: KIND_NAMES.iter().map(|k| kind_spec(k, DEFAULT_TOPK_K)).collect::<Result<_, _>>().unwrap_or_default(),
            reps: 10,
            rounds: 5,
            warmup: 3,
            copy_buffer_bytes: 256 << 20,
            copy_reps: 10,
            quick: false,
            staged_output: true,
        }
    }

    /// Seconds, not minutes: one small shape, 3 timed runs, a 32 MiB copy buffer. For smoke
    /// tests: the numbers are not meaningful for the goals.
    pub fn quick() -> Self {
        BenchConfig {
            shapes: QUICK_SHAPES.to_vec(),
            reps: 3,
            rounds: 1,
            warmup: 1,
            copy_buffer_bytes: 32 << 20,
            copy_reps: 3,
            quick: true,
            ..Self::full()
        }
    }

    /// Progress steps of [`run`]: the copy, then per shape x dtype and round two baselines and
    /// each kind forward and backward.
    pub fn steps(&self) -> u64 {
        1 + (self.shapes.len() * self.dtypes.len() * self.rounds * (CandleOp::ALL.len() + self.kinds.len() * Direction::ALL.len())) as u64
    }

    /// Refuse, before anything runs, what some case could not do (every refusal names the value).
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.shapes.is_empty() || self.dtypes.is_empty() || self.kinds.is_empty() {
            return Err(BenchError::invalid("configuration", format!("{} shapes, {} dtypes, {} kinds", self.shapes.len(), self.dtypes.len(), self.kinds.len()), "need at least one of each"));
        }
        if self.reps == 0 {
            return Err(BenchError::invalid("reps", 0, "need at least 1 timed run"));
        }
        if self.rounds == 0 || self.rounds > self.reps {
            return Err(BenchError::invalid(
                "rounds",
                self.rounds,
                format!("need 1..={} (the timed runs): every round times each case at least once", self.reps),
            ));
        }
        let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| memory_from(&m));
        for s in &self.shapes {
            let need = self.dtypes.iter().map(|&d| bytes_needed(*s, d)).max().unwrap_or(0);
            if let Some(mem) = memory {
                if need as f64 > 0.8 * mem as f64 {
                    return Err(BenchError::invalid(
                        "shape",
                        s,
                        format!("needs about {} MiB, more than 80% of this machine's {} MiB", need >> 20, mem >> 20),
                    ));
                }
            }
            for k in &self.kinds {
                k.validate(s.n).map_err(|e| BenchError::invalid("norm kind for shape", format!("{} at {s}", spec_label(k)), e))?;
            }
        }
        Ok(())
    }

    fn echo(&self) -> ConfigEcho {
        ConfigEcho {
            shapes: self.shapes.clone(),
            dtypes: self.dtypes.clone(),
            kinds: self.kinds.iter().map(spec_label).collect(),
            topk_k: self.kinds.iter().find_map(|k| match k.kind {
                NormKind::TopK { k } => Some(k),
                _ => None,
            }),
            reps: self.reps,
            rounds: self.rounds,
            warmup: self.warmup,
            quick: self.quick,
            accum: "f32".into(),
            eps: BENCH_EPS,
            copy_buffer_bytes: self.copy_buffer_bytes,
            copy_reps: self.copy_reps,
            staged_output: self.staged_output,
        }
    }
}

/// Memory one shape and dtype holds at once: x, dy, y, dx, candle's copy of x and candle's
/// output.
pub fn bytes_needed(shape: Shape, dtype: BenchDType) -> usize {
    6 * shape.elems() * dtype.size_bytes()
}

/// Run the benchmark. `progress` is called with a label before each step ([`BenchConfig::steps`]
/// calls in all).
pub fn run(cfg: &BenchConfig, progress: &mut dyn FnMut(&str)) -> Result<Report, BenchError> {
    cfg.validate()?;
    let was = row::STAGED_OUTPUT.swap(cfg.staged_output, Ordering::Relaxed);
    let report = run_cases(cfg, progress);
    row::STAGED_OUTPUT.store(was, Ordering::Relaxed);
    report
}

fn run_cases(cfg: &BenchConfig, progress: &mut dyn FnMut(&str)) -> Result<Report, BenchError> {
    let provenance = Provenance::detect();
    progress("copy bandwidth");
    // Sampled before the first case and after every shape and dtype: the fractions below are
    // of the median over the whole run (see `bandwidth`).
    let mut copy = CopySampler::new(cfg.copy_buffer_bytes);
    copy.sample(cfg.copy_reps);
    let mut cases = Vec::new();
    let mut baselines = Vec::new();
    for &shape in &cfg.shapes {
        for &dtype in &cfg.dtypes {
            let out = match dtype {
                BenchDType::F32 => run_one::<f32>(cfg, shape, dtype, progress)?,
                BenchDType::F16 => run_one::<f16>(cfg, shape, dtype, progress)?,
                BenchDType::BF16 => run_one::<bf16>(cfg, shape, dtype, progress)?,
            };
            baselines.extend(out.0);
            cases.extend(out.1);
            copy.sample(cfg.copy_reps);
        }
    }
    let copy = copy.result();
    for b in &mut baselines {
        b.fraction_of_copy = b.gb_per_s / copy.gb_per_s;
    }
    for c in &mut cases {
        c.fraction_of_copy = c.gb_per_s / copy.gb_per_s;
    }
    let summary = Summary::from_cases(&cases);
    Ok(Report { schema: SCHEMA.into(), provenance, config: cfg.echo(), copy_bandwidth: copy, cases, baselines, summary })
}

/// One shape and dtype, in `cfg.rounds` rounds: each round times the baselines, then every
/// kind forward and backward, each after its warm-up (see the module doc).
fn run_one<T: Element + WithDType>(
    cfg: &BenchConfig,
    shape: Shape,
    dtype: BenchDType,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<BaselineResult>, Vec<CaseResult>), BenchError> {
    let gbs = |bytes: usize, t: f64| bytes as f64 / t / 1e9;
    let mut w = Workload::<T>::new(shape);
    let candle = CandleBaseline::new(&w)?;
    let mut base_times = vec![Vec::with_capacity(cfg.reps); CandleOp::ALL.len()];
    let cases_in = |spec: usize, dir: usize| spec * Direction::ALL.len() + dir;
    let mut case_times = vec![Vec::with_capacity(cfg.reps); cfg.kinds.len() * Direction::ALL.len()];
    let mut case_counters = vec![Default::default(); case_times.len()];
    for round in 0..cfg.rounds {
        let reps = reps_in_round(cfg.reps, cfg.rounds, round);
        let of = |label: &str| if cfg.rounds > 1 { format!("{label} (round {}/{})", round + 1, cfg.rounds) } else { label.to_string() };
        for (op, times) in CandleOp::ALL.into_iter().zip(&mut base_times) {
            progress(&of(&format!("{shape} {dtype} {}", op.name())));
            sample(cfg.warmup, reps, times, || candle.run(op).map(drop))?;
        }
        for (i, spec) in cfg.kinds.iter().enumerate() {
            for (d, dir) in Direction::ALL.into_iter().enumerate() {
                progress(&of(&format!("{shape} {dtype} {} {}", spec_label(spec), dir.name())));
                let (times, counters) = (&mut case_times[cases_in(i, d)], &mut case_counters[cases_in(i, d)]);
                match dir {
                    Direction::Forward => sample(cfg.warmup, reps, times, || w.forward(spec).map(|c| *counters = c))?,
                    Direction::Backward => {
                        w.forward(spec)?; // the statistics the backward reads
                        sample(cfg.warmup, reps, times, || w.backward(spec).map(|c| *counters = c))?
                    }
                }
                std::hint::black_box((&w.y, &w.dx));
            }
        }
    }
    drop(candle);
    let bytes = Direction::Forward.compulsory_bytes(shape, dtype);
    let baselines: Vec<BaselineResult> = CandleOp::ALL
        .into_iter()
        .zip(&mut base_times)
        .map(|(op, times)| {
            let timing = summarize(times);
            // fraction_of_copy: set by `run` once the copy has been sampled over the whole run.
            BaselineResult { shape, dtype, op, timing, bytes, gb_per_s: gbs(bytes, timing.median_s), fraction_of_copy: f64::NAN }
        })
        .collect();
    let baseline_median = |op: CandleOp| baselines.iter().find(|b| b.op == op).map(|b| b.timing.median_s);
    let (rms_t, layer_t) = (baseline_median(CandleOp::RmsNorm), baseline_median(CandleOp::LayerNorm));
    let mut cases = Vec::new();
    for (i, spec) in cfg.kinds.iter().enumerate() {
        for (d, dir) in Direction::ALL.into_iter().enumerate() {
            let timing: Timing = summarize(&mut case_times[cases_in(i, d)]);
            let bytes = dir.compulsory_bytes(shape, dtype);
            let ratio = |t: Option<f64>| (dir == Direction::Forward).then_some(t).flatten().map(|t| t / timing.median_s);
            cases.push(CaseResult {
                shape,
                dtype,
                kind: spec_label(spec),
                spec: *spec,
                direction: dir,
                timing,
                bytes,
                gb_per_s: gbs(bytes, timing.median_s),
                fraction_of_copy: f64::NAN, // set by `run`
                candle_rms_norm_ratio: ratio(rms_t),
                candle_layer_norm_ratio: ratio(layer_t),
                counters: case_counters[cases_in(i, d)],
            });
        }
    }
    Ok((baselines, cases))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> BenchConfig {
        BenchConfig {
            shapes: vec![Shape { rows: 40, n: 24 }],
            dtypes: vec![BenchDType::F32, BenchDType::BF16],
            reps: 2,
            copy_buffer_bytes: 1 << 20,
            copy_reps: 2,
            ..BenchConfig::quick()
        }
    }

    #[test]
    fn runs_every_case_and_calls_progress_once_per_step() {
        let cfg = tiny();
        let mut calls = 0u64;
        let r = run(&cfg, &mut |_| calls += 1).unwrap();
        assert_eq!(calls, cfg.steps());
        assert_eq!(r.cases.len(), 2 * 6 * 2);
        assert_eq!(r.baselines.len(), 2 * 2);
        for c in &r.cases {
            assert!(c.counters.is_clean(), "{c:?}");
            assert!(c.timing.median_s > 0.0 && c.gb_per_s > 0.0);
            assert_eq!(c.candle_rms_norm_ratio.is_some(), c.direction == Direction::Forward);
        }
        assert_eq!(r.summary.forwards, 12);
        let json = serde_json::to_string(&r).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back.cases.len(), r.cases.len());
    }

    /// Each round visits every case once (baselines first), and every case ends with exactly
    /// `reps` timed runs however they were split.
    #[test]
    fn rounds_visit_every_case_in_turn() {
        let cfg = BenchConfig { dtypes: vec![BenchDType::F32], kinds: vec![kind_spec("l1", 8).unwrap()], reps: 5, rounds: 3, ..tiny() };
        let mut labels = Vec::new();
        let r = run(&cfg, &mut |l| labels.push(l.to_string())).unwrap();
        assert_eq!(labels.len() as u64, cfg.steps());
        let per_round = CandleOp::ALL.len() + Direction::ALL.len();
        assert_eq!(labels.len(), 1 + 3 * per_round);
        for (i, l) in labels[1..].iter().enumerate() {
            let (round, pos) = (i / per_round, i % per_round);
            assert!(l.ends_with(&format!("(round {}/3)", round + 1)), "{i}: {l}");
            let expect = ["candle rms_norm", "candle layer_norm", "l1 forward", "l1 backward"][pos];
            assert!(l.contains(expect), "{i}: {l} (expected {expect})");
        }
        assert!(r.cases.iter().all(|c| c.timing.reps == 5) && r.baselines.iter().all(|b| b.timing.reps == 5));
        assert_eq!(r.config.rounds, 3);
    }

    #[test]
    fn refuses_more_rounds_than_runs() {
        for rounds in [0, 3] {
            let cfg = BenchConfig { reps: 2, rounds, ..tiny() };
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains("rounds") && e.contains(&rounds.to_string()), "{e}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn refuses_a_shape_larger_than_memory() {
        let mut cfg = tiny();
        cfg.shapes = vec![Shape { rows: 1 << 20, n: 1 << 20 }];
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("1048576x1048576") && e.contains("MiB"), "{e}");
    }

    #[test]
    fn refuses_topk_wider_than_the_row() {
        let mut cfg = tiny();
        cfg.kinds = vec![kind_spec("topk", 32).unwrap()];
        let e = run(&cfg, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("topk32") && e.contains("40x24"), "{e}");
    }
}
