//! `normlab bench --device cuda`: the device's copy bandwidth and every row kernel's throughput
//! on the shape, all measured with CUDA events on one stream.
//!
//! - **Copy bandwidth**: `nl_copy16` (16-byte vectors, persistent grid) over a 512 MiB buffer
//!   (far beyond any L2), counted as bytes read + bytes written.
//! - **Kernels**: every kind (Top-k with k = 8) in fp16 and bf16, forward (x read, y written:
//!   4 B/element) and backward (x, dy read, dx written: 6 B/element; no weight gradients), on
//!   `[16384 x 4096]` (block-per-row kernels) and on `[524288 x 128]` (the same bytes, the
//!   warp-per-row kernels, QK-norm's head_dim).
//! - **Time**: the median of R event-timed launches after W untimed ones; GB/s = compulsory bytes
//!   / median, `fraction_of_copy` = GB/s / copy GB/s. The goals (forward >= 0.90, backward >=
//!   0.85 of copy) are reported, not asserted.
//!
//! Nothing is printed that was not measured: without a GPU the run stops with a typed error
//! before any number exists.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use normlab_kernels::list::{Direction, Storage};
use normlab_norms::NormSpec;

use crate::bench::cases::{kind_spec, spec_label, Shape, KIND_NAMES};
use crate::bench::timing::{summarize, Timing};
use crate::gpu::args::FwdBuffers;
use crate::gpu::check::Session;
use crate::gpu::copy::{COPY, COPY_THREADS};
use crate::gpu::device::DeviceInfo;
use crate::gpu::error::{GpuError, Result};
use crate::gpu::module::{load, ImageInfo};
use crate::gpu::rows::BwdArgs;

pub const SCHEMA: &str = "normlab.bench.cuda/1";
pub const GOAL_FORWARD_FRACTION: f64 = 0.90;
pub const GOAL_BACKWARD_FRACTION: f64 = 0.85;
/// Source buffer of the copy measurement.
pub const COPY_BUFFER_BYTES: usize = 512 << 20;
/// The shape (block kernels) and the same bytes in 128-wide rows (warp kernels).
pub const SHAPES: [Shape; 2] = [Shape { rows: 16384, n: 4096 }, Shape { rows: 524288, n: 128 }];
pub const TOPK_K: usize = 8;

#[derive(Clone, Copy, Debug)]
pub struct CudaBenchConfig {
    pub ordinal: usize,
    pub reps: usize,
    pub warmup: usize,
}

impl Default for CudaBenchConfig {
    fn default() -> Self {
        CudaBenchConfig { ordinal: 0, reps: 20, warmup: 3 }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CopyResult {
    pub buffer_bytes: usize,
    /// read + write = 2 * buffer_bytes.
    pub bytes_per_rep: usize,
    pub grid: u32,
    pub block: u32,
    pub timing: Timing,
    pub gb_per_s: f64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CudaCase {
    pub kernel: String,
    pub kind: String,
    pub dtype: String,
    pub shape: Shape,
    pub direction: String,
    pub grid: u32,
    pub block: u32,
    pub smem: usize,
    pub bytes: usize,
    pub timing: Timing,
    pub gb_per_s: f64,
    pub fraction_of_copy: f64,
    pub goal_fraction: f64,
    pub meets_goal: bool,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CudaSummary {
    pub goal_forward_fraction: f64,
    pub goal_backward_fraction: f64,
    pub cases: usize,
    pub meeting_goal: usize,
    pub misses: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CudaBenchReport {
    pub schema: String,
    pub device: DeviceInfo,
    pub image: ImageInfo,
    pub reps: usize,
    pub warmup: usize,
    pub copy_bandwidth: CopyResult,
    pub cases: Vec<CudaCase>,
    pub summary: CudaSummary,
}

/// Median event time of `reps` runs of `f` after `warmup` untimed ones.
fn time_events(stream: &Arc<CudaStream>, warmup: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Timing> {
    for _ in 0..warmup {
        f()?;
    }
    let ev = |s: &Arc<CudaStream>| s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(GpuError::driver("cuEventRecord"));
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let start = ev(stream)?;
        f()?;
        let end = ev(stream)?;
        let ms = start.elapsed_ms(&end).map_err(GpuError::driver("cuEventElapsedTime"))?;
        times.push(ms as f64 * 1e-3);
    }
    Ok(summarize(&mut times))
}

/// Pseudo-random 16-bit data (values in [-2, 2]) of `storage`, without a slow normal generator.
fn random_bits(len: usize, storage: Storage, seed: u64) -> Vec<u16> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0;
            match storage {
                Storage::F16 => half::f16::from_f32(u).to_bits(),
                Storage::BF16 => half::bf16::from_f32(u).to_bits(),
            }
        })
        .collect()
}

fn measure_copy(s: &Session, cfg: &CudaBenchConfig) -> Result<CopyResult> {
    let (module, _) = load(&s.ctx, &COPY)?;
    let f = module.load_function("nl_copy16").map_err(GpuError::driver("cuModuleGetFunction"))?;
    let n16 = (COPY_BUFFER_BYTES / 16) as i64;
    let src = s.stream.clone_htod(&random_bits(COPY_BUFFER_BYTES / 2, Storage::F16, 7)).map_err(GpuError::driver("cuMemcpyHtoD"))?;
    let mut dst = s.stream.alloc_zeros::<u16>(COPY_BUFFER_BYTES / 2).map_err(GpuError::driver("cuMemAlloc"))?;
    let occ = f
        .occupancy_max_active_blocks_per_multiprocessor(COPY_THREADS, 0, None)
        .map_err(GpuError::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?
        .max(1);
    let grid = (s.kernels.info().sm_count * occ).min((n16 as u64).div_ceil(COPY_THREADS as u64) as u32).max(1);
    let launch = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (COPY_THREADS, 1, 1), shared_mem_bytes: 0 };
    let timing = time_events(&s.stream, cfg.warmup, cfg.reps, || {
        let mut b = s.stream.launch_builder(&f);
        b.arg(&src).arg(&mut dst).arg(&n16);
        // SAFETY: src and dst hold n16 16-byte vectors each.
        unsafe { b.launch(launch) }.map(|_| ()).map_err(GpuError::driver("cuLaunchKernel(nl_copy16)"))
    })?;
    // The copy must have copied: compare a sample.
    let (a, b) = (s.stream.clone_dtoh(&src.slice(0..4096)), s.stream.clone_dtoh(&dst.slice(0..4096)));
    if a.map_err(GpuError::driver("cuMemcpyDtoH"))? != b.map_err(GpuError::driver("cuMemcpyDtoH"))? {
        return Err(GpuError::Driver { call: "nl_copy16", message: "the copy kernel did not copy (destination differs)".into() });
    }
    let bytes_per_rep = 2 * COPY_BUFFER_BYTES;
    Ok(CopyResult { buffer_bytes: COPY_BUFFER_BYTES, bytes_per_rep, grid, block: COPY_THREADS, timing, gb_per_s: bytes_per_rep as f64 / timing.median_s / 1e9 })
}

/// Buffers of one shape and dtype.
struct Bufs {
    x: CudaSlice<u16>,
    dy: CudaSlice<u16>,
    out: CudaSlice<u16>,
    stats: CudaSlice<f32>,
}

#[allow(clippy::too_many_arguments)]
fn measure_kernel(
    s: &Session,
    cfg: &CudaBenchConfig,
    b: &mut Bufs,
    spec: &NormSpec,
    storage: Storage,
    shape: Shape,
    dir: Direction,
    copy_gbs: f64,
) -> Result<CudaCase> {
    let st = &s.stream;
    let (xa, _g1) = b.x.device_ptr(st);
    let (dya, _g2) = b.dy.device_ptr(st);
    let (oa, _g3) = b.out.device_ptr_mut(st);
    let (sa, _g4) = b.stats.device_ptr_mut(st);
    let fwd = FwdBuffers { rows: shape.rows, x: xa, y: oa, weight: None, bias: None, stats: Some(sa) };
    let bwd = BwdArgs { rows: shape.rows, x: xa, dy: dya, stats: sa, weight: None, dx: oa, dweight: None, dbias: None };
    // The backward reads this spec's statistics: one forward first.
    // SAFETY: the buffers hold rows * n elements (stats: rows * 16 bytes) of this shape.
    let plan = unsafe { s.kernels.forward(st, spec, storage, shape.n, &fwd)? };
    let mut plan_b = None;
    let timing = time_events(st, cfg.warmup, cfg.reps, || {
        unsafe {
            match dir {
                Direction::Forward => s.kernels.forward(st, spec, storage, shape.n, &fwd).map(|_| ()),
                Direction::Backward => s.kernels.backward(st, spec, storage, shape.n, &bwd).map(|p| plan_b = Some(p)),
            }
        }
    })?;
    let p = plan_b.unwrap_or(plan);
    let tensors = match dir {
        Direction::Forward => 2,
        Direction::Backward => 3,
    };
    let bytes = tensors * shape.elems() * 2;
    let gb_per_s = bytes as f64 / timing.median_s / 1e9;
    let fraction_of_copy = gb_per_s / copy_gbs;
    let goal_fraction = match dir {
        Direction::Forward => GOAL_FORWARD_FRACTION,
        Direction::Backward => GOAL_BACKWARD_FRACTION,
    };
    Ok(CudaCase {
        kernel: p.kernel,
        kind: spec_label(spec),
        dtype: storage.name().to_string(),
        shape,
        direction: match dir {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        }
        .to_string(),
        grid: p.grid,
        block: p.block,
        smem: p.smem,
        bytes,
        timing,
        gb_per_s,
        fraction_of_copy,
        goal_fraction,
        meets_goal: fraction_of_copy >= goal_fraction,
    })
}

/// Number of measured kernel cases (for a progress bar).
pub fn case_count() -> usize {
    SHAPES.len() * Storage::ALL.len() * KIND_NAMES.len() * 2
}

/// Measure the copy bandwidth and every kernel; `progress(label)` before each step.
pub fn run(cfg: &CudaBenchConfig, progress: &mut dyn FnMut(&str)) -> Result<CudaBenchReport> {
    let s = Session::open(cfg.ordinal)?;
    progress("copy bandwidth");
    let copy = measure_copy(&s, cfg)?;
    let mut cases = Vec::new();
    for shape in SHAPES {
        for storage in Storage::ALL {
            let len = shape.elems();
            let up = |seed| s.stream.clone_htod(&random_bits(len, storage, seed)).map_err(GpuError::driver("cuMemcpyHtoD"));
            let mut bufs = Bufs {
                x: up(11)?,
                dy: up(13)?,
                out: s.stream.alloc_zeros::<u16>(len).map_err(GpuError::driver("cuMemAlloc"))?,
                stats: s.stream.alloc_zeros::<f32>(shape.rows * 4).map_err(GpuError::driver("cuMemAlloc"))?,
            };
            for name in KIND_NAMES {
                let spec = kind_spec(name, TOPK_K).map_err(|e| GpuError::Plan(crate::gpu::PlanError(e.to_string())))?;
                for dir in [Direction::Forward, Direction::Backward] {
                    progress(&format!("{} {} {shape} {:?}", spec_label(&spec), storage.name(), dir));
                    cases.push(measure_kernel(&s, cfg, &mut bufs, &spec, storage, shape, dir, copy.gb_per_s)?);
                }
            }
        }
    }
    let misses: Vec<String> = cases
        .iter()
        .filter(|c| !c.meets_goal)
        .map(|c| format!("{} {} {}: {:.1}% of copy (goal {:.0}%)", c.kernel, c.shape, c.direction, 100.0 * c.fraction_of_copy, 100.0 * c.goal_fraction))
        .collect();
    let summary = CudaSummary {
        goal_forward_fraction: GOAL_FORWARD_FRACTION,
        goal_backward_fraction: GOAL_BACKWARD_FRACTION,
        cases: cases.len(),
        meeting_goal: cases.len() - misses.len(),
        misses,
    };
    Ok(CudaBenchReport {
        schema: SCHEMA.to_string(),
        device: s.kernels.info().clone(),
        image: s.kernels.image().clone(),
        reps: cfg.reps,
        warmup: cfg.warmup,
        copy_bandwidth: copy,
        cases,
        summary,
    })
}

/// The text table.
pub fn render(r: &CudaBenchReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let d = &r.device;
    let _ = writeln!(s, "device {}: {} (sm_{}{}, {} SMs), kernels {} ({})", d.ordinal, d.name, d.compute_capability.0, d.compute_capability.1, d.sm_count, r.image.target, r.image.kind);
    let c = &r.copy_bandwidth;
    let _ = writeln!(s, "copy bandwidth: {:.1} GB/s (nl_copy16, {} MiB buffer, read + write, median of {})\n", c.gb_per_s, c.buffer_bytes >> 20, c.timing.reps);
    let _ = writeln!(s, "{:<28} {:>12} {:<9} {:>10} {:>9} {:>8} {:>6}", "kernel", "shape", "direction", "median us", "GB/s", "of copy", "goal");
    for k in &r.cases {
        let _ = writeln!(
            s,
            "{:<28} {:>12} {:<9} {:>10.1} {:>9.1} {:>7.1}% {:>6}",
            k.kernel,
            k.shape.to_string(),
            k.direction,
            k.timing.median_s * 1e6,
            k.gb_per_s,
            100.0 * k.fraction_of_copy,
            if k.meets_goal { "met" } else { "MISS" }
        );
    }
    let _ = writeln!(
        s,
        "\nGoals: forward >= {:.0}%, backward >= {:.0}% of copy bandwidth: {} of {} cases meet them",
        100.0 * r.summary.goal_forward_fraction,
        100.0 * r.summary.goal_backward_fraction,
        r.summary.meeting_goal,
        r.summary.cases
    );
    s
}
