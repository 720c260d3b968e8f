//! The post-step weight constraints, in place on the `Var`s the optimizer owns.
//!
//! Each matrix is projected by `normlab_norms::weight` (norms accumulated in f64, one rounding
//! back into storage; exact guarantees documented there) directly in the `Var`'s storage, in
//! its storage dtype, through a candle in-place op: every holder of the `Var` (the model's
//! layers, the optimizer) sees the result, and nothing is copied or allocated. This is the
//! equivalent of NVIDIA/ngpt's `.data.copy_` (outside autograd, moments untouched).

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
