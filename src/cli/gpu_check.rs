//! `normlab gpu-check [--json] [--quick] [--gpu N]`: every row kernel, the forward variants, the
//! fused nGPT/anGPT residual updates, every batch-norm sequence and the fused weight projections
//! on the GPU against the f64 reference (the projections: against `normlab_norms::weight`) over
//! many shapes (`crate::gpu::check`, `crate::gpu::check_updates`, `crate::gpu::check_batch`,
//! `crate::gpu::check_project`), as tables of max ulp errors per kernel and shape. Exits 1 when a
//! case exceeds its bound, and, with the reason, when there is
//! no GPU runtime (built without `cuda`), no driver, no device or no NVRTC.

use clap::Args;

use crate::cli::CliError;

#[derive(Debug, Args)]
#[command(after_help = "Needs a build with `--features cuda`, an NVIDIA driver and GPU (sm_80 or newer), and NVRTC \
(libnvrtc on the loader path or NORMLAB_NVRTC_LIB) with the CUDA headers (NORMLAB_CUDA_INCLUDE if not found). \
Compiled kernels are cached in ~/.cache/normlab/ptx (NORMLAB_PTX_CACHE).")]
pub struct GpuCheckArgs {
    /// Print the report as JSON (schema normlab.gpu_check/1) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Three shapes instead of twelve (seconds).
    #[arg(long)]
    pub quick: bool,
    /// The CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
}

#[cfg(not(feature = "cuda"))]
pub fn run(args: GpuCheckArgs) -> Result<(), CliError> {
    let _ = args;
    Err(crate::gpu::GpuError::NotBuilt.into())
}

#[cfg(feature = "cuda")]
pub fn run(args: GpuCheckArgs) -> Result<(), CliError> {
    use indicatif::{ProgressBar, ProgressStyle};

    use crate::cli::output::{print, print_json};
    use crate::gpu::check::{render, run, total_cases};
    use crate::gpu::GpuError;

    let bar = ProgressBar::new(total_cases(args.quick) as u64);
    bar.set_style(ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    let report = run(args.gpu, args.quick, &mut |i, _, label| {
        bar.set_position(i as u64);
        bar.set_message(label.to_string());
    });
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        print_json(&report)?;
    } else {
        print(&render(&report))?;
    }
    if report.failed > 0 {
        return Err(GpuError::CheckFailed { failed: report.failed, total: report.total }.into());
    }
    Ok(())
}
