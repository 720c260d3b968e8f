//! `normlab gpu-check [--json] [--quick] [--gpu N] [--precompile ARCH]`: every row kernel, the forward variants, the
//! fused nGPT/anGPT residual updates, every batch-norm sequence and the fused weight projections
//! on the GPU against the f64 reference (the projections: against `normlab_norms::weight`) over
//! many shapes (`crate::gpu::check`, `crate::gpu::check_updates`, `crate::gpu::check_batch`,
//! `crate::gpu::check_project`), as tables of max ulp errors per kernel and shape. Exits 1 when a
//! case exceeds its bound, and, with the reason, when there is
//! no GPU runtime (built without `cuda`), no driver, no device or no NVRTC. `--precompile ARCH`
//! instead fills the kernel cache for that compute capability (`crate::gpu::module::precompile`),
//! with NVRTC and no GPU.

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
    /// Compile every kernel module for this compute capability (`sm_90`, `90` or `9.0`) into the
    /// kernel cache and exit, checking nothing: needs NVRTC but no GPU or driver. A GPU machine
    /// given the cache (NORMLAB_PTX_CACHE) then skips the compile at first use.
    #[arg(long, value_name = "ARCH")]
    pub precompile: Option<String>,
}

/// `sm_90`, `90` or `9.0` as (major, minor).
pub fn parse_arch(v: &str) -> Result<(i32, i32), CliError> {
    let bad = |why: &str| CliError::InvalidArg { flag: "--precompile", value: v.to_string(), why: why.to_string() };
    let t = v.trim().trim_start_matches("sm_").trim_start_matches("compute_");
    let (major, minor) = match t.split_once('.') {
        Some((a, b)) => (a.parse::<i32>().map_err(|_| bad("expected sm_XY, XY or X.Y"))?, b.parse::<i32>().map_err(|_| bad("expected sm_XY, XY or X.Y"))?),
        None => {
            let a = t.parse::<i32>().map_err(|_| bad("expected sm_XY, XY or X.Y"))?;
            (a / 10, a % 10)
        }
    };
    if !(1..=99).contains(&major) || !(0..=9).contains(&minor) {
        return Err(bad("not a compute capability"));
    }
    Ok((major, minor))
}

#[cfg(not(feature = "cuda"))]
pub fn run(args: GpuCheckArgs) -> Result<(), CliError> {
    if let Some(a) = &args.precompile {
        parse_arch(a)?;
    }
    Err(crate::gpu::GpuError::NotBuilt.into())
}

/// `--precompile`: every module's image for `arch`, as a table or JSON.
#[cfg(feature = "cuda")]
fn precompile(arch: &str, json: bool) -> Result<(), CliError> {
    use crate::cli::output::{print, print_json, step_bar};
    use crate::gpu::module::precompile;
    let (major, minor) = parse_arch(arch)?;
    let sources = [&crate::gpu::rows::ROWNORM, &crate::gpu::updates::RESIDUAL, &crate::gpu::batch::BATCHNORM, &crate::gpu::project::PROJECT, &crate::gpu::copy::COPY];
    // The row kernels alone take about a minute.
    let bar = step_bar(sources.len() as u64);
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    let mut infos = Vec::new();
    for src in sources {
        bar.set_message(format!("compiling {} for compute capability {major}.{minor}", src.module));
        let t = std::time::Instant::now();
        let info = precompile(src, major, minor).inspect_err(|_| bar.finish_and_clear())?;
        bar.inc(1);
        if !json {
            let file = info.cache_file.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(no disk cache)".into());
            let line = format!("{:10} {:11} {:5} {:8} {:6.1} s  {}", info.module, info.target, info.kind, info.origin, t.elapsed().as_secs_f64(), file);
            bar.suspend(|| print(&line))?;
        }
        infos.push(info);
    }
    bar.finish_and_clear();
    if json {
        print_json(&infos)?;
    }
    Ok(())
}

#[cfg(feature = "cuda")]
pub fn run(args: GpuCheckArgs) -> Result<(), CliError> {
    use crate::cli::output::{print, print_json, step_bar};
    use crate::gpu::check::{render, run, total_cases};
    use crate::gpu::GpuError;

    if let Some(arch) = &args.precompile {
        return precompile(arch, args.json);
    }
    let bar = step_bar(total_cases(args.quick) as u64);
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

#[cfg(test)]
mod tests {
    use super::parse_arch;

    #[test]
    fn arch_spellings_and_typed_errors() {
        assert_eq!(parse_arch("sm_90").unwrap(), (9, 0));
        assert_eq!(parse_arch("86").unwrap(), (8, 6));
        assert_eq!(parse_arch("12.0").unwrap(), (12, 0));
        assert_eq!(parse_arch("120").unwrap(), (12, 0));
        assert_eq!(parse_arch("compute_80").unwrap(), (8, 0));
        for bad in ["", "sm_", "ninety", "9.x", "0", "9.12"] {
            let e = parse_arch(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("'{bad}'")) && e.contains("--precompile"), "{e}");
        }
    }
}
