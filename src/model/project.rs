//! The post-step weight constraints, in place on the `Var`s the optimizer owns.
//!
//! Each matrix is projected by `normlab_norms::weight` (norms accumulated in f64, one rounding
//! back into storage; exact guarantees documented there) directly in the `Var`'s storage, in
//! its storage dtype, through a candle in-place op: every holder of the `Var` (the model's
//! layers, the optimizer) sees the result, and nothing is copied or allocated. This is the
//! equivalent of NVIDIA/ngpt's `.data.copy_` (outside autograd, moments untouched).
//!
//! [`project_all`] is the models' post-step entry point. On the CPU it projects one matrix after
//! the other. With the `candle-cuda` feature, the matrices held on a CUDA device are projected by
//! normlab-kernels' fused kernel (`crate::gpu::project`): ONE launch per (device, storage dtype)
//! covers every matrix, on candle's stream, writing into each `Var`'s own device buffer, because
//! a model's ~150 matrices as ~150 launches (or a copy out and back) would cost more than the
//! projection itself. The kernel keeps the CPU path's guarantees and reports (kernels/README.md,
//! "Weight projections"; checked by `normlab gpu-check`). Without `candle-cuda` that branch does
//! not exist.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, InplaceOp1, Result, Var};
use normlab_norms::weight::{project_ball, project_unit, Axis, Bound, MatShape, ProjectReport};
use normlab_norms::{Element, NormError};

/// What a matrix is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Constraint {
    /// nGPT: every line along the axis has unit L2 norm.
    Unit(Axis),
    /// anGPT: every row (input dimension) inside the unit ball.
    BallRows,
    /// anGPT's switch: the whole matrix inside the unit Frobenius ball.
    BallFrobenius,
}

fn wrap(e: NormError) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

fn project_vec<T: Element>(w: &mut [T], shape: MatShape, c: Constraint) -> std::result::Result<ProjectReport, NormError> {
    match c {
        Constraint::Unit(axis) => project_unit(w, shape, axis),
        Constraint::BallRows => project_ball(w, shape, Bound::PerLine(Axis::Rows), 1.0),
        Constraint::BallFrobenius => project_ball(w, shape, Bound::Frobenius, 1.0),
    }
}

/// The in-place op: the storage of a contiguous 2-D parameter, projected.
struct ProjectOp {
    shape: MatShape,
    constraint: Constraint,
}

fn slice_of<'a, T>(v: &'a mut [T], layout: &candle_core::Layout) -> Result<&'a mut [T]> {
    let (o1, o2) = layout.contiguous_offsets().ok_or_else(|| candle_core::Error::msg("projection: the parameter must be contiguous"))?;
    v.get_mut(o1..o2).ok_or_else(|| candle_core::Error::msg("projection: layout outside the storage"))
}

impl InplaceOp1 for ProjectOp {
    fn name(&self) -> &'static str {
        "normlab-project"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &candle_core::Layout) -> Result<()> {
        let (shape, c) = (self.shape, self.constraint);
        match storage {
            CpuStorage::F64(v) => project_vec(slice_of(v, layout)?, shape, c),
            CpuStorage::F32(v) => project_vec(slice_of(v, layout)?, shape, c),
            CpuStorage::F16(v) => project_vec(slice_of(v, layout)?, shape, c),
            CpuStorage::BF16(v) => project_vec(slice_of(v, layout)?, shape, c),
            other => candle_core::bail!("projection: parameters stored as {:?} are not supported (f64, f32, f16, bf16 are)", other.dtype()),
        }
        .map(|_| ())
        .map_err(wrap)
    }
}

/// Project the 2-D parameter `var` (`(out, in)` layout) in place.
pub(crate) fn project(var: &Var, c: Constraint) -> Result<()> {
    let (out, inp) = var.dims2()?;
    match var.dtype() {
        DType::F64 | DType::F32 | DType::F16 | DType::BF16 => {}
        dt => candle_core::bail!("projection: parameters stored as {dt:?} are not supported (f64, f32, f16, bf16 are)"),
    }
    var.as_tensor().inplace_op1(&ProjectOp { shape: MatShape::new(out, inp), constraint: c })
}

/// Project every `(var, constraint)` in place: the post-step projection of nGPT and anGPT.
///
/// CPU `Var`s: [`project`] one after the other (the CPU path, unchanged). With the
/// `candle-cuda` feature, `Var`s on a CUDA device are projected first, by one fused launch per
/// (device, storage dtype) on candle's stream (f32, f16, bf16; f64 on CUDA is a typed error,
/// `GpuError::UnsupportedProjectionDType`, raised before any launch).
pub(crate) fn project_all(items: &[(Var, Constraint)]) -> Result<()> {
    #[cfg(feature = "candle-cuda")]
    let items = on_cuda::project_cuda(items)?;
    for (var, c) in items {
        project(var, *c)?;
    }
    Ok(())
}

impl Constraint {
    /// The kernel's description of this constraint (radius 1, as the CPU path's).
    #[cfg(feature = "cuda")]
    #[cfg_attr(not(feature = "candle-cuda"), allow(dead_code))]
    pub(crate) fn projection(self) -> normlab_kernels::project::Projection {
        use normlab_kernels::project::Projection;
        match self {
            Constraint::Unit(axis) => Projection::Unit(axis),
            Constraint::BallRows => Projection::Ball { bound: Bound::PerLine(Axis::Rows), radius: 1.0 },
            Constraint::BallFrobenius => Projection::Ball { bound: Bound::Frobenius, radius: 1.0 },
        }
    }
}

/// The CUDA branch of [`project_all`] (feature `candle-cuda`).
#[cfg(feature = "candle-cuda")]
mod on_cuda {
    use candle_core::backend::BackendDevice;
    use candle_core::cuda_backend::cudarc::driver::{CudaStream, DevicePtr, DeviceRepr, SyncOnDrop};
    use candle_core::cuda_backend::CudaDType;
    use candle_core::{CudaDevice, CudaStorage, DType, Device, Result, Storage, Var};
    use normlab_kernels::project::ProjStorage;

    use super::Constraint;
    use crate::gpu::args::DevPtr;
    use crate::gpu::error::GpuError;
    use crate::gpu::project::{DevMatrix, ProjectKernels};

    fn err(e: GpuError) -> candle_core::Error {
        candle_core::Error::wrap(e)
    }

    fn storage_of(dtype: DType) -> Result<ProjStorage> {
        match dtype {
            DType::F32 => Ok(ProjStorage::F32),
            DType::F16 => Ok(ProjStorage::F16),
            DType::BF16 => Ok(ProjStorage::BF16),
            other => Err(err(GpuError::UnsupportedProjectionDType { dtype: format!("{other:?}") })),
        }
    }

    /// Projects the items held on CUDA devices (one launch per device and dtype); returns the
    /// others, for the CPU path.
    pub(super) fn project_cuda(items: &[(Var, Constraint)]) -> Result<Vec<&(Var, Constraint)>> {
        let mut rest = Vec::new();
        let mut groups: Vec<(CudaDevice, DType, Vec<&(Var, Constraint)>)> = Vec::new();
        for item in items {
            let Device::Cuda(dev) = item.0.device() else {
                rest.push(item);
                continue;
            };
            let dt = item.0.dtype();
            match groups.iter_mut().find(|g| g.0.same_device(dev) && g.1 == dt) {
                Some(g) => g.2.push(item),
                None => groups.push((dev.clone(), dt, vec![item])),
            }
        }
        // Every dtype is checked before anything is launched: no half-projected model.
        for g in &groups {
            storage_of(g.1)?;
        }
        for (dev, dt, members) in &groups {
            launch(dev, *dt, members)?;
        }
        Ok(rest)
    }

    /// The device address of the elements `start..end` of a `T` buffer, and its guard.
    fn address<'a, T: CudaDType + DeviceRepr + 'static>(s: &'a CudaStorage, stream: &'a CudaStream, start: usize, end: usize) -> Result<(DevPtr, SyncOnDrop<'a>)> {
        let slice = s.as_cuda_slice::<T>()?;
        if end > slice.len() {
            return Err(err(GpuError::Length { what: "projected parameter", expected: end, got: slice.len() }));
        }
        let (base, guard) = slice.device_ptr(stream);
        Ok((base + (start * std::mem::size_of::<T>()) as u64, guard))
    }

    /// ONE launch over `members` (all on `dev`, all of `dtype`), in place.
    fn launch(dev: &CudaDevice, dtype: DType, members: &[&(Var, Constraint)]) -> Result<()> {
        let storage = storage_of(dtype)?;
        let stream = dev.cuda_stream();
        let kernels = ProjectKernels::for_context(stream.context()).map_err(err)?;
        // A read lock on every Var's storage for the whole launch keeps each buffer (and so the
        // address in the descriptor table) in place. The device memory itself is ordered by
        // candle's stream, not by the lock: candle's CUDA ops read and write device memory
        // asynchronously, after releasing their locks, so a kernel enqueued on that stream
        // writes after every earlier op (the optimizer's update) and before every later one (the
        // next forward), as an in-place candle op would. The guards of `device_ptr` (cudarc's
        // event records for other streams) are kept until the launch is enqueued.
        let locks: Vec<_> = members.iter().map(|(v, _)| v.as_tensor().storage_and_layout()).collect();
        let mut guards = Vec::with_capacity(members.len());
        let mut mats = Vec::with_capacity(members.len());
        for ((lock, layout), (var, c)) in locks.iter().zip(members) {
            let (rows, cols) = var.dims2()?;
            let Storage::Cuda(s) = &**lock else {
                candle_core::bail!("projection: a parameter of a CUDA device has no CUDA storage")
            };
            let (start, end) = layout
                .contiguous_offsets()
                .ok_or_else(|| err(GpuError::NotContiguous { what: "projected parameter", shape: layout.dims().to_vec(), stride: layout.stride().to_vec() }))?;
            let (w, guard) = match dtype {
                DType::F32 => address::<f32>(s, &stream, start, end)?,
                DType::F16 => address::<half::f16>(s, &stream, start, end)?,
                _ => address::<half::bf16>(s, &stream, start, end)?,
            };
            guards.push(guard);
            mats.push(DevMatrix { w, rows, cols, projection: c.projection() });
        }
        // SAFETY: each address is the first element of a live, contiguous (rows x cols) buffer
        // of `dtype` on this device, held in place by `locks` until the launch is enqueued and
        // ordered by candle's stream after it; the wrapper refuses overlapping matrices.
        unsafe { kernels.enqueue(&stream, storage, &mats) }.map_err(err)?;
        drop(guards);
        drop(locks);
        Ok(())
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    //! The CUDA branch's description of each constraint does what the CPU path does: the fused
    //! kernel (on the CPU emulator) against `project` on the same data.
    use super::*;
    use half::bf16;
    use normlab_kernels::cpu::{project as emulate, EmuOptions};
    use normlab_kernels::project::ProjMatrix;

    #[test]
    fn each_constraint_is_the_kernels_projection_of_the_cpu_path() {
        for c in [Constraint::Unit(Axis::Rows), Constraint::Unit(Axis::Cols), Constraint::BallRows, Constraint::BallFrobenius] {
            let shape = MatShape::new(13, 40);
            let mut s = 0x9e37_79b9_7f4a_7c15u64;
            let w: Vec<bf16> = (0..shape.out * shape.inp)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    bf16::from_f64(((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.6)
                })
                .collect();
            let mut cpu = w.clone();
            let cpu_report = project_vec(&mut cpu, shape, c).unwrap();
            let mut gpu = w.clone();
            let reports = emulate(&mut [ProjMatrix { w: &mut gpu, shape, projection: c.projection() }], &EmuOptions::default()).unwrap();
            assert_eq!(reports, vec![cpu_report], "{c:?}");
            assert!(cpu_report.projected > 0, "{c:?}: the data must need projecting");
            for (g, p) in gpu.iter().zip(&cpu) {
                assert!((g.to_f64() - p.to_f64()).abs() <= bf16::DTYPE.ulp(p.to_f64()), "{c:?}: {g} vs {p}");
            }
        }
    }
}
