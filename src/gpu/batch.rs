//! Launch wrappers of the batch-norm kernels (normlab-kernels' `batchnorm.cu`) on a CUDA stream:
//! the launch sequences of `normlab_kernels::batch::cpu` (which the emulator tests prove) with
//! device buffers.
//!
//! - train forward: stats1 -> finalize1 [-> stats2 -> finalize2] [-> cut] -> apply, the running
//!   statistics (f64 device buffers, `RunningStats`'s layout) updated in place by the finalize;
//! - eval forward: frozen -> apply;
//! - backward: reduce -> bwd_finalize -> dx (eval without parameter gradients: dx only).
//!
//! The chunk records and coefficients are allocated on the stream per call and freed in stream
//! order. Grids: the plan's persistent grid with the stats kernel's real occupancy per SM.
//! Buffers are raw device addresses, as for the row kernels (`crate::gpu::rows`).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, DeviceRepr};
use normlab_kernels::batch::cpu::layout_vec;
use normlab_kernels::batch::params::{
    ApplyParams, Aux, BFinParams, CutParams, DxParams, Fin1Params, Fin2Params, FrozenParams, Geo, RedParams, Stats1Params, Stats2Params,
};
use normlab_kernels::batch::plan::{plan_batch, BatchNorm, BatchPlan, BatchTuning, FINALIZE1, FINALIZE2, FROZEN, THREADS};
use normlab_kernels::list::Storage;
use normlab_kernels::{sources, KernelStats};
use normlab_norms::batch::{Convention, Layout, Mode};

use crate::gpu::args::{opt, ptr as p, ptr_mut as pm, DevPtr, ParamArg};
use crate::gpu::error::{GpuError, PlanError, Result};
use crate::gpu::module::{family_kernels, Source};
use crate::gpu::rows::launch;

/// The batch-norm source as the runtime compiles it.
pub const BATCHNORM: Source = Source {
    module: "batchnorm",
    file_name: sources::BATCHNORM_CU_NAME,
    text: sources::BATCHNORM_CU,
    options: sources::NVRTC_OPTIONS,
    needs_headers: true,
};

// SAFETY: `#[repr(C)]` plain data (integers, floats, device addresses) laid out as the kernels'
// parameter structs (sizes checked in normlab-kernels and against NVRTC's PTX in
// tests/gpu_runtime.rs).
unsafe impl DeviceRepr for ParamArg<Stats1Params> {}
unsafe impl DeviceRepr for ParamArg<Stats2Params> {}
unsafe impl DeviceRepr for ParamArg<Fin1Params> {}
unsafe impl DeviceRepr for ParamArg<Fin2Params> {}
unsafe impl DeviceRepr for ParamArg<FrozenParams> {}
unsafe impl DeviceRepr for ParamArg<CutParams> {}
unsafe impl DeviceRepr for ParamArg<ApplyParams> {}
unsafe impl DeviceRepr for ParamArg<RedParams> {}
unsafe impl DeviceRepr for ParamArg<BFinParams> {}
unsafe impl DeviceRepr for ParamArg<DxParams> {}

/// Running statistics on the device: `mean` and `spread` are `C` f64 values each (the layout of
/// `RunningStats::mean` / `spread`), updated in place by a train forward.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevRunning {
    pub mean: DevPtr,
    pub spread: DevPtr,
    pub momentum: f64,
    pub convention: Convention,
}

impl DevRunning {
    fn weight(&self) -> f64 {
        match self.convention {
            Convention::PyTorch => self.momentum,
            Convention::NormMattersCode => 1.0 - self.momentum,
        }
    }
}

/// Buffers of a forward launch: x and y in the layout, per-channel weight/bias (optional), the
/// saved state (`C` [`KernelStats`], 16 B each, and `C` [`Aux`], 24 B each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BnFwdBuffers {
    pub x: DevPtr,
    pub y: DevPtr,
    pub weight: Option<DevPtr>,
    pub bias: Option<DevPtr>,
    pub stats: DevPtr,
    pub aux: DevPtr,
}

/// Buffers of a backward launch (`stats`/`aux` as the forward in the same mode saved them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BnBwdBuffers {
    pub x: DevPtr,
    pub dy: DevPtr,
    pub stats: DevPtr,
    pub aux: DevPtr,
    pub weight: Option<DevPtr>,
    pub dx: DevPtr,
    pub dweight: Option<DevPtr>,
    pub dbias: Option<DevPtr>,
}

fn aligned16(a: &[DevPtr]) -> bool {
    a.iter().all(|v| v % 16 == 0)
}
fn geo(plan: &BatchPlan, vec: bool) -> Geo {
    Geo { vec: vec as i32, ..plan.geo }
}

// No reserve: the batch kernels take no dynamic shared memory, so the plan sees the device's
// whole opt-in limit.
family_kernels!(
    /// The batch-norm kernels loaded in one context.
    BatchKernels,
    BATCHNORM,
    reserve: 0
);

impl BatchKernels {
    /// Plan with the stats kernel's resident blocks per SM as the persistent grid's depth.
    pub fn plan(&self, norm: &BatchNorm, storage: Storage, layout: Layout, tuning: &BatchTuning) -> Result<BatchPlan> {
        let first = plan_batch(norm, storage, layout, tuning, &self.m.device(1))?;
        let f = self.m.function(&first.stats1, 0)?;
        let occ = self.m.occupancy(&f, THREADS, 0)?;
        if occ == 0 {
            return Err(GpuError::Plan(PlanError(format!("{}: no block of {THREADS} threads fits on an SM of {}", first.stats1, self.info().name))));
        }
        Ok(plan_batch(norm, storage, layout, tuning, &self.m.device(occ))?)
    }

    unsafe fn go<P: Copy>(&self, stream: &Arc<CudaStream>, name: &str, grid: u32, params: P) -> Result<()>
    where
        ParamArg<P>: DeviceRepr,
    {
        let f = self.m.function(name, 0)?;
        launch(stream, &f, name, grid.max(1), THREADS, 0, &ParamArg(params))
    }

    /// Enqueue a forward (`mode`): train updates `running` (if given) and saves the batch
    /// statistics (and the L-inf/Top-k selection); eval needs `running` and saves the frozen
    /// statistics. Returns the plan.
    ///
    /// # Safety
    /// Device buffers of this context valid for the layout (x, y: `layout.len()` elements of
    /// `storage`; weight, bias: C; stats, aux, running: C entries) until the work completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn forward(
        &self,
        stream: &Arc<CudaStream>,
        norm: &BatchNorm,
        storage: Storage,
        layout: Layout,
        mode: Mode,
        running: Option<&DevRunning>,
        b: &BnFwdBuffers,
        tuning: &BatchTuning,
    ) -> Result<BatchPlan> {
        let plan = self.plan(norm, storage, layout, tuning)?;
        if plan.norm == BatchNorm::MeanOnly && b.weight.is_some() {
            return Err(GpuError::Plan(PlanError("mean-only batch norm has a bias only (no weight)".into())));
        }
        if let Some(r) = running {
            // The CPU path's rules (RunningStats::validate, batch::forward).
            if !(0.0..=1.0).contains(&r.momentum) {
                return Err(normlab_norms::NormError::OutOfRange { what: "momentum", range: "[0, 1]", value: r.momentum }.into());
            }
            if mode == Mode::Train && plan.kind == 1 && plan.geo.m == 1 && r.convention == Convention::PyTorch {
                return Err(GpuError::Plan(PlanError("an unbiased running variance over m = 1 element per channel: m / (m - 1) is undefined".into())));
            }
        }
        let c = layout.channels();
        let stats = b.stats as usize as *mut KernelStats;
        let aux = b.aux as usize as *mut Aux;
        let lvec = layout_vec(&layout, &[b.x as usize]);
        match mode {
            Mode::Train => {
                let nrec = c * plan.geo.nchunks as usize;
                let mut rec: CudaSlice<f64> = stream.alloc_zeros(4 * nrec).map_err(GpuError::driver("cuMemAlloc(records)"))?;
                let rec_p = rec.device_ptr_mut(stream).0;
                let (rm, rs, a, conv) = match running {
                    Some(r) => (r.mean as usize as *mut f64, r.spread as usize as *mut f64, r.weight(), BatchPlan::conv_code(r.convention)),
                    None => (std::ptr::null_mut(), std::ptr::null_mut(), 0.0, 0),
                };
                self.go(stream, &plan.stats1, plan.grid_items, Stats1Params { x: p(b.x), rec: pm(rec_p), g: geo(&plan, lvec) })?;
                let f1 = Fin1Params {
                    rec: p(rec_p),
                    stats,
                    aux,
                    run_mean: rm,
                    run_spread: rs,
                    g: geo(&plan, false),
                    eps: plan.eps,
                    c: plan.c,
                    a,
                    kind: plan.kind,
                    centred: plan.centred as i32,
                    conv,
                    final_pass: plan.final_pass1() as i32,
                };
                self.go(stream, FINALIZE1, plan.grid_channels, f1)?;
                let mut part: Option<CudaSlice<f64>> = None;
                if let Some(s2) = &plan.stats2 {
                    let topk = plan.kind == 5;
                    let n = if topk { (nrec * plan.k as usize).div_ceil(2) } else { nrec };
                    let part_s = part.insert(stream.alloc_zeros(n.max(1)).map_err(GpuError::driver("cuMemAlloc(stats2)"))?);
                    let part_p = part_s.device_ptr_mut(stream).0;
                    let grid = if topk { plan.grid_items_topk } else { plan.grid_items };
                    self.go(stream, s2, grid, Stats2Params { x: p(b.x), stats, out: pm(part_p), g: geo(&plan, lvec), k: plan.k, pad: 0 })?;
                    let f2 = Fin2Params {
                        part: p(part_p),
                        stats,
                        aux,
                        run_spread: rs,
                        g: geo(&plan, false),
                        eps: plan.eps,
                        c: plan.c,
                        a,
                        kind: plan.kind,
                        conv,
                        k: plan.k,
                        pad: 0,
                    };
                    self.go(stream, FINALIZE2, plan.grid_channels, f2)?;
                }
                if let Some(cut) = &plan.cut {
                    self.go(stream, cut, plan.grid_channels, CutParams { x: p(b.x), stats, aux, g: geo(&plan, false) })?;
                }
                // Freed in stream order after the kernels that read them.
                drop((rec, part));
            }
            Mode::Eval => {
                let r = running.ok_or_else(|| GpuError::Plan(PlanError("eval mode normalizes with the running statistics: pass them".into())))?;
                let fr = FrozenParams {
                    run_mean: r.mean as usize as *const f64,
                    run_spread: r.spread as usize as *const f64,
                    stats,
                    c: c as i64,
                    eps: plan.eps,
                    kind: plan.kind,
                    centred: plan.centred as i32,
                    conv: BatchPlan::conv_code(r.convention),
                    pad: 0,
                };
                self.go(stream, FROZEN, plan.grid_frozen, fr)?;
            }
        }
        let ap = ApplyParams { x: p(b.x), y: pm(b.y), stats, weight: opt(b.weight), bias: opt(b.bias), g: geo(&plan, aligned16(&[b.x, b.y])) };
        self.go(stream, &plan.apply, plan.grid_elems, ap)?;
        Ok(plan)
    }

    /// Enqueue a backward (`mode` as the forward's): dx, and dweight / dbias when given.
    ///
    /// # Safety
    /// As [`BatchKernels::forward`]; dweight and dbias hold C elements of `storage`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn backward(
        &self,
        stream: &Arc<CudaStream>,
        norm: &BatchNorm,
        storage: Storage,
        layout: Layout,
        mode: Mode,
        b: &BnBwdBuffers,
        tuning: &BatchTuning,
    ) -> Result<BatchPlan> {
        let plan = self.plan(norm, storage, layout, tuning)?;
        if plan.norm == BatchNorm::MeanOnly && (b.weight.is_some() || b.dweight.is_some()) {
            return Err(GpuError::Plan(PlanError("mean-only batch norm has a bias only (no weight)".into())));
        }
        let c = layout.channels();
        let train = mode == Mode::Train;
        let stats = b.stats as usize as *const KernelStats;
        let aux = b.aux as usize as *const Aux;
        let mut coef: CudaSlice<f32> = stream.alloc_zeros(2 * c).map_err(GpuError::driver("cuMemAlloc(coefficients)"))?;
        let coef_p = coef.device_ptr_mut(stream).0;
        let mut rec: Option<CudaSlice<f64>> = None;
        if train || b.dweight.is_some() || b.dbias.is_some() {
            let nrec = c * plan.geo.nchunks as usize;
            let rec_s = rec.insert(stream.alloc_zeros(4 * nrec).map_err(GpuError::driver("cuMemAlloc(records)"))?);
            let rec_p = rec_s.device_ptr_mut(stream).0;
            let lvec = layout_vec(&layout, &[b.x as usize, b.dy as usize]);
            let rp = RedParams { x: p(b.x), dy: p(b.dy), stats, aux, rec: pm(rec_p), g: geo(&plan, lvec) };
            self.go(stream, if train { &plan.reduce_train } else { &plan.reduce_eval }, plan.grid_items, rp)?;
            let bf = BFinParams {
                rec: p(rec_p),
                stats,
                weight: opt(b.weight),
                dweight: b.dweight.map_or(std::ptr::null_mut(), pm),
                dbias: b.dbias.map_or(std::ptr::null_mut(), pm),
                coef: coef_p as usize as *mut [f32; 2],
                g: geo(&plan, false),
                c: plan.c,
                kind: plan.kind,
                centred: plan.centred as i32,
                k: plan.k,
                eval: (!train) as i32,
            };
            self.go(stream, &plan.bwd_finalize, plan.grid_channels, bf)?;
        }
        let dp = DxParams {
            x: p(b.x),
            dy: p(b.dy),
            stats,
            aux,
            weight: opt(b.weight),
            coef: coef_p as usize as *const [f32; 2],
            dx: pm(b.dx),
            g: geo(&plan, aligned16(&[b.x, b.dy, b.dx])),
        };
        self.go(stream, if train { &plan.dx_train } else { &plan.dx_eval }, plan.grid_elems, dp)?;
        drop((coef, rec));
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use normlab_kernels::batch::params::Saved;
    use std::mem::size_of;

    #[test]
    fn param_args_wrap_the_structs_exactly() {
        assert_eq!(size_of::<ParamArg<Stats1Params>>(), size_of::<Stats1Params>());
        assert_eq!(size_of::<ParamArg<DxParams>>(), size_of::<DxParams>());
        assert_eq!(size_of::<Aux>(), 24);
        assert_eq!(size_of::<KernelStats>(), 16);
        assert_eq!(Saved::new(3).aux.len(), 3);
    }

    #[test]
    fn running_weight_follows_the_convention() {
        let r = DevRunning { mean: 0, spread: 0, momentum: 0.1, convention: Convention::PyTorch };
        assert_eq!(r.weight(), 0.1);
        assert_eq!(DevRunning { convention: Convention::NormMattersCode, ..r }.weight(), 0.9);
    }
}
