//! The post-step weight constraints, in place on the `Var`s the optimizer owns.
//!
//! Each matrix is read out of its `Var` in its storage dtype, projected by
//! `normlab_norms::weight` (norms accumulated in f64, one rounding back into storage; exact
//! guarantees documented there) and written back with `Var::set`, which copies into the same
//! storage, so every holder of the `Var` (the model's layers, the optimizer) sees the result.
//! This is the equivalent of NVIDIA/ngpt's `.data.copy_` (outside autograd, moments untouched).

use candle_core::{DType, Result, Tensor, Var};
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

fn project_typed<T: Element + candle_core::WithDType>(var: &Var, shape: MatShape, c: Constraint) -> Result<ProjectReport> {
    let mut w = var.as_tensor().flatten_all()?.to_vec1::<T>()?;
    let report = project_vec(&mut w, shape, c).map_err(wrap)?;
    if report.projected > 0 {
        var.set(&Tensor::from_vec(w, var.shape(), var.device())?)?;
    }
    Ok(report)
}

/// Project the 2-D parameter `var` (`(out, in)` layout) in place.
pub(crate) fn project(var: &Var, c: Constraint) -> Result<ProjectReport> {
    let (out, inp) = var.dims2()?;
    let shape = MatShape::new(out, inp);
    match var.dtype() {
        DType::F64 => project_typed::<f64>(var, shape, c),
        DType::F32 => project_typed::<f32>(var, shape, c),
        DType::F16 => project_typed::<half::f16>(var, shape, c),
        DType::BF16 => project_typed::<half::bf16>(var, shape, c),
        dt => candle_core::bail!("projection: parameters stored as {dt:?} are not supported (f64, f32, f16, bf16 are)"),
    }
}
