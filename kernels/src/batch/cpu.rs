//! The batch-norm launch sequences on the SIMT emulator: `src/cuda/batchnorm.cu` compiled for the
//! CPU by build.rs (`src/cpu/batch_launch.cpp`), launched step by step with the plans and
//! parameter structs a GPU would get (the intermediate records live in host memory here).
//!
//! API as normlab-norms' `batch::forward` / `batch::backward` (and `mean_only` through
//! [`BatchNorm::MeanOnly`]), for fp16 and bf16 storage.

use std::ffi::{c_char, c_void, CStr, CString};

use normlab_norms::batch::{Layout, Mode, RunningStats};
use normlab_norms::NormError;

use super::params::*;
use super::plan::{plan_batch, BatchNorm, BatchPlan, BatchTuning, FINALIZE1, FINALIZE2, FROZEN, THREADS};
use crate::cpu::{EmuOptions, Engine, Half16, Order};
use crate::error::{KernelError, Result};
use crate::params::KernelStats;

extern "C" {
    fn nl_cpu_batch_launch(
        name: *const c_char,
        grid: u32,
        block: u32,
        params: *const c_void,
        order: i32,
        seed: u64,
        engine: i32,
        reverse_blocks: i32,
    ) -> i32;
    fn nl_cpu_batch_kernel_count() -> usize;
    fn nl_cpu_batch_kernel_name(i: usize) -> *const c_char;
}

/// Names of the batch kernels the CPU launcher knows (batchnorm.cu's list), sorted.
pub fn kernel_names() -> Vec<String> {
    let mut v: Vec<String> = (0..unsafe { nl_cpu_batch_kernel_count() })
        .map(|i| unsafe { CStr::from_ptr(nl_cpu_batch_kernel_name(i)) }.to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Launch one batch kernel by name.
///
/// # Safety
/// `params` must be the kernel's parameter struct with pointers valid for the launch.
unsafe fn launch<P>(name: &str, grid: u32, params: &P, opts: &EmuOptions) -> Result<()> {
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
    let rc = nl_cpu_batch_launch(c.as_ptr(), grid, THREADS, params as *const P as *const c_void, order, seed, engine, opts.reverse_blocks as i32);
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

fn check_opt<T>(what: &'static str, expected: usize, v: Option<&[T]>) -> Result<()> {
    v.map_or(Ok(()), |v| check_len(what, expected, v.len()))
}

fn aligned16(ptrs: &[usize]) -> bool {
    ptrs.iter().all(|p| p % 16 == 0)
}

fn opt_ptr<T>(v: Option<&[T]>) -> *const c_void {
    v.map_or(std::ptr::null(), |s| s.as_ptr() as *const c_void)
}

/// 16-byte vectors for the chunked kernels (stats, reductions): NCHW slabs need `H*W % 8 == 0`,
/// NC rows `C % 8 == 0`; every pointer 16-byte aligned.
pub fn layout_vec(layout: &Layout, ptrs: &[usize]) -> bool {
    let ok = match layout {
        Layout::Nc { c, .. } => c % 8 == 0,
        Layout::Nchw { .. } => layout.spatial().is_multiple_of(8),
    };
    ok && aligned16(ptrs)
}

fn geo(plan: &BatchPlan, vec: bool) -> Geo {
    Geo { vec: vec as i32, ..plan.geo }
}

fn no_weight(plan: &BatchPlan, weight: bool) -> Result<()> {
    if plan.norm == BatchNorm::MeanOnly && weight {
        return Err(NormError::Unsupported { what: "a weight (gamma) for mean-only batch norm".into(), why: "mean-only batch norm has a bias only".into() }.into());
    }
    Ok(())
}

/// Forward of a batch form on the emulator (normlab_norms::batch::forward semantics): `y` from
/// `x` in `layout`; `weight`/`bias` per channel. Train mode updates `running` (if given) and
/// saves the batch statistics (and the L-inf/Top-k selection) in `saved`; eval mode needs
/// `running` and saves the frozen statistics it used.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Half16>(
    norm: &BatchNorm,
    layout: Layout,
    x: &[T],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    y: &mut [T],
    mode: Mode,
    mut running: Option<&mut RunningStats>,
    saved: Option<&mut Saved>,
    opts: &EmuOptions,
    tuning: &BatchTuning,
) -> Result<BatchPlan> {
    let plan = plan_batch(norm, T::STORAGE, layout, tuning, &opts.device)?;
    let c = layout.channels();
    check_len("input", layout.len(), x.len())?;
    check_len("output", layout.len(), y.len())?;
    check_opt("weight", c, weight)?;
    check_opt("bias", c, bias)?;
    no_weight(&plan, weight.is_some())?;
    plan.check_running(mode, running.as_deref())?;
    let mut own = Saved::default();
    let saved = match saved {
        Some(s) => s,
        None => &mut own,
    };
    saved.stats.resize(c, KernelStats::default());
    saved.aux.resize(c, Aux::default());
    let stats = saved.stats.as_mut_ptr();
    let aux = saved.aux.as_mut_ptr();
    let xp = x.as_ptr() as *const c_void;
    let lvec = layout_vec(&layout, &[x.as_ptr() as usize]);
    let nrec = c * plan.geo.nchunks as usize;
    match mode {
        Mode::Train => {
            // The kernels write the running buffers: their pointers come from the exclusive
            // borrow (a pointer derived from a shared one may not be written through).
            let (run_mean, run_spread, a, conv) = match running.as_deref_mut() {
                Some(r) => {
                    let (a, conv) = (BatchPlan::batch_weight(r), BatchPlan::conv_code(r.convention));
                    (r.mean.as_mut_ptr(), r.spread.as_mut_ptr(), a, conv)
                }
                None => (std::ptr::null_mut(), std::ptr::null_mut(), 0.0, 0),
            };
            let mut rec = vec![[0f64; 4]; nrec];
            // SAFETY (every launch below): the buffers are sized from the plan's geometry, which
            // the kernels index within; lengths were checked above.
            unsafe {
                launch(&plan.stats1, plan.grid_items, &Stats1Params { x: xp, rec: rec.as_mut_ptr() as *mut c_void, g: geo(&plan, lvec) }, opts)?;
                let f1 = Fin1Params {
                    rec: rec.as_ptr() as *const c_void,
                    stats,
                    aux,
                    run_mean,
                    run_spread,
                    g: geo(&plan, false),
                    eps: plan.eps,
                    c: plan.c,
                    a,
                    kind: plan.kind,
                    centred: plan.centred as i32,
                    conv,
                    final_pass: plan.final_pass1() as i32,
                };
                launch(FINALIZE1, plan.grid_channels, &f1, opts)?;
                if let Some(s2) = &plan.stats2 {
                    let topk = plan.kind == 5;
                    let mut part = vec![0f64; if topk { (nrec * plan.k as usize).div_ceil(2) } else { nrec }];
                    let p2 = Stats2Params { x: xp, stats, out: part.as_mut_ptr() as *mut c_void, g: geo(&plan, lvec), k: plan.k, pad: 0 };
                    let grid = if topk { plan.grid_items_topk } else { plan.grid_items };
                    launch(s2, grid, &p2, opts)?;
                    let f2 = Fin2Params {
                        part: part.as_ptr() as *const c_void,
                        stats,
                        aux,
                        run_spread,
                        g: geo(&plan, false),
                        eps: plan.eps,
                        c: plan.c,
                        a,
                        kind: plan.kind,
                        conv,
                        k: plan.k,
                        pad: 0,
                    };
                    launch(FINALIZE2, plan.grid_channels, &f2, opts)?;
                }
                if let Some(cut) = &plan.cut {
                    launch(cut, plan.grid_channels, &CutParams { x: xp, stats, aux, g: geo(&plan, false) }, opts)?;
                }
            }
            if let Some(r) = running {
                r.updates += 1;
            }
        }
        Mode::Eval => {
            let r = running.expect("checked by check_running");
            let fr = FrozenParams {
                run_mean: r.mean.as_ptr(),
                run_spread: r.spread.as_ptr(),
                stats,
                c: c as i64,
                eps: plan.eps,
                kind: plan.kind,
                centred: plan.centred as i32,
                conv: BatchPlan::conv_code(r.convention),
                pad: 0,
            };
            saved.aux.iter_mut().for_each(|a| *a = Aux::default());
            // SAFETY: C running values in, C statistics out.
            unsafe { launch(FROZEN, plan.grid_frozen, &fr, opts)? };
        }
    }
    let fvec = aligned16(&[x.as_ptr() as usize, y.as_ptr() as usize]);
    let ap = ApplyParams { x: xp, y: y.as_mut_ptr() as *mut c_void, stats, weight: opt_ptr(weight), bias: opt_ptr(bias), g: geo(&plan, fvec) };
    // SAFETY: x and y hold the layout's elements, stats and the affine parameters C values.
    unsafe { launch(&plan.apply, plan.grid_elems, &ap, opts)? };
    Ok(plan)
}

/// Backward of a batch form on the emulator (normlab_norms::batch::backward semantics): `dx`
/// from `dy` and the forward's `saved` state in the same `mode`; optionally `dweight` and
/// `dbias` (channel sums of `dy x^` and `dy`, each rounded once). Mean-only batch norm reads
/// only `dy` (`x` must still have the layout's length) and has no weight.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Half16>(
    norm: &BatchNorm,
    layout: Layout,
    x: &[T],
    dy: &[T],
    mode: Mode,
    saved: &Saved,
    weight: Option<&[T]>,
    dx: &mut [T],
    dweight: Option<&mut [T]>,
    dbias: Option<&mut [T]>,
    opts: &EmuOptions,
    tuning: &BatchTuning,
) -> Result<BatchPlan> {
    let plan = plan_batch(norm, T::STORAGE, layout, tuning, &opts.device)?;
    let c = layout.channels();
    check_len("input", layout.len(), x.len())?;
    check_len("dy", layout.len(), dy.len())?;
    check_len("dx", layout.len(), dx.len())?;
    check_len("stats", c, saved.stats.len())?;
    check_len("selection (saved aux)", c, saved.aux.len())?;
    check_opt("weight", c, weight)?;
    check_opt("dweight", c, dweight.as_deref())?;
    check_opt("dbias", c, dbias.as_deref())?;
    no_weight(&plan, weight.is_some() || dweight.is_some())?;
    let train = mode == Mode::Train;
    let (xp, dyp) = (x.as_ptr() as *const c_void, dy.as_ptr() as *const c_void);
    let stats = saved.stats.as_ptr();
    let aux = saved.aux.as_ptr();
    let mut coef = vec![[0f32; 2]; c];
    let need_reduce = train || dweight.is_some() || dbias.is_some();
    if need_reduce {
        let nrec = c * plan.geo.nchunks as usize;
        let mut rec = vec![[0f64; 4]; nrec];
        let lvec = layout_vec(&layout, &[x.as_ptr() as usize, dy.as_ptr() as usize]);
        let rp = RedParams { x: xp, dy: dyp, stats, aux, rec: rec.as_mut_ptr() as *mut c_void, g: geo(&plan, lvec) };
        let bf = BFinParams {
            rec: rec.as_ptr() as *const c_void,
            stats,
            weight: opt_ptr(weight),
            dweight: dweight.map_or(std::ptr::null_mut(), |d| d.as_mut_ptr() as *mut c_void),
            dbias: dbias.map_or(std::ptr::null_mut(), |d| d.as_mut_ptr() as *mut c_void),
            coef: coef.as_mut_ptr(),
            g: geo(&plan, false),
            c: plan.c,
            kind: plan.kind,
            centred: plan.centred as i32,
            k: plan.k,
            eval: (!train) as i32,
        };
        // SAFETY: records sized C x nchunks; outputs of C values; lengths checked above.
        unsafe {
            launch(if train { &plan.reduce_train } else { &plan.reduce_eval }, plan.grid_items, &rp, opts)?;
            launch(&plan.bwd_finalize, plan.grid_channels, &bf, opts)?;
        }
    }
    let fvec = aligned16(&[x.as_ptr() as usize, dy.as_ptr() as usize, dx.as_ptr() as usize]);
    let dp = DxParams { x: xp, dy: dyp, stats, aux, weight: opt_ptr(weight), coef: coef.as_ptr(), dx: dx.as_mut_ptr() as *mut c_void, g: geo(&plan, fvec) };
    // SAFETY: x, dy, dx hold the layout's elements; per-channel arrays C values.
    unsafe { launch(if train { &plan.dx_train } else { &plan.dx_eval }, plan.grid_elems, &dp, opts)? };
    Ok(plan)
}
