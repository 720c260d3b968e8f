//! `cuda_fwd` of the candle ops in `crate::ops` (feature `candle-cuda`): the norm ops run the
//! row kernels on candle's CUDA stream, so that training on candle's CUDA backend uses them.
//!
//! - Forward (`NormFwd`): `y = norm(x) * w + b` by `nl_<kind>_fwd_*`, and the kernel's fp32
//!   per-row statistics kept in the op ([`SavedStats::Cuda`], a device buffer of
//!   `rows * {mean_hi, mean_lo, rscale, meta}`) when a backward may follow.
//! - Backward (`NormBwd`): dx, and dweight / dbias, by `nl_<kind>_bwd_*` (+ `nl_finalize_*`),
//!   packed as the CPU op packs them (`[rows + extra, n]`: dx rows, then a dweight row, then a
//!   dbias row). Without saved device statistics it recomputes them with one forward launch.
//!
//! Limits (typed errors naming the value, never a silent fallback): fp16 and bf16 storage only
//! (the kernels' types), the f32 accumulator only (the kernels' statistics), contiguous
//! operands (as candle's own CUDA norms), k <= 32 for Top-k and rows that fit shared memory
//! (`normlab_kernels::plan`). Telemetry counters are not collected on the GPU.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use candle_core::{CudaStorage, DType, Layout, Result, Shape};
use normlab_kernels::list::Storage;
use normlab_norms::Accum;

use crate::gpu::args::{DevPtr, FwdBuffers};
use crate::gpu::error::GpuError;
use crate::gpu::rows::{BwdArgs, RowKernels};

fn err(e: GpuError) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// The kernel storage type of a candle dtype.
fn storage_of(dtype: DType) -> Result<Storage> {
    match dtype {
        DType::F16 => Ok(Storage::F16),
        DType::BF16 => Ok(Storage::BF16),
        other => Err(err(GpuError::UnsupportedDType { dtype: format!("{other:?}") })),
    }
}

/// The GPU statistics honour only the f32 accumulator.
pub fn check_accum(accum: Accum) -> Result<()> {
    match accum {
        Accum::F32 => Ok(()),
        other => Err(err(GpuError::UnsupportedAccum { accum: format!("{other:?}") })),
    }
}

/// A contiguous operand: its device address (at the layout's offset) and element count.
struct Operand<'a> {
    addr: DevPtr,
    len: usize,
    _guard: SyncOnDrop<'a>,
}

fn operand<'a>(what: &'static str, s: &'a CudaStorage, l: &Layout, stream: &'a CudaStream) -> Result<Operand<'a>> {
    let (start, end) = l
        .contiguous_offsets()
        .ok_or_else(|| err(GpuError::NotContiguous { what, shape: l.dims().to_vec(), stride: l.stride().to_vec() }))?;
    macro_rules! addr {
        ($t:ty) => {{
            let slice = s.as_cuda_slice::<$t>()?;
            if end > slice.len() {
                return Err(err(GpuError::Length { what, expected: end, got: slice.len() }));
            }
            let (base, guard) = slice.device_ptr(stream);
            Ok(Operand { addr: base + (start * 2) as u64, len: end - start, _guard: guard })
        }};
    }
    match s.dtype() {
        DType::F16 => addr!(half::f16),
        DType::BF16 => addr!(half::bf16),
        other => Err(err(GpuError::UnsupportedDType { dtype: format!("{other:?}") })),
    }
}

/// An affine parameter: the input's dtype, n elements.
fn param<'a>(what: &'static str, p: Option<(&'a CudaStorage, &Layout)>, stream: &'a CudaStream, dtype: DType, n: usize) -> Result<Option<Operand<'a>>> {
    let Some((s, l)) = p else { return Ok(None) };
    if s.dtype() != dtype {
        return Err(err(GpuError::Plan(crate::gpu::PlanError(format!("{what}: dtype {:?} differs from the input's {dtype:?}", s.dtype())))));
    }
    let o = operand(what, s, l, stream)?;
    if o.len != n {
        return Err(err(GpuError::Length { what, expected: n, got: o.len }));
    }
    Ok(Some(o))
}

/// A fresh output buffer of `len` elements of `dtype`, wrapped as candle storage. Not zeroed
/// (a memset would add 2 bytes per element of traffic): the kernels write every element of
/// their outputs (every row of y / dx; dweight and dbias by the finalize kernel, also for zero
/// rows).
fn alloc_out(dev: &candle_core::CudaDevice, dtype: DType, len: usize) -> Result<CudaStorage> {
    // SAFETY: the buffer is fully written by the launch that follows before anyone reads it.
    Ok(match dtype {
        DType::F16 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<half::f16>(len.max(1))? }, dev.clone()),
        DType::BF16 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<half::bf16>(len.max(1))? }, dev.clone()),
        other => return Err(err(GpuError::UnsupportedDType { dtype: format!("{other:?}") })),
    })
}

fn out_addr<'a>(s: &'a mut CudaStorage, stream: &'a CudaStream) -> Result<(DevPtr, SyncOnDrop<'a>)> {
    match s.dtype() {
        DType::F16 => {
            Ok(s.as_cuda_slice_mut::<half::f16>()?.device_ptr_mut(stream))
        }
        _ => {
            Ok(s.as_cuda_slice_mut::<half::bf16>()?.device_ptr_mut(stream))
        }
    }
}

/// Width of the normalized (last) dimension.
fn width(l: &Layout) -> Result<usize> {
    l.dims().last().copied().ok_or_else(|| err(GpuError::Plan(crate::gpu::PlanError("input: a norm needs a tensor of rank >= 1, got a scalar".into()))))
}

fn kernels(stream: &Arc<CudaStream>) -> Result<Arc<RowKernels>> {
    RowKernels::for_context(stream.context()).map_err(err)
}

/// Forward of a norm op on CUDA: the output storage, and the device statistics.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    spec: &normlab_norms::NormSpec,
    accum: Accum,
    x: (&CudaStorage, &Layout),
    weight: Option<(&CudaStorage, &Layout)>,
    bias: Option<(&CudaStorage, &Layout)>,
    want_stats: bool,
) -> Result<(CudaStorage, Shape, Option<CudaSlice<f32>>)> {
    check_accum(accum)?;
    let dtype = x.0.dtype();
    let storage = storage_of(dtype)?;
    let n = width(x.1)?;
    let dev = x.0.device().clone();
    let stream = dev.cuda_stream();
    let xo = operand("input", x.0, x.1, &stream)?;
    let rows = xo.len / n.max(1);
    let w = param("weight", weight, &stream, dtype, n)?;
    let b = param("bias", bias, &stream, dtype, n)?;
    let mut y = alloc_out(&dev, dtype, xo.len)?;
    let mut stats = dev.alloc_zeros::<f32>((rows * 4).max(1))?;
    {
        let (ya, _gy) = out_addr(&mut y, &stream)?;
        let (sa, _gs) = stats.device_ptr_mut(&stream);
        let bufs = FwdBuffers { rows, x: xo.addr, y: ya, weight: w.as_ref().map(|o| o.addr), bias: b.as_ref().map(|o| o.addr), stats: Some(sa) };
        let k = kernels(&stream)?;
        // SAFETY: x holds rows * n elements at its address, y was allocated for them, weight and
        // bias hold n, stats rows * 16 bytes; all on candle's stream, alive until enqueued.
        unsafe { k.forward(&stream, spec, storage, n, &bufs) }.map_err(err)?;
    }
    Ok((y, x.1.shape().clone(), want_stats.then_some(stats)))
}

/// Backward of a norm op on CUDA: packed `[rows + extra, n]` gradients.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    spec: &normlab_norms::NormSpec,
    accum: Accum,
    x: (&CudaStorage, &Layout),
    dy: (&CudaStorage, &Layout),
    weight: Option<(&CudaStorage, &Layout)>,
    saved: Option<&CudaSlice<f32>>,
    want_dw: bool,
    want_db: bool,
) -> Result<(CudaStorage, Shape)> {
    check_accum(accum)?;
    let dtype = x.0.dtype();
    let storage = storage_of(dtype)?;
    let n = width(x.1)?;
    if x.1.dims() != dy.1.dims() || dy.0.dtype() != dtype {
        return Err(err(GpuError::Plan(crate::gpu::PlanError(format!(
            "output gradient {:?} {:?} does not match the input {:?} {dtype:?}",
            dy.1.dims(),
            dy.0.dtype(),
            x.1.dims()
        )))));
    }
    let dev = x.0.device().clone();
    let stream = dev.cuda_stream();
    let k = kernels(&stream)?;
    let xo = operand("input", x.0, x.1, &stream)?;
    let dyo = operand("output gradient", dy.0, dy.1, &stream)?;
    let rows = xo.len / n.max(1);
    let wo = param("weight", weight, &stream, dtype, n)?;
    let want_dw = want_dw && wo.is_some();
    let extra = want_dw as usize + want_db as usize;
    // Statistics: the forward's, or recomputed by one forward launch into scratch buffers.
    let recomputed;
    let stats = match saved {
        Some(s) if s.len() >= rows * 4 => s,
        _ => {
            let mut st = dev.alloc_zeros::<f32>((rows * 4).max(1))?;
            let mut scratch = alloc_out(&dev, dtype, xo.len)?;
            {
                let (ya, _gy) = out_addr(&mut scratch, &stream)?;
                let (sa, _gs) = st.device_ptr_mut(&stream);
                let bufs = FwdBuffers { rows, x: xo.addr, y: ya, weight: None, bias: None, stats: Some(sa) };
                // SAFETY: as in `forward`.
                unsafe { k.forward(&stream, spec, storage, n, &bufs) }.map_err(err)?;
            }
            recomputed = st;
            &recomputed
        }
    };
    let mut out = alloc_out(&dev, dtype, (rows + extra) * n)?;
    {
        let (oa, _go) = out_addr(&mut out, &stream)?;
        let (sa, _gs) = stats.device_ptr(&stream);
        let row_bytes = (n * 2) as u64;
        let dw = want_dw.then_some(oa + rows as u64 * row_bytes);
        let db = want_db.then_some(oa + (rows + want_dw as usize) as u64 * row_bytes);
        let args = BwdArgs { rows, x: xo.addr, dy: dyo.addr, stats: sa, weight: wo.as_ref().map(|o| o.addr), dx: oa, dweight: dw, dbias: db };
        // SAFETY: out holds (rows + extra) * n elements: dx, then the dweight and dbias rows.
        unsafe { k.backward(&stream, spec, storage, n, &args) }.map_err(err)?;
    }
    Ok((out, Shape::from((rows + extra, n))))
}
