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
//! - **Weight projections**: the fused post-step projection (`nl_project_<dtype>`, ONE launch)
//!   over every matrix of an nGPT-sized model ([`PROJECT_MODEL`]: d = 1024, 24 layers, 146
//!   matrices, 487M elements): nGPT's unit rows / columns in bf16 and f32, anGPT's unit-ball rows
//!   in bf16. Every timed launch projects fresh data (the matrices are restored from a pristine
//!   copy before it, outside the timed events: projected data would only be read), GB/s counts
//!   the compulsory bytes (every element read once and written once; ball lines are re-read from
//!   L2 for the check), `fraction_of_copy` as above; no goal is set.
//!
//! Nothing is printed that was not measured: without a GPU the run stops with a typed error
//! before any number exists.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use normlab_kernels::list::{Direction, Storage};
use normlab_norms::NormSpec;

use normlab_kernels::project::{ProjStorage, Projection};
use normlab_norms::weight::{Axis, Bound, MatShape};

use crate::bench::cases::{kind_spec, spec_label, Shape, KIND_NAMES};
use crate::bench::timing::{summarize, Timing};
use crate::gpu::args::FwdBuffers;
use crate::gpu::check::Session;
use crate::gpu::copy::{COPY, COPY_THREADS};
use crate::gpu::device::DeviceInfo;
use crate::gpu::error::{GpuError, Result};
use crate::gpu::module::{load, ImageInfo};
use crate::gpu::project::{elem_bytes, DevMatrix, ProjectKernels};
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

/// The model whose matrices the projection bench projects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProjModel {
    pub d: usize,
    pub layers: usize,
    /// SwiGLU hidden width per half = `mlp_ratio * d`.
    pub mlp_ratio: usize,
    pub vocab: usize,
}

/// nGPT's 24-layer d = 1024 model (the paper's 0.5B), with GPT-2's vocabulary padded to 50304
/// as in NVIDIA/ngpt.
pub const PROJECT_MODEL: ProjModel = ProjModel { d: 1024, layers: 24, mlp_ratio: 4, vocab: 50304 };

/// The projection cases: (model, storage). "ngpt": unit rows, and unit columns for the two
/// output projections (as `crate::model::ngpt`); "angpt": every matrix's rows in the unit ball.
pub const PROJECT_CASES: [(&str, ProjStorage); 3] = [("ngpt", ProjStorage::BF16), ("ngpt", ProjStorage::F32), ("angpt", ProjStorage::BF16)];

/// The matrices of `m` with nGPT's line axis, in the models' parameter order: wte; per layer
/// key, query, value (d x d, rows), att_c_proj (d x d, columns), c_fc (2r x d, rows),
/// mlp_c_proj (d x r, columns); lm_head.
pub fn model_matrices(m: &ProjModel) -> Vec<(MatShape, Axis)> {
    let (d, r, v) = (m.d, m.mlp_ratio * m.d, m.vocab);
    let mut out = vec![(MatShape::new(v, d), Axis::Rows)];
    for _ in 0..m.layers {
        out.extend([(MatShape::new(d, d), Axis::Rows); 3]);
        out.push((MatShape::new(d, d), Axis::Cols));
        out.push((MatShape::new(2 * r, d), Axis::Rows));
        out.push((MatShape::new(d, r), Axis::Cols));
    }
    out.push((MatShape::new(v, d), Axis::Rows));
    out
}

/// The projection of each matrix of `m` for `model` ("ngpt" or "angpt").
pub fn model_projections(m: &ProjModel, model: &str) -> Vec<(MatShape, Projection)> {
    model_matrices(m)
        .into_iter()
        .map(|(s, a)| (s, if model == "angpt" { Projection::Ball { bound: Bound::PerLine(Axis::Rows), radius: 1.0 } } else { Projection::Unit(a) }))
        .collect()
}

/// One measured projection: ONE launch over every matrix of the model.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ProjectBenchCase {
    pub model: String,
    pub config: ProjModel,
    pub dtype: String,
    pub kernel: String,
    pub matrices: usize,
    pub elements: usize,
    pub grid: u32,
    pub block: u32,
    /// Compulsory bytes: every element read once and written once.
    pub bytes: usize,
    pub timing: Timing,
    pub gb_per_s: f64,
    pub fraction_of_copy: f64,
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
    /// The fused weight projections (not counted in `summary`: no goal).
    pub projections: Vec<ProjectBenchCase>,
    pub summary: CudaSummary,
}

/// Median event time of `reps` runs of `f` after `warmup` untimed ones.
fn time_events(stream: &Arc<CudaStream>, warmup: usize, reps: usize, f: impl FnMut() -> Result<()>) -> Result<Timing> {
    time_events_after(stream, warmup, reps, || Ok(()), f)
}

/// [`time_events`] with `reset` enqueued before every run of `f`, outside the timed events.
fn time_events_after(
    stream: &Arc<CudaStream>,
    warmup: usize,
    reps: usize,
    mut reset: impl FnMut() -> Result<()>,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    for _ in 0..warmup {
        reset()?;
        f()?;
    }
    let ev = |s: &Arc<CudaStream>| s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(GpuError::driver("cuEventRecord"));
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        reset()?;
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
    SHAPES.len() * Storage::ALL.len() * KIND_NAMES.len() * 2 + PROJECT_CASES.len()
}

/// Pseudo-random f32 data in [-2, 2] (as [`random_bits`]), as bit patterns.
fn random_f32_bits(len: usize, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0).to_bits()
        })
        .collect()
}

/// Element offsets of `mats` packed into one buffer (each matrix 256-byte aligned), and the total.
fn packed_offsets(mats: &[(MatShape, Projection)], elem: usize) -> (Vec<usize>, usize) {
    let align = 256 / elem;
    let mut offs = Vec::with_capacity(mats.len());
    let mut at = 0usize;
    for (s, _) in mats {
        offs.push(at);
        at = (at + s.out * s.inp).next_multiple_of(align);
    }
    (offs, at)
}

/// Time ONE projection launch over every matrix of `model`, on data in [-2, 2] (every line
/// outside the unit ball: each launch projects every line), restored before each launch.
fn measure_projection<B: StoredBits>(
    s: &Session,
    k: &ProjectKernels,
    cfg: &CudaBenchConfig,
    model: &str,
    storage: ProjStorage,
    host: Vec<B>,
    copy_gbs: f64,
) -> Result<ProjectBenchCase> {
    let st = &s.stream;
    let mats = model_projections(&PROJECT_MODEL, model);
    let es = elem_bytes(storage);
    let (offs, total) = packed_offsets(&mats, es);
    if host.len() != total || std::mem::size_of::<B>() != es {
        return Err(GpuError::Length { what: "projection bench data", expected: total, got: host.len() });
    }
    let pristine = st.clone_htod(&host).map_err(GpuError::driver("cuMemcpyHtoD"))?;
    drop(host);
    let mut work = st.alloc_zeros::<B>(total).map_err(GpuError::driver("cuMemAlloc"))?;
    let (base, guard) = work.device_ptr_mut(st);
    let devm: Vec<DevMatrix> =
        mats.iter().zip(&offs).map(|(&(shape, projection), &o)| DevMatrix { w: base + (o * es) as u64, rows: shape.out, cols: shape.inp, projection }).collect();
    drop(guard);
    let launch = k.prepare(st, storage, &devm)?;
    let timing = time_events_after(
        st,
        cfg.warmup,
        cfg.reps,
        || st.memcpy_dtod(&pristine, &mut work).map_err(GpuError::driver("cuMemcpyDtoD")),
        // SAFETY: every matrix lies inside `work` (packed_offsets), which outlives the launches
        // (the event timing synchronises on the last one).
        || unsafe { k.launch(st, &launch, None) },
    )?;
    // The kernel must have projected: the first row of wte (rows, unit or ball) has norm 1.
    let d = PROJECT_MODEL.d;
    let row = st.clone_dtoh(&work.slice(0..d)).map_err(GpuError::driver("cuMemcpyDtoH"))?;
    let norm = row.iter().map(|b| b.value(storage).powi(2)).sum::<f64>().sqrt();
    if (norm - 1.0).abs() > 1e-2 {
        return Err(GpuError::Driver { call: "nl_project", message: format!("the projection did not project (first row of wte has norm {norm})") });
    }
    let elements: usize = mats.iter().map(|(s, _)| s.out * s.inp).sum();
    let bytes = 2 * elements * es;
    let gb_per_s = bytes as f64 / timing.median_s / 1e9;
    Ok(ProjectBenchCase {
        model: model.to_string(),
        config: PROJECT_MODEL,
        dtype: storage.name().to_string(),
        kernel: launch.plan.kernel.clone(),
        matrices: mats.len(),
        elements,
        grid: launch.plan.grid,
        block: launch.plan.block,
        bytes,
        timing,
        gb_per_s,
        fraction_of_copy: gb_per_s / copy_gbs,
    })
}

/// A storage type's bit pattern on the device (cudarc has no half types in this build).
trait StoredBits: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Unpin {
    /// The value these bits hold in `storage` (NaN for a storage type of another width).
    fn value(self, storage: ProjStorage) -> f64;
}
impl StoredBits for u16 {
    fn value(self, storage: ProjStorage) -> f64 {
        match storage {
            ProjStorage::F16 => half::f16::from_bits(self).to_f64(),
            ProjStorage::BF16 => half::bf16::from_bits(self).to_f64(),
            ProjStorage::F32 => f64::NAN,
        }
    }
}
impl StoredBits for u32 {
    fn value(self, storage: ProjStorage) -> f64 {
        match storage {
            ProjStorage::F32 => f32::from_bits(self) as f64,
            ProjStorage::F16 | ProjStorage::BF16 => f64::NAN,
        }
    }
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
    let pk = ProjectKernels::for_context(&s.ctx)?;
    let mut projections = Vec::with_capacity(PROJECT_CASES.len());
    for (i, &(model, storage)) in PROJECT_CASES.iter().enumerate() {
        let p = &PROJECT_MODEL;
        progress(&format!("projection {model} d={} {} layers {}", p.d, p.layers, storage.name()));
        let (_, len) = packed_offsets(&model_projections(p, model), elem_bytes(storage));
        let seed = 17 + i as u64;
        projections.push(match storage {
            ProjStorage::F32 => measure_projection(&s, &pk, cfg, model, storage, random_f32_bits(len, seed), copy.gb_per_s)?,
            ProjStorage::F16 => measure_projection(&s, &pk, cfg, model, storage, random_bits(len, Storage::F16, seed), copy.gb_per_s)?,
            ProjStorage::BF16 => measure_projection(&s, &pk, cfg, model, storage, random_bits(len, Storage::BF16, seed), copy.gb_per_s)?,
        });
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
        projections,
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
    if !r.projections.is_empty() {
        let _ = writeln!(s, "\nweight projections: ONE launch over every matrix of the model, fresh data each launch; bytes = read + write of every element\n");
        let _ = writeln!(s, "{:<6} {:<5} {:<16} {:>8} {:>11} {:>7} {:>10} {:>9} {:>8}", "model", "dtype", "kernel", "matrices", "elements", "grid", "median us", "GB/s", "of copy");
        for p in &r.projections {
            let _ = writeln!(
                s,
                "{:<6} {:<5} {:<16} {:>8} {:>11} {:>7} {:>10.1} {:>9.1} {:>7.1}%",
                p.model,
                p.dtype,
                p.kernel,
                p.matrices,
                p.elements,
                p.grid,
                p.timing.median_s * 1e6,
                p.gb_per_s,
                100.0 * p.fraction_of_copy
            );
        }
        let m = &r.projections[0].config;
        let _ = writeln!(s, "(d = {}, {} layers, SwiGLU {} x d per half, vocabulary {})", m.d, m.layers, m.mlp_ratio, m.vocab);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projection_model_is_ngpts_matrix_set() {
        let m = model_matrices(&PROJECT_MODEL);
        assert_eq!(m.len(), 2 + 24 * 6);
        let elems: usize = m.iter().map(|(s, _)| s.out * s.inp).sum();
        assert_eq!(elems, 2 * 50304 * 1024 + 24 * (4 * 1024 * 1024 + 2 * 4096 * 1024 + 1024 * 4096));
        // Unit columns for the two output projections of every layer, rows elsewhere.
        assert_eq!(m.iter().filter(|(_, a)| *a == Axis::Cols).count(), 48);
        assert!(model_projections(&PROJECT_MODEL, "angpt").iter().all(|(_, p)| *p == Projection::Ball { bound: Bound::PerLine(Axis::Rows), radius: 1.0 }));
        assert_eq!(model_projections(&PROJECT_MODEL, "ngpt")[4].1, Projection::Unit(Axis::Cols));
        // Packed: 256-byte aligned offsets, the plan accepts the set in one launch.
        let mats = model_projections(&PROJECT_MODEL, "ngpt");
        let (offs, total) = packed_offsets(&mats, 2);
        assert!(offs.iter().all(|o| o % 128 == 0) && total >= elems);
        let p = normlab_kernels::project::plan_project(ProjStorage::BF16, &mats.iter().map(|&(s, p)| (s, p, s.out * s.inp)).collect::<Vec<_>>()).unwrap();
        assert_eq!(p.descs.len(), 146);
        assert_eq!(case_count(), SHAPES.len() * 2 * KIND_NAMES.len() * 2 + 3);
    }

    #[test]
    fn stored_bits_read_back_their_storage_type() {
        assert_eq!(1.5f32.to_bits().value(ProjStorage::F32), 1.5);
        assert_eq!(half::f16::from_f32(0.25).to_bits().value(ProjStorage::F16), 0.25);
        assert_eq!(half::bf16::from_f32(-3.0).to_bits().value(ProjStorage::BF16), -3.0);
        assert!(0u16.value(ProjStorage::F32).is_nan() && 0u32.value(ProjStorage::BF16).is_nan());
    }
}
