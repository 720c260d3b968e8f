//! `normlab train`: one training run from an experiment TOML.
//!
//! `normlab train --config experiments/NAME.toml [--set train.lr=1e-3 ...] --out DIR [--resume] [--json]`
//! writes `DIR/metrics.jsonl`, `DIR/checkpoint/` and, at the end, `DIR/summary.json`, and
//! prints the summary (text, or the summary's JSON with `--json`).

use std::path::PathBuf;

use candle_core::Device;
use clap::Args;

use crate::cli::output::{print, print_json};
use crate::cli::CliError;
use crate::train::{default_run_name, load_experiment, RunOptions, RunSummary};

#[derive(Debug, Args)]
#[command(after_help = "Overrides are dotted keys into the TOML tables, the value read as TOML (a bare word is a \
string): --set train.lr=1e-3 --set train.precision=pure_f16 --set 'model.norm={ kind = \"top_k\", k = 8 }'.\n\n\
Example: normlab train --config experiments/tiny.toml --set train.steps=50 --out runs/tiny")]
pub struct TrainArgs {
    /// The experiment file ([model], [train], [data] tables).
    #[arg(long)]
    pub config: PathBuf,
    /// Override one value, KEY=VALUE (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// The run directory (metrics.jsonl, checkpoint/, summary.json).
    #[arg(long)]
    pub out: PathBuf,
    /// Continue from DIR/checkpoint (a fresh start when there is none).
    #[arg(long)]
    pub resume: bool,
    /// Name of the run in the summary [default: arch-norm-precision-sSEED].
    #[arg(long)]
    pub name: Option<String>,
    /// cpu, or cuda (needs a build with candle's CUDA backend).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Print the summary as JSON (schema normlab.run/1) on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

fn device(name: &str) -> Result<Device, CliError> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0).map_err(|e| CliError::InvalidArg {
            flag: "--device",
            value: name.into(),
            why: format!("no CUDA device: {e}"),
        }),
        other => Err(CliError::InvalidArg { flag: "--device", value: other.into(), why: "expected cpu or cuda".into() }),
    }
}

/// The summary as a few lines of text.
pub fn render_text(s: &RunSummary) -> String {
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    let mut t = format!("run {} ({} / {} / {}, seed {})\n", s.name, s.arch, s.norm, s.precision, s.seed);
    t += &format!("  steps {}  tokens {}  wall {:.1} s\n", s.steps, s.tokens, s.wall_s);
    t += &format!("  val loss final {}  best {}\n", opt(s.final_val_loss), opt(s.best_val_loss));
    t += &format!("  median step {:.4} s  {:.0} tokens/s\n", s.median_step_time_s, s.tokens_per_s);
    t += &format!(
        "  norm counters: non-finite in {}, accumulator overflows {}, non-finite out {}; skipped steps {}\n",
        s.counters.nonfinite_in, s.counters.acc_overflow, s.counters.nonfinite_out, s.skipped_steps
    );
    if let Some(d) = s.diverged_at {
        t += &format!("  DIVERGED at step {d} (non-finite loss)\n");
    }
    t
}

pub fn run(args: TrainArgs) -> Result<(), CliError> {
    let cfg = load_experiment(&args.config, &args.sets)?;
    let device = device(&args.device)?;
    let name = args.name.clone().unwrap_or_else(|| default_run_name(&cfg));
    let opts = RunOptions { device, resume: args.resume, progress: !args.quiet };
    let summary = crate::train::run(&cfg, &name, &args.out, &opts)?;
    if args.json {
        print_json(&summary)
    } else {
        print(&render_text(&summary))
    }
}
