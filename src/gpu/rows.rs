//! Launch wrappers of the row-norm kernels (normlab-kernels' `rownorm.cu`) on a CUDA stream.
//!
//! [`RowKernels`] is the compiled module of one context with its function handles. A launch:
//! 1. plans with `normlab_kernels::plan` (typed errors for k > 32, rows too wide, dtypes), for
//!    the device's SM count and opt-in shared memory;
//! 2. re-plans the persistent grid with the kernel's real occupancy
//!    (`cuOccupancyMaxActiveBlocksPerMultiprocessor` for the plan's block and shared memory):
//!    grid = min(blocks needed, SMs x resident blocks per SM);
//! 3. opts the function in to more than 48 KiB of dynamic shared memory when the plan needs it;
//! 4. passes the parameter struct (`args`) as the kernel's single argument.
//!
//! The backward with weight/bias gradients allocates the `[grid][n]` fp32 partials on the
//! stream and runs `nl_finalize_*`, which sums them in block order (deterministic for a device).
//! Buffers are raw device addresses so that the same wrappers serve the standalone runtime
//! (gpu-check, bench) and candle's tensors (feature `candle-cuda`).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, DevicePtrMut, LaunchConfig, PushKernelArg};
use normlab_kernels::list::{Direction, FwdVariant, Storage};
use normlab_kernels::plan::{plan, plan_variant, Device, LaunchPlan, FINALIZE_THREADS};
use normlab_kernels::sources;
use normlab_norms::NormSpec;

use crate::gpu::args::{bwd_params, finalize_params, fwd_params, fwd_var_params, BwdBuffers, DevPtr, FwdBuffers, ParamArg};
use crate::gpu::error::{GpuError, Result};
use crate::gpu::module::{family_kernels, Source};

/// Shared memory left for the kernels' static arrays (block reductions, about 0.8 KiB) when
/// planning dynamic shared memory against the device's opt-in limit.
pub const STATIC_SMEM_RESERVE: usize = 1024;

/// The row-norm source as the runtime compiles it.
pub const ROWNORM: Source = Source {
    module: "rownorm",
    file_name: sources::ROWNORM_CU_NAME,
    text: sources::ROWNORM_CU,
    options: sources::NVRTC_OPTIONS,
    needs_headers: true,
};

/// Inputs and outputs of a backward launch (the partials are allocated by the wrapper).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwdArgs {
    pub rows: usize,
    pub x: DevPtr,
    pub dy: DevPtr,
    pub stats: DevPtr,
    pub weight: Option<DevPtr>,
    pub dx: DevPtr,
    /// n elements of the storage type.
    pub dweight: Option<DevPtr>,
    pub dbias: Option<DevPtr>,
}

family_kernels!(
    /// The row kernels loaded in one context.
    RowKernels,
    ROWNORM,
    reserve: STATIC_SMEM_RESERVE
);

impl RowKernels {
    /// The planning view of the device.
    pub fn device(&self, blocks_per_sm: u32) -> Device {
        self.m.device(blocks_per_sm)
    }

    /// Plan, then re-plan the persistent grid with the kernel's occupancy.
    #[allow(clippy::too_many_arguments)]
    pub fn plan(
        &self,
        spec: &NormSpec,
        storage: Storage,
        dir: Direction,
        rows: usize,
        n: usize,
        want_dw: bool,
        want_db: bool,
    ) -> Result<(LaunchPlan, CudaFunction)> {
        self.m.plan_persistent(|dev| plan(spec, storage, dir, rows, n, want_dw, want_db, dev), |p| (&p.kernel, p.block, p.smem))
    }

    /// [`RowKernels::plan`] for a forward variant (`plan_variant`: pure-half or fp8 output).
    #[allow(clippy::too_many_arguments)]
    pub fn plan_variant(
        &self,
        spec: &NormSpec,
        storage: Storage,
        variant: FwdVariant,
        rows: usize,
        n: usize,
        out_scale: f32,
    ) -> Result<(LaunchPlan, CudaFunction)> {
        self.m.plan_persistent(|dev| plan_variant(spec, storage, variant, rows, n, out_scale, dev), |p| (&p.kernel, p.block, p.smem))
    }

    /// Enqueue a forward variant over `b.rows` rows of `n` elements of `storage`:
    /// - `FwdVariant::Pure`: statistics and output computed in the storage half type (as
    ///   normlab-norms' `Accum::PureF16` / `PureBf16`), `counts` (optional) receives one 16-byte
    ///   `RowCounts` per row (non-finite inputs, accumulator overflow, non-finite outputs);
    /// - `FwdVariant::E4M3`: `y` is an fp8 E4M3 buffer (one byte per element),
    ///   `y = round_e4m3(y_fp32 * out_scale)`.
    ///
    /// # Safety
    /// As [`RowKernels::forward`]; `counts` holds rows * 16 bytes; for E4M3, `y` rows * n bytes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn forward_variant(
        &self,
        stream: &Arc<CudaStream>,
        spec: &NormSpec,
        storage: Storage,
        variant: FwdVariant,
        n: usize,
        b: &FwdBuffers,
        counts: Option<DevPtr>,
        out_scale: f32,
    ) -> Result<LaunchPlan> {
        let (p, f) = self.plan_variant(spec, storage, variant, b.rows, n, out_scale)?;
        if b.rows == 0 {
            return Ok(p);
        }
        let arg = ParamArg(fwd_var_params(&p, b, variant, counts, out_scale));
        launch(stream, &f, &p.kernel, p.grid, p.block, p.smem, &arg)?;
        Ok(p)
    }

    /// Enqueue the forward `y = norm(x) * w + b` (and per-row statistics) over `b.rows` rows of
    /// `n` elements of `storage` on `stream`.
    ///
    /// # Safety
    /// The addresses must be device buffers of this context, valid for the launch's shape
    /// (x, y: rows * n elements; weight, bias: n; stats: rows * 16 bytes) until it completes.
    pub unsafe fn forward(&self, stream: &Arc<CudaStream>, spec: &NormSpec, storage: Storage, n: usize, b: &FwdBuffers) -> Result<LaunchPlan> {
        let (p, f) = self.plan(spec, storage, Direction::Forward, b.rows, n, false, false)?;
        if b.rows == 0 {
            return Ok(p);
        }
        let arg = ParamArg(fwd_params(&p, b));
        launch(stream, &f, &p.kernel, p.grid, p.block, p.smem, &arg)?;
        Ok(p)
    }

    /// Enqueue the backward: dx, and dweight / dbias (fp32 partials + `nl_finalize_*`).
    ///
    /// # Safety
    /// As [`RowKernels::forward`]; `stats` are the forward's, dweight / dbias hold n elements.
    pub unsafe fn backward(&self, stream: &Arc<CudaStream>, spec: &NormSpec, storage: Storage, n: usize, b: &BwdArgs) -> Result<LaunchPlan> {
        let want_dw = b.dweight.is_some();
        let want_db = b.dbias.is_some();
        let (p, f) = self.plan(spec, storage, Direction::Backward, b.rows, n, want_dw, want_db)?;
        let nparts = if b.rows == 0 { 0 } else { p.grid as usize };
        let alloc = |on: bool| -> Result<Option<cudarc::driver::CudaSlice<f32>>> {
            if !on {
                return Ok(None);
            }
            // Zeroed so that a launch with zero rows finalizes to zero gradients.
            stream.alloc_zeros::<f32>((nparts * n).max(1)).map(Some).map_err(GpuError::driver("cuMemAlloc(partials)"))
        };
        let mut dw_part = alloc(want_dw)?;
        let mut db_part = alloc(want_db)?;
        let addr = |s: &mut Option<cudarc::driver::CudaSlice<f32>>| s.as_mut().map(|s| s.device_ptr_mut(stream).0);
        let (dw_addr, db_addr) = (addr(&mut dw_part), addr(&mut db_part));
        if b.rows > 0 {
            let bufs = BwdBuffers {
                rows: b.rows,
                x: b.x,
                dy: b.dy,
                stats: b.stats,
                weight: b.weight,
                dx: b.dx,
                dw_part: dw_addr,
                db_part: db_addr,
            };
            let arg = ParamArg(bwd_params(&p, &bufs));
            launch(stream, &f, &p.kernel, p.grid, p.block, p.smem, &arg)?;
        }
        if let Some(fin) = &p.finalize {
            let ff = self.m.function(fin, 0)?;
            for (part, out) in [(dw_addr, b.dweight), (db_addr, b.dbias)] {
                let (Some(part), Some(out)) = (part, out) else { continue };
                let arg = ParamArg(finalize_params(part, out, nparts, p.n));
                launch(stream, &ff, fin, p.finalize_grid.max(1), FINALIZE_THREADS, 0, &arg)?;
            }
        }
        // The partials are freed in stream order (or after a synchronisation) when dropped.
        drop((dw_part, db_part));
        Ok(p)
    }
}

/// Enqueue one kernel with its parameter struct as the only argument.
///
/// # Safety
/// `arg` must be the parameter struct `f` expects, with valid device addresses.
pub(crate) unsafe fn launch<P: Copy>(
    stream: &CudaStream,
    f: &CudaFunction,
    name: &str,
    grid: u32,
    block: u32,
    smem: usize,
    arg: &ParamArg<P>,
) -> Result<()>
where
    ParamArg<P>: cudarc::driver::DeviceRepr,
{
    let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: smem as u32 };
    let mut b = stream.launch_builder(f);
    b.arg(arg);
    b.launch(cfg).map(|_| ()).map_err(|e| GpuError::Driver { call: "cuLaunchKernel", message: format!("{name}: {e:?}") })
}
