//! Launch wrappers of the fused residual-update kernels (normlab-kernels' `residual.cu`: nGPT's
//! `Norm(h + a (Norm(b) - h))` and anGPT's `nu(a) (h + a (b - h))`, forward and backward) on a
//! CUDA stream, as [`crate::gpu::rows`] does for the row norms:
//! 1. plan with `normlab_kernels::residual::plan_update` (typed errors: d = 0, a of the wrong
//!    length, eps, rows too wide for shared memory) for the device's SM count and opt-in shared
//!    memory;
//! 2. re-plan the persistent grid with the kernel's real occupancy;
//! 3. opt the function in to more than 48 KiB of dynamic shared memory when the plan needs it;
//! 4. pass the parameter struct as the kernel's single argument.
//!
//! The backward with `da` allocates the `[grid][a_len]` fp32 partials on the stream and runs
//! `nl_update_finalize` (block order: deterministic for a device). Buffers are raw device
//! addresses (the standalone runtime and, later, candle's tensors).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, DevicePtrMut, DeviceRepr};
use normlab_kernels::list::{Direction, Storage};
use normlab_kernels::residual::{plan_update, vec_ok, Update, UpdBwdParams, UpdFinalizeParams, UpdFwdParams, UpdatePlan, UpdateStats, FINALIZE_THREADS};
use normlab_kernels::sources;

use crate::gpu::args::{ptr as p, ptr_mut as pm, DevPtr, ParamArg};
use crate::gpu::error::{GpuError, PlanError, Result};
use crate::gpu::module::{family_kernels, Source};
use crate::gpu::rows::launch;

/// Shared memory left for the update kernels' static arrays (block reductions: at most 1152
/// bytes in the compile gate's report) when planning against the device's opt-in limit.
pub const UPDATE_STATIC_SMEM_RESERVE: usize = 2048;

// SAFETY: `#[repr(C)]` plain data (integers, floats and device addresses) laid out as the
// kernels' parameter structs (checked against NVRTC's PTX by tests/gpu_runtime.rs).
unsafe impl DeviceRepr for ParamArg<UpdFwdParams> {}
unsafe impl DeviceRepr for ParamArg<UpdBwdParams> {}
unsafe impl DeviceRepr for ParamArg<UpdFinalizeParams> {}

/// The update source as the runtime compiles it.
pub const RESIDUAL: Source = Source {
    module: "residual",
    file_name: sources::RESIDUAL_CU_NAME,
    text: sources::RESIDUAL_CU,
    options: sources::NVRTC_OPTIONS,
    needs_headers: true,
};

/// Buffers of a forward launch over `rows` rows of `d` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdFwdBuffers {
    pub rows: usize,
    pub h: DevPtr,
    pub b: DevPtr,
    /// `a_len` fp32 values.
    pub a: DevPtr,
    pub a_len: usize,
    /// May equal `h` (in place).
    pub y: DevPtr,
    /// nGPT: one [`UpdateStats`] (16 bytes) per row, needed by the backward.
    pub stats: Option<DevPtr>,
}

/// Inputs and outputs of a backward launch (the da partials are allocated by the wrapper).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdBwdArgs {
    pub rows: usize,
    pub h: DevPtr,
    pub b: DevPtr,
    pub a: DevPtr,
    pub a_len: usize,
    pub dy: DevPtr,
    /// nGPT: the forward's statistics (anGPT: ignored).
    pub stats: Option<DevPtr>,
    pub dh: DevPtr,
    pub db: DevPtr,
    /// `a_len` fp32 values.
    pub da: Option<DevPtr>,
}

/// The forward's parameter struct (`vec_ok` when h, b, y are congruent modulo 16 and d % 8 == 0).
pub fn fwd_params(plan: &UpdatePlan, b: &UpdFwdBuffers) -> UpdFwdParams {
    UpdFwdParams {
        h: p(b.h),
        b: p(b.b),
        a: b.a as usize as *const f32,
        y: pm(b.y),
        stats: b.stats.map_or(std::ptr::null_mut(), |s| s as usize as *mut UpdateStats),
        rows: b.rows as i64,
        d: plan.d,
        a_len: plan.a_len,
        eps: plan.eps,
        vec_ok: vec_ok(plan.d as usize, &[b.h as usize, b.b as usize, b.y as usize]) as i32,
    }
}

/// The backward's parameter struct; `da_part` is the wrapper's partial buffer.
pub fn bwd_params(plan: &UpdatePlan, b: &UpdBwdArgs, da_part: Option<DevPtr>) -> UpdBwdParams {
    UpdBwdParams {
        h: p(b.h),
        b: p(b.b),
        a: b.a as usize as *const f32,
        dy: p(b.dy),
        stats: b.stats.map_or(std::ptr::null(), |s| s as usize as *const UpdateStats),
        dh: pm(b.dh),
        db: pm(b.db),
        da_part: da_part.map_or(std::ptr::null_mut(), |a| a as usize as *mut f32),
        rows: b.rows as i64,
        d: plan.d,
        a_len: plan.a_len,
        vec_ok: vec_ok(plan.d as usize, &[b.h as usize, b.b as usize, b.dy as usize, b.dh as usize, b.db as usize]) as i32,
    }
}

family_kernels!(
    /// The update kernels loaded in one context.
    UpdateKernels,
    RESIDUAL,
    reserve: UPDATE_STATIC_SMEM_RESERVE
);

impl UpdateKernels {
    /// Plan, then re-plan the persistent grid with the kernel's occupancy.
    #[allow(clippy::too_many_arguments)]
    pub fn plan(
        &self,
        update: Update,
        storage: Storage,
        dir: Direction,
        rows: usize,
        d: usize,
        a_len: usize,
        eps: f64,
        want_da: bool,
    ) -> Result<(UpdatePlan, CudaFunction)> {
        self.m.plan_persistent(|dev| plan_update(update, storage, dir, rows, d, a_len, eps, want_da, dev), |pl| (&pl.kernel, pl.block, pl.smem))
    }

    /// Enqueue the forward over `b.rows` rows of `d` elements of `storage` on `stream`.
    ///
    /// # Safety
    /// The addresses must be device buffers of this context valid for the launch's shape (h, b,
    /// y: rows * d elements; a: a_len fp32; stats: rows * 16 bytes) until it completes.
    pub unsafe fn forward(&self, stream: &Arc<CudaStream>, update: Update, storage: Storage, d: usize, eps: f64, b: &UpdFwdBuffers) -> Result<UpdatePlan> {
        let (pl, f) = self.plan(update, storage, Direction::Forward, b.rows, d, b.a_len, eps, false)?;
        if b.rows == 0 {
            return Ok(pl);
        }
        let arg = ParamArg(fwd_params(&pl, b));
        launch(stream, &f, &pl.kernel, pl.grid, pl.block, pl.smem, &arg)?;
        Ok(pl)
    }

    /// Enqueue the backward: dh, db, and da (fp32 partials + `nl_update_finalize`).
    ///
    /// # Safety
    /// As [`UpdateKernels::forward`]; `stats` are the nGPT forward's, da holds a_len fp32.
    pub unsafe fn backward(&self, stream: &Arc<CudaStream>, update: Update, storage: Storage, d: usize, b: &UpdBwdArgs) -> Result<UpdatePlan> {
        if update == Update::Ngpt && b.stats.is_none() {
            return Err(GpuError::Plan(PlanError("the nGPT update backward needs the statistics of its forward".into())));
        }
        let want_da = b.da.is_some();
        let (pl, f) = self.plan(update, storage, Direction::Backward, b.rows, d, b.a_len, 0.0, want_da)?;
        let nparts = if b.rows == 0 { 0 } else { pl.grid as usize };
        let mut part = if want_da {
            // Zeroed so that a launch with zero rows finalizes to zero.
            Some(stream.alloc_zeros::<f32>((nparts * b.a_len).max(1)).map_err(GpuError::driver("cuMemAlloc(da partials)"))?)
        } else {
            None
        };
        let part_addr = part.as_mut().map(|s| s.device_ptr_mut(stream).0);
        if b.rows > 0 {
            let arg = ParamArg(bwd_params(&pl, b, part_addr));
            launch(stream, &f, &pl.kernel, pl.grid, pl.block, pl.smem, &arg)?;
        }
        if let (Some(fin), Some(part), Some(out)) = (pl.finalize, part_addr, b.da) {
            let ff = self.m.function(fin, 0)?;
            let arg = ParamArg(UpdFinalizeParams { part: part as usize as *const f32, out: out as usize as *mut f32, nparts: nparts as i32, n: pl.a_len });
            launch(stream, &ff, fin, pl.finalize_grid, FINALIZE_THREADS, 0, &arg)?;
        }
        drop(part);
        Ok(pl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use normlab_kernels::plan::Device;

    #[test]
    fn forward_fields_come_from_the_plan_and_the_buffers() {
        let pl = plan_update(Update::Ngpt, Storage::BF16, Direction::Forward, 10, 512, 512, 1e-12, false, &Device::H100).unwrap();
        let b = UpdFwdBuffers { rows: 10, h: 0x7000_0000_0010, b: 0x7000_0100_0020, a: 0x40, a_len: 512, y: 0x7000_0000_0010, stats: Some(0x80) };
        let f = fwd_params(&pl, &b);
        assert_eq!((f.h as usize, f.b as usize, f.y as usize, f.a as usize, f.stats as usize), (0x7000_0000_0010, 0x7000_0100_0020, 0x7000_0000_0010, 0x40, 0x80));
        assert_eq!((f.rows, f.d, f.a_len, f.eps, f.vec_ok), (10, 512, 512, 1e-12f32, 1));
        assert_eq!(fwd_params(&pl, &UpdFwdBuffers { b: b.b + 2, stats: None, ..b }).vec_ok, 0);
        assert!(fwd_params(&pl, &UpdFwdBuffers { stats: None, ..b }).stats.is_null());
        // d not a multiple of 8: scalar rows.
        let pl = plan_update(Update::Angpt, Storage::F16, Direction::Forward, 10, 500, 1, 0.0, false, &Device::H100).unwrap();
        assert_eq!(fwd_params(&pl, &b).vec_ok, 0);
        assert_eq!(fwd_params(&pl, &b).a_len, 1);
    }

    #[test]
    fn backward_fields_and_vector_condition() {
        let pl = plan_update(Update::Ngpt, Storage::F16, Direction::Backward, 3, 2048, 1, 0.0, true, &Device::A100).unwrap();
        let b = UpdBwdArgs { rows: 3, h: 256, b: 512, a: 64, a_len: 1, dy: 1024, stats: Some(2048), dh: 4096, db: 8192, da: Some(96) };
        let q = bwd_params(&pl, &b, Some(0x1000));
        assert_eq!((q.h as usize, q.b as usize, q.a as usize, q.dy as usize, q.stats as usize), (256, 512, 64, 1024, 2048));
        assert_eq!((q.dh as usize, q.db as usize, q.da_part as usize), (4096, 8192, 0x1000));
        assert_eq!((q.rows, q.d, q.a_len, q.vec_ok), (3, 2048, 1, 1));
        assert_eq!(bwd_params(&pl, &UpdBwdArgs { db: 8194, ..b }, None).vec_ok, 0);
        assert!(bwd_params(&pl, &b, None).da_part.is_null());
        assert_eq!(pl.finalize, Some(normlab_kernels::residual::FINALIZE_KERNEL));
    }

    #[test]
    fn param_args_are_the_structs() {
        use std::mem::size_of;
        assert_eq!(size_of::<ParamArg<UpdFwdParams>>(), 64);
        assert_eq!(size_of::<ParamArg<UpdBwdParams>>(), 88);
        assert_eq!(size_of::<ParamArg<UpdFinalizeParams>>(), 24);
    }
}
