//! Execution of the CUDA kernels on the CPU: `src/cuda/rownorm.cu`, compiled as C++20 against the
//! SIMT emulator by build.rs, launched with the same plans and parameter structs a GPU would get.
//! This is how the kernels are tested on machines without a GPU (every development and CI machine).

use std::ffi::{c_char, c_void, CStr, CString};

use half::{bf16, f16};
use normlab_norms::{NormError, NormSpec};

use crate::error::{KernelError, Result};
use crate::list::{Direction, Storage};
use crate::params::{BwdParams, FinalizeParams, FwdParams, FwdVarParams, KernelStats, RowCounts};
use crate::plan::{plan, plan_variant, Device, LaunchPlan, FINALIZE_THREADS};
use crate::list::FwdVariant;
use normlab_norms::Counters;

/// The fused residual-update kernels (`src/cuda/residual.cu`) on the emulator.
pub mod update;

extern "C" {
    fn nl_cpu_launch(
        name: *const c_char,
        grid: u32,
        block: u32,
        smem: usize,
        params: *const c_void,
        order: i32,
        seed: u64,
        engine: i32,
        reverse_blocks: i32,
    ) -> i32;
    fn nl_cpu_kernel_count() -> usize;
    fn nl_cpu_kernel_name(i: usize) -> *const c_char;
}

/// Which runnable emulated thread the serial engine resumes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Lowest thread first (warp 0 runs ahead).
    Fwd,
    /// Highest thread first.
    Rev,
    /// Seeded random choice.
    Random(u64),
}

/// Emulation engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Serial under normal builds, parallel under ThreadSanitizer.
    Default,
    /// One fiber per CUDA thread, one running at a time, in [`Order`].
    Serial,
    /// One OS thread per CUDA thread with real barriers (for ThreadSanitizer).
    Parallel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmuOptions {
    pub order: Order,
    pub engine: Engine,
    pub reverse_blocks: bool,
    pub device: Device,
}

impl Default for EmuOptions {
    fn default() -> Self {
        EmuOptions { order: Order::Fwd, engine: Engine::Default, reverse_blocks: false, device: Device::emulator(3) }
    }
}

/// 16-bit storage element types with a kernel instantiation.
pub trait Half16: Copy + 'static {
    const STORAGE: Storage;
}
impl Half16 for f16 {
    const STORAGE: Storage = Storage::F16;
}
impl Half16 for bf16 {
    const STORAGE: Storage = Storage::BF16;
}

/// Names of the kernels the CPU launcher knows (the .cu file's X-macro), sorted.
pub fn kernel_names() -> Vec<String> {
    let mut v: Vec<String> = (0..unsafe { nl_cpu_kernel_count() })
        .map(|i| unsafe { CStr::from_ptr(nl_cpu_kernel_name(i)) }.to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Launch a kernel by name on the emulator. `params` must be the kernel's parameter struct with
/// pointers valid for everything the kernel touches.
///
/// # Safety
/// The pointers inside `params` must be valid for the launch's shape.
pub unsafe fn launch_raw<P>(name: &str, grid: u32, block: u32, smem: usize, params: &P, opts: &EmuOptions) -> Result<()> {
    let c = CString::new(name).map_err(|_| KernelError::UnknownKernel(name.into()))?;
    let (order, seed) = match opts.order {
        Order::Fwd => (0, 0),
        Order::Rev => (1, 0),
        Order::Random(s) => (2, s),
    };
    let engine = match opts.engine {
        Engine::Default => -1,
        Engine::Serial => 0,
        Engine::Parallel => 1,
    };
    let rc = nl_cpu_launch(
        c.as_ptr(),
        grid,
        block,
        smem,
        params as *const P as *const c_void,
        order,
        seed,
        engine,
        opts.reverse_blocks as i32,
    );
    if rc != 0 {
        return Err(KernelError::UnknownKernel(name.into()));
    }
    Ok(())
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(NormError::Length { what, expected, got }.into());
    }
    Ok(())
}

fn rows_of<T>(spec: &NormSpec, x: &[T], n: usize) -> Result<usize> {
    spec.validate(n)?;
    if !x.len().is_multiple_of(n) {
        return Err(NormError::Shape(format!("input of {} elements is not a whole number of rows of n = {n}", x.len())).into());
    }
    Ok(x.len() / n)
}

fn congruent16(ptrs: &[usize]) -> bool {
    ptrs.iter().all(|&p| p % 16 == ptrs[0] % 16)
}

fn opt_ptr<T>(v: Option<&[T]>) -> *const c_void {
    v.map_or(std::ptr::null(), |s| s.as_ptr() as *const c_void)
}

/// Forward kernel on the emulator: `y` (and `stats`, one per row) from `x` viewed as `[rows, n]`.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Half16>(
    spec: &NormSpec,
    x: &[T],
    n: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    stats: Option<&mut [KernelStats]>,
    opts: &EmuOptions,
) -> Result<LaunchPlan> {
    let rows = rows_of(spec, x, n)?;
    check_len("output", x.len(), y.len())?;
    if let Some(w) = weight {
        check_len("weight", n, w.len())?;
    }
    if let Some(b) = bias {
        check_len("bias", n, b.len())?;
    }
    let stats_ptr = match stats {
        Some(s) => {
            check_len("stats", rows, s.len())?;
            s.as_mut_ptr()
        }
        None => std::ptr::null_mut(),
    };
    let p = plan(spec, T::STORAGE, Direction::Forward, rows, n, false, false, &opts.device)?;
    if rows == 0 {
        return Ok(p);
    }
    let params = FwdParams {
        x: x.as_ptr() as *const c_void,
        y: y.as_mut_ptr() as *mut c_void,
        weight: opt_ptr(weight),
        bias: opt_ptr(bias),
        stats: stats_ptr,
        rows: rows as i64,
        n: p.n,
        centred: p.centred as i32,
        eps: p.eps,
        c: p.c,
        k: p.k,
        vec_ok: congruent16(&[x.as_ptr() as usize, y.as_ptr() as usize]) as i32,
    };
    // SAFETY: lengths were checked against the shape the plan launches over.
    unsafe { launch_raw(&p.kernel, p.grid, p.block, p.smem, &params, opts)? };
    Ok(p)
}

/// Backward kernel on the emulator: `dx` from `dy`, and optionally the weight and bias
/// gradients (fp32 partials per block, summed in block order by the finalize kernel).
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Half16>(
    spec: &NormSpec,
    x: &[T],
    dy: &[T],
    n: usize,
    stats: &[KernelStats],
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
    opts: &EmuOptions,
) -> Result<LaunchPlan> {
    let rows = rows_of(spec, x, n)?;
    check_len("dy", x.len(), dy.len())?;
    check_len("dx", x.len(), dx.len())?;
    check_len("stats", rows, stats.len())?;
    if let Some(w) = weight {
        check_len("weight", n, w.len())?;
    }
    if let Some(d) = dweight.as_deref() {
        check_len("dweight", n, d.len())?;
    }
    if let Some(d) = dbias.as_deref() {
        check_len("dbias", n, d.len())?;
    }
    let want_dw = dweight.is_some();
    let want_db = dbias.is_some();
    let p = plan(spec, T::STORAGE, Direction::Backward, rows, n, want_dw, want_db, &opts.device)?;
    let nparts = if rows == 0 { 0 } else { p.grid as usize };
    let mut dw_part = vec![0f32; if want_dw { nparts * n } else { 0 }];
    let mut db_part = vec![0f32; if want_db { nparts * n } else { 0 }];
    if rows > 0 {
        let params = BwdParams {
            x: x.as_ptr() as *const c_void,
            dy: dy.as_ptr() as *const c_void,
            stats: stats.as_ptr(),
            weight: opt_ptr(weight),
            dx: dx.as_mut_ptr() as *mut c_void,
            dw_part: if want_dw { dw_part.as_mut_ptr() } else { std::ptr::null_mut() },
            db_part: if want_db { db_part.as_mut_ptr() } else { std::ptr::null_mut() },
            rows: rows as i64,
            n: p.n,
            centred: p.centred as i32,
            c: p.c,
            k: p.k,
            vec_ok: congruent16(&[x.as_ptr() as usize, dy.as_ptr() as usize, dx.as_ptr() as usize]) as i32,
        };
        // SAFETY: lengths were checked against the shape the plan launches over.
        unsafe { launch_raw(&p.kernel, p.grid, p.block, p.smem, &params, opts)? };
    }
    if let Some(fin) = &p.finalize {
        for (part, out) in [(&dw_part, dweight), (&db_part, dbias)] {
            let Some(out) = out else { continue };
            let fp = FinalizeParams {
                part: part.as_ptr(),
                out: out.as_mut_ptr() as *mut c_void,
                nparts: nparts as i32,
                n: p.n,
            };
            // SAFETY: `part` holds nparts * n floats and `out` n elements.
            unsafe { launch_raw(fin, p.finalize_grid, FINALIZE_THREADS, 0, &fp, opts)? };
        }
    }
    Ok(p)
}

// ---------------------------------------------------------------- forward variants

/// Checks and the base parameters shared by the forward variants.
#[allow(clippy::too_many_arguments)]
fn variant_params<T>(
    spec: &NormSpec,
    x: &[T],
    n: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y_len: usize,
    y_ptr: *mut c_void,
    stats: Option<&mut [KernelStats]>,
) -> Result<(usize, FwdParams)> {
    let rows = rows_of(spec, x, n)?;
    check_len("output", x.len(), y_len)?;
    if let Some(w) = weight {
        check_len("weight", n, w.len())?;
    }
    if let Some(b) = bias {
        check_len("bias", n, b.len())?;
    }
    let stats_ptr = match stats {
        Some(s) => {
            check_len("stats", rows, s.len())?;
            s.as_mut_ptr()
        }
        None => std::ptr::null_mut(),
    };
    let f = FwdParams {
        x: x.as_ptr() as *const c_void,
        y: y_ptr,
        weight: opt_ptr(weight),
        bias: opt_ptr(bias),
        stats: stats_ptr,
        rows: rows as i64,
        n: 0,
        centred: 0,
        eps: 0.0,
        c: 0.0,
        k: 0,
        vec_ok: 0,
    };
    Ok((rows, f))
}

fn with_plan(mut f: FwdParams, p: &LaunchPlan, vec_ok: bool) -> FwdParams {
    f.n = p.n;
    f.centred = p.centred as i32;
    f.eps = p.eps;
    f.c = p.c;
    f.k = p.k;
    f.vec_ok = vec_ok as i32;
    f
}

/// The pure-half forward on the emulator: `y` with every statistic and output computed in the
/// storage type (as normlab-norms with `Accum::PureF16` / `Accum::PureBf16`), per-row
/// statistics and counters; returns the plan and the counters summed over rows.
#[allow(clippy::too_many_arguments)]
pub fn forward_pure<T: Half16>(
    spec: &NormSpec,
    x: &[T],
    n: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    stats: Option<&mut [KernelStats]>,
    counts: Option<&mut [RowCounts]>,
    opts: &EmuOptions,
) -> Result<(LaunchPlan, Counters)> {
    let (rows, f) = variant_params(spec, x, n, weight, bias, y.len(), y.as_mut_ptr() as *mut c_void, stats)?;
    let mut own = Vec::new();
    let counts = match counts {
        Some(c) => {
            check_len("counts", rows, c.len())?;
            c
        }
        None => {
            own.resize(rows, RowCounts::default());
            &mut own[..]
        }
    };
    let p = plan_variant(spec, T::STORAGE, FwdVariant::Pure, rows, n, 1.0, &opts.device)?;
    if rows == 0 {
        return Ok((p, Counters::default()));
    }
    let vec_ok = congruent16(&[x.as_ptr() as usize, y.as_ptr() as usize]);
    let params = FwdVarParams { f: with_plan(f, &p, vec_ok), counts: counts.as_mut_ptr(), out_scale: 1.0, reserved: 0 };
    // SAFETY: lengths were checked against the shape the plan launches over.
    unsafe { launch_raw(&p.kernel, p.grid, p.block, p.smem, &params, opts)? };
    Ok((p, RowCounts::total(counts)))
}

/// Whether the fp8 output rows can use 8-byte vectors where the 16-bit input rows use 16-byte
/// ones: element addresses x / 2 and y congruent modulo 8.
pub fn e4m3_vec_ok(x_addr: usize, y_addr: usize) -> bool {
    x_addr.is_multiple_of(2) && (x_addr / 2) % 8 == y_addr % 8
}

/// The forward with fp8 E4M3 output on the emulator: `y[i] = round_e4m3(y_f32[i] * out_scale)`
/// (saturating at +-448, NaN for non-finite values, as normlab-norms stores `F8E4M3`).
#[allow(clippy::too_many_arguments)]
pub fn forward_e4m3<T: Half16>(
    spec: &NormSpec,
    x: &[T],
    n: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    out_scale: f32,
    y: &mut [float8::F8E4M3],
    stats: Option<&mut [KernelStats]>,
    opts: &EmuOptions,
) -> Result<LaunchPlan> {
    let (rows, f) = variant_params(spec, x, n, weight, bias, y.len(), y.as_mut_ptr() as *mut c_void, stats)?;
    let p = plan_variant(spec, T::STORAGE, FwdVariant::E4M3, rows, n, out_scale, &opts.device)?;
    if rows == 0 {
        return Ok(p);
    }
    let vec_ok = e4m3_vec_ok(x.as_ptr() as usize, y.as_ptr() as usize);
    let params = FwdVarParams { f: with_plan(f, &p, vec_ok), counts: std::ptr::null_mut(), out_scale, reserved: 0 };
    // SAFETY: lengths were checked against the shape the plan launches over; F8E4M3 is one byte.
    unsafe { launch_raw(&p.kernel, p.grid, p.block, p.smem, &params, opts)? };
    Ok(p)
}

// ---------------------------------------------------------------- weight projections (project.cu)

extern "C" {
    fn nl_cpu_project_launch(
        name: *const c_char,
        grid: u32,
        block: u32,
        params: *const c_void,
        order: i32,
        seed: u64,
        engine: i32,
        reverse_blocks: i32,
    ) -> i32;
    fn nl_cpu_project_kernel_count() -> usize;
    fn nl_cpu_project_kernel_name(i: usize) -> *const c_char;
}

/// Names of the projection kernels the CPU launcher knows (project.cu's list), sorted.
pub fn project_kernel_names() -> Vec<String> {
    let mut v: Vec<String> = (0..unsafe { nl_cpu_project_kernel_count() })
        .map(|i| unsafe { CStr::from_ptr(nl_cpu_project_kernel_name(i)) }.to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The fused projection kernel on the emulator: every matrix of `mats` in ONE launch, in place,
/// with the descriptor table a GPU would get. Returns one report per matrix (the CPU path's
/// counts of projected, unchanged, zero and non-finite lines).
pub fn project<T: crate::project::ProjElem>(
    mats: &mut [crate::project::ProjMatrix<'_, T>],
    opts: &EmuOptions,
) -> Result<Vec<normlab_norms::weight::ProjectReport>> {
    use crate::project::{plan_project, reports, ProjParams};
    let specs: Vec<_> = mats.iter().map(|m| (m.shape, m.projection, m.w.len())).collect();
    let mut plan = plan_project(T::STORAGE, &specs)?;
    if plan.grid == 0 {
        return Ok(Vec::new());
    }
    for (d, m) in plan.descs.iter_mut().zip(mats.iter_mut()) {
        d.w = m.w.as_mut_ptr() as *mut c_void;
    }
    let mut counts = vec![0i32; 4 * plan.grid as usize];
    let params = ProjParams { desc: plan.descs.as_ptr(), count: plan.descs.len() as i32, counts: counts.as_mut_ptr() };
    let c = CString::new(plan.kernel.as_str()).map_err(|_| KernelError::UnknownKernel(plan.kernel.clone()))?;
    let (order, seed) = match opts.order {
        Order::Fwd => (0, 0),
        Order::Rev => (1, 0),
        Order::Random(s) => (2, s),
    };
    let engine = match opts.engine {
        Engine::Default => -1,
        Engine::Serial => 0,
        Engine::Parallel => 1,
    };
    // SAFETY: every descriptor points into a live, exclusively borrowed slice whose length was
    // checked against its shape by the plan; `counts` holds 4 ints per block of the grid.
    let rc = unsafe {
        nl_cpu_project_launch(c.as_ptr(), plan.grid, plan.block, &params as *const ProjParams as *const c_void, order, seed, engine, opts.reverse_blocks as i32)
    };
    if rc != 0 {
        return Err(KernelError::UnknownKernel(plan.kernel));
    }
    for d in plan.descs.iter_mut() {
        d.w = std::ptr::null_mut();
    }
    Ok(reports(&plan, &counts))
}
