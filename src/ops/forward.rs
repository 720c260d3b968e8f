//! The forward custom op: `normlab_norms::row::forward` on a candle tensor, with autograd.
//!
//! One op value is built per call (candle keeps it in an `Arc` inside the output tensor), so
//! the statistics it saves belong to exactly one forward and live as long as the graph does.
//! Its arity follows the affine parameters: `CustomOp1` (x), `CustomOp2` (x, weight or bias)
//! or `CustomOp3` (x, weight, bias); [`Affine`] says how to read the extra arguments.
//!
//! `bwd` hands the saved statistics to the backward op (`backward.rs`), applied
//! without autograd, which returns dx, dweight and dbias from one pass.
//!
//! # CUDA
//! With the feature `candle-cuda`, `cuda_fwd` (next to each `cpu_fwd` below) launches the
//! normlab-kernels forward on candle's stream (`crate::gpu::candle_ops`) and keeps its fp32
//! statistics in `NormFwd::cuda_stats` (a device buffer), which the backward op's `cuda_fwd`
//! reads. `bwd` is device-agnostic.

use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, WithDType};
use normlab_norms::{row, Accum, Element, NormKind, NormSpec, RowStats};

use crate::ops::backward::{self, Grads};
use crate::ops::error::norm_err;
use crate::ops::storage::{read, with_dtype};
use crate::ops::telemetry::Telemetry;

/// Which affine parameters follow x in the op's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Affine {
    None,
    Weight,
    Bias,
    WeightBias,
}

impl Affine {
    pub fn new(weight: bool, bias: bool) -> Self {
        match (weight, bias) {
            (false, false) => Affine::None,
            (true, false) => Affine::Weight,
            (false, true) => Affine::Bias,
            (true, true) => Affine::WeightBias,
        }
    }
    pub fn has_weight(self) -> bool {
        matches!(self, Affine::Weight | Affine::WeightBias)
    }
}

/// Statistics a forward saved for its backward.
#[derive(Debug)]
pub(crate) enum SavedStats {
    /// Per-row statistics of the CPU reference (accumulator values widened to f64).
    Cpu(Vec<RowStats>),
}

/// The forward op of one call.
pub(crate) struct NormFwd {
    pub spec: NormSpec,
    pub accum: Accum,
    pub affine: Affine,
    /// Save statistics for a backward (false when nothing in the call tracks gradients).
    pub save: bool,
    pub stats: Mutex<Option<SavedStats>>,
    pub telemetry: Option<Arc<Telemetry>>,
    /// fp32 statistics of the CUDA forward (`rows * 4` floats on the device), for the backward.
    #[cfg(feature = "candle-cuda")]
    pub cuda_stats: Mutex<Option<candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>>>,
}

/// Op name by kind (shows in candle's errors).
pub(crate) fn op_name(kind: NormKind, backward: bool) -> &'static str {
    match (kind, backward) {
        (NormKind::Rms, false) => "normlab-rms",
        (NormKind::Layer, false) => "normlab-layer",
        (NormKind::UnitL2, false) => "normlab-unit-l2",
        (NormKind::L1, false) => "normlab-l1",
        (NormKind::LInf, false) => "normlab-linf",
        (NormKind::TopK { .. }, false) => "normlab-topk",
        (NormKind::Rms, true) => "normlab-rms-bwd",
        (NormKind::Layer, true) => "normlab-layer-bwd",
        (NormKind::UnitL2, true) => "normlab-unit-l2-bwd",
        (NormKind::L1, true) => "normlab-l1-bwd",
        (NormKind::LInf, true) => "normlab-linf-bwd",
        (NormKind::TopK { .. }, true) => "normlab-topk-bwd",
    }
}

/// Width of the normalized (last) dimension of a layout.
pub(crate) fn width(layout: &Layout) -> Result<usize> {
    layout.dims().last().copied().ok_or_else(|| crate::ops::error::OpsError::Scalar.into())
}

impl NormFwd {
    pub fn new(spec: NormSpec, accum: Accum, affine: Affine, save: bool, telemetry: Option<Arc<Telemetry>>) -> Self {
        NormFwd {
            spec,
            accum,
            affine,
            save,
            stats: Mutex::new(None),
            telemetry,
            #[cfg(feature = "candle-cuda")]
            cuda_stats: Mutex::new(None),
        }
    }

    /// The CPU forward on dense slices.
    fn run<T: Element + WithDType>(&self, n: usize, x: &[T], w: Option<&[T]>, b: Option<&[T]>) -> Result<CpuStorage> {
        let mut y = vec![T::default(); x.len()];
        let mut stats = vec![RowStats::default(); x.len() / n.max(1)];
        let counters = row::forward(&self.spec, self.accum, x, n, w, b, &mut y, Some(&mut stats)).map_err(norm_err)?;
        if let Some(t) = &self.telemetry {
            t.record_forward(counters);
        }
        if self.save {
            *self.stats.lock().map_err(|_| candle_core::Error::msg("normlab: statistics lock poisoned"))? = Some(SavedStats::Cpu(stats));
        }
        Ok(T::to_cpu_storage_owned(y))
    }

    /// Read x and the affine arguments (in the order of `self.affine`) and run the forward.
    fn cpu(&self, x: (&CpuStorage, &Layout), extra: &[(&CpuStorage, &Layout)]) -> Result<(CpuStorage, Shape)> {
        let n = width(x.1)?;
        let out = with_dtype!(x.0.dtype(), T => {
            let xs = read::<T>("input", x.0, x.1)?;
            let args = extra.iter().map(|(s, l)| read::<T>("affine parameter", s, l)).collect::<Result<Vec<_>>>()?;
            let (w, b) = match (self.affine, args.as_slice()) {
                (Affine::None, []) => (None, None),
                (Affine::Weight, [w]) => (Some(&w[..]), None),
                (Affine::Bias, [b]) => (None, Some(&b[..])),
                (Affine::WeightBias, [w, b]) => (Some(&w[..]), Some(&b[..])),
                (a, args) => candle_core::bail!("normlab: op built for {a:?} got {} affine arguments", args.len()),
            };
            self.run::<T>(n, &xs, w, b)
        })?;
        Ok((out, x.1.shape().clone()))
    }

    /// Gradients of x and of the affine parameters present, for `dy` = dL/dy. Uses the
    /// statistics this forward saved (the lock is held for the one synchronous backward pass);
    /// without them (a forward that tracked nothing) the backward recomputes them.
    fn grads(&self, x: &Tensor, w: Option<&Tensor>, dy: &Tensor, want_dw: bool, want_db: bool) -> Result<Grads> {
        let guard = self.stats.lock().map_err(|_| candle_core::Error::msg("normlab: statistics lock poisoned"))?;
        let stats = guard.as_ref().map(|SavedStats::Cpu(s)| &s[..]);
        backward::backward(self, x, w, dy, stats, want_dw, want_db)
    }
}

/// The CUDA forward (`crate::gpu::candle_ops`): x and the affine arguments in `self.affine`'s order.
#[cfg(feature = "candle-cuda")]
impl NormFwd {
    fn cuda(&self, x: (&candle_core::CudaStorage, &Layout), extra: &[(&candle_core::CudaStorage, &Layout)]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (w, b) = match (self.affine, extra) {
            (Affine::None, []) => (None, None),
            (Affine::Weight, [w]) => (Some(*w), None),
            (Affine::Bias, [b]) => (None, Some(*b)),
            (Affine::WeightBias, [w, b]) => (Some(*w), Some(*b)),
            (a, args) => candle_core::bail!("normlab: op built for {a:?} got {} affine arguments", args.len()),
        };
        let (y, shape, stats) = crate::gpu::candle_ops::forward(&self.spec, self.accum, x, w, b, self.save)?;
        if let Some(s) = stats {
            *self.cuda_stats.lock().map_err(|_| candle_core::Error::msg("normlab: statistics lock poisoned"))? = Some(s);
        }
        Ok((y, shape))
    }
}

fn tracked(t: &Tensor) -> bool {
    t.track_op()
}

impl CustomOp1 for NormFwd {
    fn name(&self) -> &'static str {
        op_name(self.spec.kind, false)
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu((s, l), &[])
    }
    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s, l), &[])
    }
    fn bwd(&self, x: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let g = self.grads(x, None, dy, false, false)?;
        Ok(Some(g.dx))
    }
}

impl CustomOp2 for NormFwd {
    fn name(&self) -> &'static str {
        op_name(self.spec.kind, false)
    }
    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu((s1, l1), &[(s2, l2)])
    }
    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s1, l1), &[(s2, l2)])
    }
    fn bwd(&self, x: &Tensor, p: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        if self.affine.has_weight() {
            let g = self.grads(x, Some(p), dy, tracked(p), false)?;
            Ok((Some(g.dx), g.dweight))
        } else {
            let g = self.grads(x, None, dy, false, tracked(p))?;
            Ok((Some(g.dx), g.dbias))
        }
    }
}

impl CustomOp3 for NormFwd {
    fn name(&self) -> &'static str {
        op_name(self.spec.kind, false)
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
        self.cpu((s1, l1), &[(s2, l2), (s3, l3)])
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
        self.cuda((s1, l1), &[(s2, l2), (s3, l3)])
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = self.grads(x, Some(w), dy, tracked(w), tracked(b))?;
        Ok((Some(g.dx), g.dweight, g.dbias))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn op(save: bool) -> NormFwd {
        NormFwd::new(NormSpec::l1(1e-5), Accum::F32, Affine::None, save, None)
    }

    #[test]
    fn forward_saves_stats_only_when_asked_and_backward_uses_them() -> Result<()> {
        let x = Var::new(&[[1f32, -2., 3., 0.5], [4., 0., -1., 2.]], &Device::Cpu)?;
        let dy = Tensor::new(&[[0.3f32, -1., 0.2, 0.7], [1., 0.5, -0.5, 0.1]], &Device::Cpu)?;
        let unsaved = op(false);
        x.apply_op1_no_bwd(&unsaved)?;
        assert!(unsaved.stats.lock().unwrap().is_none());

        let saved = op(true);
        x.apply_op1_no_bwd(&saved)?;
        let rows = match &*saved.stats.lock().unwrap() {
            Some(SavedStats::Cpu(s)) => s.len(),
            None => panic!("stats not saved"),
        };
        assert_eq!(rows, 2);
        // Saved and recomputed statistics give the same gradient...
        let a = saved.grads(&x, None, &dy, false, false)?.dx.flatten_all()?.to_vec1::<f32>()?;
        let b = unsaved.grads(&x, None, &dy, false, false)?.dx.flatten_all()?.to_vec1::<f32>()?;
        assert_eq!(a, b);
        // ...and the backward really reads the saved ones: doubling rscale doubles dx.
        if let Some(SavedStats::Cpu(s)) = &mut *saved.stats.lock().unwrap() {
            s.iter_mut().for_each(|st| st.rscale *= 2.0);
        }
        let c = saved.grads(&x, None, &dy, false, false)?.dx.flatten_all()?.to_vec1::<f32>()?;
        assert_ne!(a, c);
        Ok(())
    }
}
