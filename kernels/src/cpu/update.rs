//! The fused residual-update kernels (`src/cuda/residual.cu`) on the CPU through the SIMT
//! emulator, launched with the plans and parameter structs a GPU would get
//! ([`crate::residual::plan_update`]).

use std::ffi::{c_char, c_void, CStr, CString};

use normlab_norms::NormError;

use crate::cpu::{Engine, EmuOptions, Half16, Order};
use crate::error::{KernelError, Result};
use crate::list::Direction;
use crate::residual::{plan_update, vec_ok, Update, UpdBwdParams, UpdFinalizeParams, UpdFwdParams, UpdatePlan, UpdateStats, FINALIZE_THREADS};

extern "C" {
    fn nl_cpu_update_launch(
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
    fn nl_cpu_update_kernel_count() -> usize;
    fn nl_cpu_update_kernel_name(i: usize) -> *const c_char;
}

/// Names of the update kernels the CPU launcher knows (residual.cu's list), sorted.
pub fn kernel_names() -> Vec<String> {
    let mut v: Vec<String> = (0..unsafe { nl_cpu_update_kernel_count() })
        .map(|i| unsafe { CStr::from_ptr(nl_cpu_update_kernel_name(i)) }.to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Launch an update kernel by name on the emulator.
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
    let rc = nl_cpu_update_launch(c.as_ptr(), grid, block, smem, params as *const P as *const c_void, order, seed, engine, opts.reverse_blocks as i32);
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

fn rows_of(len: usize, d: usize) -> Result<usize> {
    if d == 0 {
        return Err(NormError::Empty { what: "the update width d", value: d }.into());
    }
    if !len.is_multiple_of(d) {
        return Err(NormError::Shape(format!("h of {len} elements is not a whole number of rows of d = {d}")).into());
    }
    Ok(len / d)
}

/// Shared forward: `y` may be `h` (raw pointers), lengths checked by the callers.
#[allow(clippy::too_many_arguments)]
unsafe fn forward_raw<T: Half16>(
    update: Update,
    h: *const T,
    b: &[T],
    a: &[f32],
    d: usize,
    eps: f64,
    y: *mut T,
    stats: Option<&mut [UpdateStats]>,
    opts: &EmuOptions,
) -> Result<UpdatePlan> {
    let rows = rows_of(b.len(), d)?;
    let stats_ptr = match stats {
        Some(s) => {
            check_len("stats", rows, s.len())?;
            s.as_mut_ptr()
        }
        None => std::ptr::null_mut(),
    };
    let p = plan_update(update, T::STORAGE, Direction::Forward, rows, d, a.len(), eps, false, &opts.device)?;
    if rows == 0 {
        return Ok(p);
    }
    let params = UpdFwdParams {
        h: h as *const c_void,
        b: b.as_ptr() as *const c_void,
        a: a.as_ptr(),
        y: y as *mut c_void,
        stats: stats_ptr,
        rows: rows as i64,
        d: p.d,
        a_len: p.a_len,
        eps: p.eps,
        vec_ok: vec_ok(d, &[h as usize, b.as_ptr() as usize, y as usize]) as i32,
    };
    launch_raw(&p.kernel, p.grid, p.block, p.smem, &params, opts)?;
    Ok(p)
}

/// Forward on the emulator: `y` from `h`, `b` (`[rows, d]`) and `a` (1 or d values); nGPT also
/// writes one [`UpdateStats`] per row if `stats` is given (the backward needs them).
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Half16>(
    update: Update,
    h: &[T],
    b: &[T],
    a: &[f32],
    d: usize,
    eps: f64,
    y: &mut [T],
    stats: Option<&mut [UpdateStats]>,
    opts: &EmuOptions,
) -> Result<UpdatePlan> {
    check_len("b", h.len(), b.len())?;
    check_len("output", h.len(), y.len())?;
    // SAFETY: h, b and y hold the same number of elements (checked), the plan covers them.
    unsafe { forward_raw(update, h.as_ptr(), b, a, d, eps, y.as_mut_ptr(), stats, opts) }
}

/// The forward in place: `h <- update(h, b)` (the kernel's `y` is `h`).
#[allow(clippy::too_many_arguments)]
pub fn forward_in_place<T: Half16>(
    update: Update,
    h: &mut [T],
    b: &[T],
    a: &[f32],
    d: usize,
    eps: f64,
    stats: Option<&mut [UpdateStats]>,
    opts: &EmuOptions,
) -> Result<UpdatePlan> {
    check_len("b", h.len(), b.len())?;
    let p = h.as_mut_ptr();
    // SAFETY: as `forward`, with y = h: every element is read before it is written (staged rows
    // or per-vector read-then-write by the same thread).
    unsafe { forward_raw(update, p, b, a, d, eps, p, stats, opts) }
}

/// Backward on the emulator: `dh`, `db` from `dy` (and nGPT's forward `stats`), and `da` (fp32,
/// length of `a`: per-block partials summed in block order by the finalize kernel).
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Half16>(
    update: Update,
    h: &[T],
    b: &[T],
    a: &[f32],
    dy: &[T],
    d: usize,
    stats: &[UpdateStats],
    dh: &mut [T],
    db: &mut [T],
    da: Option<&mut [f32]>,
    opts: &EmuOptions,
) -> Result<UpdatePlan> {
    let rows = rows_of(h.len(), d)?;
    for (what, len) in [("b", b.len()), ("dy", dy.len()), ("dh", dh.len()), ("db", db.len())] {
        check_len(what, h.len(), len)?;
    }
    if update == Update::Ngpt {
        check_len("stats", rows, stats.len())?;
    }
    if let Some(g) = da.as_deref() {
        check_len("da", a.len(), g.len())?;
    }
    let want_da = da.is_some();
    let p = plan_update(update, T::STORAGE, Direction::Backward, rows, d, a.len(), 0.0, want_da, &opts.device)?;
    let nparts = if rows == 0 { 0 } else { p.grid as usize };
    let mut part = vec![0f32; if want_da { nparts * a.len() } else { 0 }];
    if rows > 0 {
        let params = UpdBwdParams {
            h: h.as_ptr() as *const c_void,
            b: b.as_ptr() as *const c_void,
            a: a.as_ptr(),
            dy: dy.as_ptr() as *const c_void,
            stats: if update == Update::Ngpt { stats.as_ptr() } else { std::ptr::null() },
            dh: dh.as_mut_ptr() as *mut c_void,
            db: db.as_mut_ptr() as *mut c_void,
            da_part: if want_da { part.as_mut_ptr() } else { std::ptr::null_mut() },
            rows: rows as i64,
            d: p.d,
            a_len: p.a_len,
            vec_ok: vec_ok(d, &[h.as_ptr() as usize, b.as_ptr() as usize, dy.as_ptr() as usize, dh.as_ptr() as usize, db.as_ptr() as usize])
                as i32,
        };
        // SAFETY: lengths were checked against the shape the plan launches over.
        unsafe { launch_raw(&p.kernel, p.grid, p.block, p.smem, &params, opts)? };
    }
    if let (Some(fin), Some(out)) = (p.finalize, da) {
        let fp = UpdFinalizeParams { part: part.as_ptr(), out: out.as_mut_ptr(), nparts: nparts as i32, n: p.a_len };
        // SAFETY: `part` holds nparts * a_len floats and `out` a_len.
        unsafe { launch_raw(fin, p.finalize_grid, FINALIZE_THREADS, 0, &fp, opts)? };
    }
    Ok(p)
}
