//! `normlab gpu-check [--json] [--quick] [--gpu N] [--only FAMILY,..] [--precompile ARCH]`: every row kernel, the forward variants, the
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
    /// Check only these case families (comma-separated or repeated) [default: all]. A family
    /// whose launch fails ends its run; checking families in separate runs keeps the others'
    /// results.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "FAMILY")]
    pub only: Vec<CheckFamily>,
}

/// A family of gpu-check cases (`--only`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFamily {
    /// Row kernels, forward and backward.
    Rows,
    /// Forward variants: pure half and E4M3 output.
    Variants,
    /// Fused nGPT/anGPT residual updates.
    Updates,
    /// Batch-norm sequences.
    Batch,
    /// Fused weight projections.
    Project,
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

/// `--precompile`: every module's image for `arch`, as a table (a line per family as it
/// finishes) or JSON (in family order). The families compile on up to as many threads as the
/// machine has cores, the row kernels first: they take most of the time, and the others finish
/// beside them (sm_80 on a 2-vCPU Xeon guest, 2026-11-29: 77.9 s in all, the row kernels
/// 77.8 s; on one core, `taskset -c 0`, 90.4 s; the same images). After a failure no further
/// family is started and the first error is returned.
#[cfg(feature = "cuda")]
fn precompile(arch: &str, json: bool) -> Result<(), CliError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::mpsc;

    use crate::cli::output::{print, print_json, step_bar};
    use crate::gpu::module::{precompile, ImageInfo};
    use crate::gpu::GpuError;

    let (major, minor) = parse_arch(arch)?;
    // Largest first: the order in which the workers take them.
    let sources = [&crate::gpu::rows::ROWNORM, &crate::gpu::updates::RESIDUAL, &crate::gpu::batch::BATCHNORM, &crate::gpu::project::PROJECT, &crate::gpu::copy::COPY];
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(sources.len());
    let bar = step_bar(sources.len() as u64);
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    bar.set_message(format!("compiling {} kernel families for compute capability {major}.{minor} on {workers} threads", sources.len()));
    let (next, failed) = (AtomicUsize::new(0), AtomicBool::new(false));
    let mut infos: Vec<Option<ImageInfo>> = vec![None; sources.len()];
    let mut first_error: Option<CliError> = None;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, Result<ImageInfo, GpuError>, f64)>();
        for _ in 0..workers {
            let (tx, next, failed, sources) = (tx.clone(), &next, &failed, &sources);
            s.spawn(move || {
                while !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(src) = sources.get(i) else { break };
                    let t = std::time::Instant::now();
                    let r = precompile(src, major, minor);
                    failed.fetch_or(r.is_err(), Ordering::Relaxed);
                    if tx.send((i, r, t.elapsed().as_secs_f64())).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, r, secs) in rx {
            bar.inc(1);
            match r {
                Ok(info) => {
                    if !json && first_error.is_none() {
                        let file = info.cache_file.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(no disk cache)".into());
                        let line = format!("{:10} {:11} {:5} {:8} {:6.1} s  {}", info.module, info.target, info.kind, info.origin, secs, file);
                        if let Err(e) = bar.suspend(|| print(&line)) {
                            failed.store(true, Ordering::Relaxed);
                            first_error.get_or_insert(e);
                        }
                    }
                    infos[i] = Some(info);
                }
                Err(e) => {
                    first_error.get_or_insert(e.into());
                }
            }
        }
    });
    bar.finish_and_clear();
    if let Some(e) = first_error {
        return Err(e);
    }
    if json {
        print_json(&infos.into_iter().flatten().collect::<Vec<_>>())?;
    }
    Ok(())
}

#[cfg(feature = "cuda")]
pub fn run(args: GpuCheckArgs) -> Result<(), CliError> {
    use crate::cli::output::{print, print_json, step_bar};
    use crate::gpu::check::{render, run, total_cases, Families};
    use crate::gpu::GpuError;

    if let Some(arch) = &args.precompile {
        return precompile(arch, args.json);
    }
    let only = if args.only.is_empty() {
        Families::ALL
    } else {
        let has = |f| args.only.contains(&f);
        Families {
            rows: has(CheckFamily::Rows),
            variants: has(CheckFamily::Variants),
            updates: has(CheckFamily::Updates),
            batch: has(CheckFamily::Batch),
            project: has(CheckFamily::Project),
        }
    };
    let bar = step_bar(total_cases(args.quick, only) as u64);
    let report = run(args.gpu, args.quick, only, &mut |i, _, label| {
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
