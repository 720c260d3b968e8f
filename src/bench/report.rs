//! The result of `normlab bench norms`: the JSON schema (`--json`, serde) and the text table.
//!
//! # JSON schema `normlab.bench.norms/1`
//!
//! ```text
//! {
//!   "schema": "normlab.bench.norms/1",
//!   "provenance": { "machine": { "cpu_model", "logical_cores", "rayon_threads", "memory_bytes", "load_avg_1m", "os", "arch" },
//!                   "versions": { "normlab", "normlab_norms", "candle_core", "candle_nn", "rustc", "profile" },
//!                   "git_commit", "git_dirty", "unix_time" },
//!   "config": { "shapes": [{"rows","n"}], "dtypes": ["f32"|"f16"|"bf16"], "kinds": [label], "topk_k",
//!               "reps", "rounds" (the reps spread over them; 1 in reports before it existed), "warmup" (per
//!               case and round), "quick", "accum": "f32", "eps", "copy_buffer_bytes", "copy_reps",
//!               "staged_output" (false: run with the hidden `--unstaged`; true in reports before it existed) },
//!   "copy_bandwidth": { "buffer_bytes", "bytes_per_rep" (read + write), "timing" (over every copy),
//!                       "gb_per_s" (of the median), "rounds" (sampled before the first case and after
//!                       every shape x dtype; fractions are of this median) },
//!   "cases": [ { "shape", "dtype", "kind" (label, e.g. "topk8"), "spec" (NormSpec), "direction": "forward"|"backward",
//!                "timing": { "median_s", "min_s", "max_s", "reps" }, "bytes" (compulsory), "gb_per_s",
//!                "fraction_of_copy", "candle_rms_norm_ratio", "candle_layer_norm_ratio" (candle median /
//!                our median, forwards only, else null), "counters" } ],
//!   "baselines": [ { "shape", "dtype", "op": "candle_nn::ops::rms_norm"|"candle_nn::ops::layer_norm",
//!                    "timing", "bytes", "gb_per_s", "fraction_of_copy" } ],
//!   "summary": { "goal_min_candle_rms_norm_ratio": 3.0, "goal_min_fraction_of_copy": 0.6, "forwards",
//!                "forwards_meeting_ratio", "forwards_meeting_copy_fraction", "misses": [text] }
//! }
//! ```
//!
//! Times are seconds; `gb_per_s` is 1e9 bytes per second of compulsory bytes (forward: x read +
//! y written; backward: x, dy read + dx written) divided by the median time.

use std::fmt::Write as _;

use normlab_norms::{Counters, NormSpec};

use crate::bench::bandwidth::CopyBandwidth;
use crate::bench::candle_ref::CandleOp;
use crate::bench::cases::{BenchDType, Direction, Shape};
use crate::bench::machine::Provenance;
use crate::bench::timing::Timing;

pub const SCHEMA: &str = "normlab.bench.norms/1";
/// The issue's goals: every forward at least 3x faster than candle-nn's rms_norm on the same
/// shape and dtype, and at least 60% of the measured copy bandwidth.
pub const GOAL_MIN_CANDLE_RMS_RATIO: f64 = 3.0;
pub const GOAL_MIN_FRACTION_OF_COPY: f64 = 0.6;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub schema: String,
    pub provenance: Provenance,
    pub config: ConfigEcho,
    pub copy_bandwidth: CopyBandwidth,
    pub cases: Vec<CaseResult>,
    pub baselines: Vec<BaselineResult>,
    pub summary: Summary,
}

/// The configuration the run used, echoed so a JSON file is self-describing.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConfigEcho {
    pub shapes: Vec<Shape>,
    pub dtypes: Vec<BenchDType>,
    pub kinds: Vec<String>,
    pub topk_k: Option<usize>,
    pub reps: usize,
    /// Rounds the timed runs were spread over, every case once per round (1: reports written
    /// before rounds existed timed each case in one block).
    #[serde(default = "one_round")]
    pub rounds: usize,
    pub warmup: usize,
    pub quick: bool,
    pub accum: String,
    pub eps: f64,
    pub copy_buffer_bytes: usize,
    pub copy_reps: usize,
    /// Whether the forward staged its streamed rows (`row::STAGED_OUTPUT`; off only with the
    /// hidden `--unstaged`, to measure what staging brings).
    #[serde(default = "staged")]
    pub staged_output: bool,
}

fn one_round() -> usize {
    1
}

fn staged() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CaseResult {
    pub shape: Shape,
    pub dtype: BenchDType,
    pub kind: String,
    pub spec: NormSpec,
    pub direction: Direction,
    pub timing: Timing,
    pub bytes: usize,
    pub gb_per_s: f64,
    pub fraction_of_copy: f64,
    pub candle_rms_norm_ratio: Option<f64>,
    pub candle_layer_norm_ratio: Option<f64>,
    /// Numerical counters of the last timed call (all zero on this Gaussian input).
    pub counters: Counters,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BaselineResult {
    pub shape: Shape,
    pub dtype: BenchDType,
    pub op: CandleOp,
    pub timing: Timing,
    pub bytes: usize,
    pub gb_per_s: f64,
    pub fraction_of_copy: f64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub goal_min_candle_rms_norm_ratio: f64,
    pub goal_min_fraction_of_copy: f64,
    pub forwards: usize,
    pub forwards_meeting_ratio: usize,
    pub forwards_meeting_copy_fraction: usize,
    /// One line per forward that misses a goal.
    pub misses: Vec<String>,
}

impl Summary {
    pub fn from_cases(cases: &[CaseResult]) -> Self {
        let fwd: Vec<&CaseResult> = cases.iter().filter(|c| c.direction == Direction::Forward).collect();
        let meets_ratio = |c: &CaseResult| c.candle_rms_norm_ratio.is_some_and(|r| r >= GOAL_MIN_CANDLE_RMS_RATIO);
        let meets_copy = |c: &CaseResult| c.fraction_of_copy >= GOAL_MIN_FRACTION_OF_COPY;
        let mut misses = Vec::new();
        for c in &fwd {
            let mut why = Vec::new();
            if !meets_ratio(c) {
                match c.candle_rms_norm_ratio {
                    Some(r) => why.push(format!("{r:.2}x candle rms_norm < {GOAL_MIN_CANDLE_RMS_RATIO}x")),
                    None => why.push("no candle rms_norm baseline".to_string()),
                }
            }
            if !meets_copy(c) {
                why.push(format!("{:.0}% of copy bandwidth < {:.0}%", 100.0 * c.fraction_of_copy, 100.0 * GOAL_MIN_FRACTION_OF_COPY));
            }
            if !why.is_empty() {
                misses.push(format!("{} {} {} forward: {}", c.shape, c.dtype, c.kind, why.join("; ")));
            }
        }
        Summary {
            goal_min_candle_rms_norm_ratio: GOAL_MIN_CANDLE_RMS_RATIO,
            goal_min_fraction_of_copy: GOAL_MIN_FRACTION_OF_COPY,
            forwards: fwd.len(),
            forwards_meeting_ratio: fwd.iter().filter(|c| meets_ratio(c)).count(),
            forwards_meeting_copy_fraction: fwd.iter().filter(|c| meets_copy(c)).count(),
            misses,
        }
    }
}

fn opt_ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".to_string())
}

/// The human-readable report (what `normlab bench norms` prints without `--json`).
pub fn render_text(r: &Report) -> String {
    let mut s = String::new();
    let p = &r.provenance;
    let _ = writeln!(
        s,
        "machine: {} ({} logical cores, {} rayon threads, load {}), {} build, normlab {}, candle-nn {}, commit {}",
        p.machine.cpu_model.as_deref().unwrap_or("unknown CPU"),
        p.machine.logical_cores,
        p.machine.rayon_threads,
        p.machine.load_avg_1m.map(|l| format!("{l:.2}")).unwrap_or_else(|| "?".into()),
        p.versions.profile,
        p.versions.normlab,
        p.versions.candle_nn.as_deref().unwrap_or("?"),
        p.git_commit.as_deref().map(|c| &c[..c.len().min(12)]).unwrap_or("?"),
    );
    let bw = &r.copy_bandwidth;
    let _ = writeln!(
        s,
        "copy bandwidth: {:.2} GB/s (read + write of a {} MiB buffer, median of {} copies in {} rounds through the run; {:.1} to {:.1} GB/s)",
        bw.gb_per_s,
        bw.buffer_bytes >> 20,
        bw.timing.reps,
        bw.rounds,
        bw.bytes_per_rep as f64 / bw.timing.max_s / 1e9,
        bw.bytes_per_rep as f64 / bw.timing.min_s / 1e9,
    );
    let _ = writeln!(
        s,
        "times: median of {} runs in {} round{} through each shape x dtype (every case per round, after {} warm-up); GB/s of compulsory bytes; accum f32\n",
        r.config.reps,
        r.config.rounds,
        if r.config.rounds == 1 { "" } else { "s" },
        r.config.warmup
    );
    if !r.config.staged_output {
        let _ = writeln!(s, "streamed forward rows NOT staged (--unstaged): an A/B measurement, not the default forward\n");
    }
    let _ = writeln!(
        s,
        "{:<11} {:<5} {:<18} {:<8} {:>11} {:>8} {:>6} {:>10} {:>12}",
        "shape", "dtype", "kind", "dir", "median ms", "GB/s", "%copy", "vs rms", "vs layer"
    );
    for b in &r.baselines {
        let _ = writeln!(
            s,
            "{:<11} {:<5} {:<18} {:<8} {:>11.3} {:>8.2} {:>5.0}% {:>10} {:>12}",
            b.shape.to_string(),
            b.dtype.name(),
            b.op.name(),
            "forward",
            b.timing.median_s * 1e3,
            b.gb_per_s,
            100.0 * b.fraction_of_copy,
            "",
            ""
        );
    }
    for c in &r.cases {
        let _ = writeln!(
            s,
            "{:<11} {:<5} {:<18} {:<8} {:>11.3} {:>8.2} {:>5.0}% {:>10} {:>12}",
            c.shape.to_string(),
            c.dtype.name(),
            c.kind,
            c.direction.name(),
            c.timing.median_s * 1e3,
            c.gb_per_s,
            100.0 * c.fraction_of_copy,
            opt_ratio(c.candle_rms_norm_ratio),
            opt_ratio(c.candle_layer_norm_ratio),
        );
    }
    let sm = &r.summary;
    let _ = writeln!(
        s,
        "\n\"vs rms\"/\"vs layer\" = candle median / our median (forwards). Goals: >= {}x candle rms_norm: {}/{} forwards; >= {:.0}% of copy bandwidth: {}/{} forwards.",
        sm.goal_min_candle_rms_norm_ratio,
        sm.forwards_meeting_ratio,
        sm.forwards,
        100.0 * sm.goal_min_fraction_of_copy,
        sm.forwards_meeting_copy_fraction,
        sm.forwards
    );
    for m in &sm.misses {
        let _ = writeln!(s, "  miss: {m}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use normlab_norms::NormSpec;

    fn case(dir: Direction, frac: f64, ratio: Option<f64>) -> CaseResult {
        CaseResult {
            shape: Shape { rows: 2, n: 8 },
            dtype: BenchDType::F32,
            kind: "rms".into(),
            spec: NormSpec::rms(1e-5),
            direction: dir,
            timing: Timing { median_s: 1.0, min_s: 1.0, max_s: 1.0, reps: 1 },
            bytes: 128,
            gb_per_s: 1.0,
            fraction_of_copy: frac,
            candle_rms_norm_ratio: ratio,
            candle_layer_norm_ratio: None,
            counters: Counters::default(),
        }
    }

    /// Reports written before rounds existed (the committed ones included) still load, as
    /// one round.
    #[test]
    fn reports_without_rounds_load_as_one_round() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/results/bench/norms-earlier-runs/1.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["config"].as_object_mut().unwrap().remove("rounds");
        v["config"].as_object_mut().unwrap().remove("staged_output");
        let r: Report = serde_json::from_value(v).unwrap();
        assert_eq!(r.config.rounds, 1);
        assert!(r.config.staged_output);
    }

    #[test]
    fn summary_counts_goals_on_forwards_only() {
        let cases = [
            case(Direction::Forward, 0.7, Some(3.5)),
            case(Direction::Forward, 0.5, Some(3.0)),
            case(Direction::Forward, 0.9, Some(2.9)),
            case(Direction::Forward, 0.9, None),
            case(Direction::Backward, 0.1, None),
        ];
        let s = Summary::from_cases(&cases);
        assert_eq!((s.forwards, s.forwards_meeting_ratio, s.forwards_meeting_copy_fraction), (4, 2, 3));
        assert_eq!(s.misses.len(), 3);
        assert!(s.misses[0].contains("50% of copy"));
        assert!(s.misses[1].contains("2.90x"));
    }
}
