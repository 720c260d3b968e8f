//! `normlab bench --device cuda [--json] [--reps R] [--gpu N]`: flags and driver of the GPU
//! benchmark (`crate::bench::cuda`). Without the `cuda` feature, or without a GPU, it fails with
//! the reason and prints no number.

use clap::Args;

use crate::cli::CliError;

/// Flags of `normlab bench --device cuda`.
#[derive(Debug, Args)]
pub struct CudaBenchArgs {
    /// With `--device cuda`: print the report as JSON (schema normlab.bench.cuda/1).
    #[arg(long)]
    pub json: bool,
    /// With `--device cuda`: timed launches per kernel (the median is reported) [default: 20].
    #[arg(long)]
    pub reps: Option<usize>,
    /// With `--device cuda`: the CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
}

#[cfg(not(feature = "cuda"))]
pub fn run(args: CudaBenchArgs) -> Result<(), CliError> {
    let _ = args;
    Err(crate::gpu::GpuError::NotBuilt.into())
}

#[cfg(feature = "cuda")]
pub fn run(args: CudaBenchArgs) -> Result<(), CliError> {
    use crate::bench::cuda::{case_count, render, run, CudaBenchConfig};
    use crate::cli::output::{print, print_json};

    let mut cfg = CudaBenchConfig { ordinal: args.gpu, ..Default::default() };
    if let Some(r) = args.reps {
        if r == 0 {
            return Err(CliError::InvalidArg { flag: "--reps", value: "0".into(), why: "need at least 1 timed run".into() });
        }
        cfg.reps = r;
    }
    let bar = crate::cli::output::step_bar(case_count() as u64 + 1);
    let mut started = false;
    let report = run(&cfg, &mut |label| {
        if started {
            bar.inc(1);
        }
        started = true;
        bar.set_message(label.to_string());
    });
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        print_json(&report)
    } else {
        print(&render(&report))
    }
}
