//! `normlab compare`: train the matrix of a preset side by side and write the report.
//!
//! `normlab compare --preset quick|standard|full|mini|PATH.toml [--device cpu|cuda] --out DIR
//! [--report-only] [--json]`. Finished runs in DIR are kept; an interrupted comparison resumes
//! (see `crate::compare::runner`). DIR holding another preset, a corrupt manifest or anything
//! else is refused with an error.

use std::path::PathBuf;

use candle_core::Device;
use clap::Args;

use crate::cli::output::{print, print_json};
use crate::cli::CliError;
use crate::compare::claims::Verdict;
use crate::compare::{run_cells, write_report, Preset, RunOutcome, TrainRunner};

#[derive(Debug, Args)]
#[command(after_help = "DIR gets manifest.json, runs/CELL/ (one training run each), plots/, report.md, report.html and summary.json \
(schema in docs/summary-schema.md). Re-running the same command resumes: finished runs are never repeated.\n\n\
Example: normlab compare --preset quick --out results/quick")]
pub struct CompareArgs {
    /// mini, quick, standard, full, or the path of a preset .toml file.
    #[arg(long)]
    pub preset: String,
    /// cpu, or cuda (where candle's CUDA backend is built).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Output directory (created; must be empty or hold this preset's comparison).
    #[arg(long)]
    pub out: PathBuf,
    /// Do not train: write the report from the runs already finished in --out.
    #[arg(long)]
    pub report_only: bool,
    /// Print a JSON summary instead of text (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

fn device(name: &str) -> Result<Device, CliError> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0).map_err(|e| CliError::InvalidArg { flag: "--device", value: name.into(), why: e.to_string() }),
        _ => Err(CliError::InvalidArg { flag: "--device", value: name.into(), why: "expected cpu or cuda".into() }),
    }
}

pub fn run(args: CompareArgs) -> Result<(), CliError> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let preset = Preset::load(&args.preset)?;
    let outcome = if args.report_only {
        crate::compare::manifest::prepare_dir(&args.out, &preset)?;
        RunOutcome::default()
    } else {
        let runner = TrainRunner { device: device(&args.device)? };
        run_cells(&preset, &args.out, &runner, !args.json)?
    };
    let summary = write_report(&preset, &args.out, &command)?;
    if args.json {
        let v = serde_json::json!({
            "dir": args.out.display().to_string(),
            "preset": preset.name,
            "preset_hash": preset.hash,
            "ran": outcome.ran,
            "skipped": outcome.skipped,
            "missing_cells": summary.missing_cells,
            "report_md": args.out.join("report.md").display().to_string(),
            "report_html": args.out.join("report.html").display().to_string(),
            "summary_json": args.out.join("summary.json").display().to_string(),
            "claims": summary.claims,
        });
        return print_json(&v);
    }
    let mut text = format!(
        "comparison '{}' in {}: {} runs now, {} already finished, {} missing\nreport: {}\n        {}\n        {}\nclaims:\n",
        preset.name,
        args.out.display(),
        outcome.ran.len(),
        outcome.skipped.len(),
        summary.missing_cells.len(),
        args.out.join("report.md").display(),
        args.out.join("report.html").display(),
        args.out.join("summary.json").display()
    );
    for c in &summary.claims {
        let mark = match c.verdict {
            Verdict::Supported => "+",
            Verdict::NotSupported => "-",
            Verdict::NotMeasured => "?",
        };
        text.push_str(&format!("  {mark} {}: {} -> {}\n", c.source, c.claim, c.verdict.text()));
    }
    print(&text)
}
