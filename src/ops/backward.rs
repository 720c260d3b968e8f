//! The backward op: `normlab_norms::row::backward` as a custom op applied without autograd.
//!
//! candle ops have one output storage, so dx, dweight and dbias come back packed in one
//! `[rows + extra, n]` tensor (dx rows first, then one row for dweight, then one for dbias,
//! each present only when asked for) and are split with `narrow`, which copies nothing.
//! Gradients are in the input's dtype: `row::backward` accumulates in the op's accumulator
//! (f32 by default, deterministic row blocks for dweight/dbias) and rounds once.
//!
//! # CUDA
//! With the feature `candle-cuda`, [`NormBwd`]'s `cuda_fwd` (next to its `cpu_fwd`) launches the
//! normlab-kernels backward with the device statistics the forward's `cuda_fwd` saved
//! (`crate::gpu::candle_ops::backward`; recomputed when there are none).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, WithDType};
use normlab_norms::{row, Element, RowStats};

use crate::ops::error::norm_err;
use crate::ops::forward::{op_name, width, NormFwd};
use crate::ops::storage::{read, with_dtype};

/// Gradients of one norm call.
pub(crate) struct Grads {
    pub dx: Tensor,
    pub dweight: Option<Tensor>,
    pub dbias: Option<Tensor>,
}

/// The backward op: arguments (x, dy) or (x, dy, weight).
struct NormBwd<'a> {
    fwd: &'a NormFwd,
    stats: Option<&'a [RowStats]>,
    want_dw: bool,
    want_db: bool,
}

impl NormBwd<'_> {
    fn extra_rows(&self) -> usize {
        self.want_dw as usize + self.want_db as usize
    }

    fn run<T: Element + WithDType>(&self, n: usize, x: &[T], dy: &[T], w: Option<&[T]>) -> Result<CpuStorage> {
        let spec = &self.fwd.spec;
        let accum = self.fwd.accum;
        let rows = x.len() / n;
        let recomputed;
        let stats = match self.stats {
            Some(s) => s,
            None => {
                let mut s = vec![RowStats::default(); rows];
                let mut scratch = vec![T::default(); x.len()];
                row::forward(spec, accum, x, n, None, None, &mut scratch, Some(&mut s)).map_err(norm_err)?;
                recomputed = s;
                &recomputed[..]
            }
        };
        let mut out = vec![T::default(); (rows + self.extra_rows()) * n];
        let (dx, rest) = out.split_at_mut(rows * n);
        let (dw, db) = match (self.want_dw, self.want_db) {
            (true, true) => {
                let (a, b) = rest.split_at_mut(n);
                (Some(a), Some(b))
            }
            (true, false) => (Some(rest), None),
            (false, true) => (None, Some(rest)),
            (false, false) => (None, None),
        };
        let counters = row::backward(spec, accum, x, dy, n, stats, w, dx, dw, db).map_err(norm_err)?;
        if let Some(t) = &self.fwd.telemetry {
            t.record_backward(counters);
        }
        Ok(T::to_cpu_storage_owned(out))
    }

    fn cpu(&self, x: (&CpuStorage, &Layout), dy: (&CpuStorage, &Layout), w: Option<(&CpuStorage, &Layout)>) -> Result<(CpuStorage, Shape)> {
        let n = width(x.1)?;
        if x.1.dims() != dy.1.dims() {
            candle_core::bail!("normlab backward: gradient shape {:?} differs from the input shape {:?}", dy.1.dims(), x.1.dims());
        }
        let rows = x.1.shape().elem_count() / n.max(1);
        let out = with_dtype!(x.0.dtype(), T => {
            let xs = read::<T>("input", x.0, x.1)?;
            let dys = read::<T>("output gradient", dy.0, dy.1)?;
            let ws = w.map(|(s, l)| read::<T>("weight", s, l)).transpose()?;
            self.run::<T>(n, &xs, &dys, ws.as_deref())
        })?;
        Ok((out, Shape::from((rows + self.extra_rows(), n))))
    }
}

/// The CUDA backward (`crate::gpu::candle_ops`), with the statistics the CUDA forward saved.
#[cfg(feature = "candle-cuda")]
impl NormBwd<'_> {
    fn cuda(
        &self,
        x: (&candle_core::CudaStorage, &Layout),
        dy: (&candle_core::CudaStorage, &Layout),
        w: Option<(&candle_core::CudaStorage, &Layout)>,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let saved = self.fwd.cuda_stats.lock().map_err(|_| candle_core::Error::msg("normlab: statistics lock poisoned"))?;
        crate::gpu::candle_ops::backward(&self.fwd.spec, self.fwd.accum, x, dy, w, saved.as_ref(), self.want_dw, self.want_db)
    }
}

impl CustomOp2 for NormBwd<'_> {
    fn name(&self) -> &'static str {
        op_name(self.fwd.spec.kind, true)
    }
    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu((s1, l1), (s2, l2), None)
    }
    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s1, l1), (s2, l2), None)
    }
}

impl CustomOp3 for NormBwd<'_> {
    fn name(&self) -> &'static str {
        op_name(self.fwd.spec.kind, true)
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu((s1, l1), (s2, l2), Some((s3, l3)))
    }
    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s1, l1), (s2, l2), Some((s3, l3)))
    }
}

/// dx (and dweight / dbias when asked for) in one pass of the backward op.
pub(crate) fn backward(
    fwd: &NormFwd,
    x: &Tensor,
    w: Option<&Tensor>,
    dy: &Tensor,
    stats: Option<&[RowStats]>,
    want_dw: bool,
    want_db: bool,
) -> Result<Grads> {
    let want_dw = want_dw && w.is_some();
    let op = NormBwd { fwd, stats, want_dw, want_db };
    let packed = match w {
        Some(w) => x.apply_op3_no_bwd(dy, w, &op)?,
        None => x.apply_op2_no_bwd(dy, &op)?,
    };
    let n = x.dims().last().copied().unwrap_or(1);
    let rows = x.elem_count() / n.max(1);
    let dx = packed.narrow(0, 0, rows)?.reshape(x.shape())?;
    let mut next = rows;
    let mut take_row = |on: bool| -> Result<Option<Tensor>> {
        if !on {
            return Ok(None);
        }
        let t = packed.narrow(0, next, 1)?.reshape(n)?;
        next += 1;
        Ok(Some(t))
    };
    let dweight = take_row(want_dw)?;
    let dbias = take_row(want_db)?;
    Ok(Grads { dx, dweight, dbias })
}
