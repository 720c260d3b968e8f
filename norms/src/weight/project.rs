//! In-place projections of weight matrices, applied after every optimizer step (and at init).
//!
//! - nGPT (algorithms.md 1.4): every line along the chosen axis to unit L2 norm,
//!   `w_i <- w_i / ||w_i||` (the authors cast to fp32, divide without eps, copy back in place).
//! - anGPT (algorithms.md 2.6): every line into the unit ball, `w_i <- w_i / max(1, ||w_i||)`
//!   along the input dimension, or the whole matrix into the Frobenius ball (switch).
//!
//! Math: each element is widened exactly, the norm is accumulated in f64, the scaled value is
//! formed in f64 and rounded once into storage (round to nearest). What "exact" means after that
//! rounding, with `u` the unit roundoff of the storage type (`2^-24` f32, `2^-11` f16, `2^-8` bf16),
//! norms measured in f64 over the stored values:
//!
//! - ball: every projected line ends with norm `<= radius` **exactly**: if rounding to nearest
//!   pushed it above, the scale is shrunk by `1 - 2u` and the line re-rounded until it is not.
//!   Lines already inside are not touched (bit-identical), so the projection is idempotent.
//! - unit: every projected line ends with `|norm - 1| <= u + 1e-12` ([`unit_tolerance`]): each
//!   element's relative rounding error is below `u`, and the f64 norm and scale add far less than
//!   1e-12 for lines up to ~10^4 elements; elements that round to subnormals add at most
//!   `|x_i| * (half the smallest subnormal)` each (2e-12 for f16), which can exceed the slack only
//!   for lines made mostly of subnormal outputs. A line already within the tolerance is left as it
//!   is, which makes the projection idempotent (a second pass changes no bit).
//! - zero lines are left at zero (nGPT's division would give NaN), lines with a non-finite value
//!   are left unchanged; both are counted in the report, never a panic.

use crate::element::Element;
use crate::error::{NormError, Result};
use crate::weight::lines::{map_lines, sum_sq, Axis, MatShape};

/// What happened to one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineOutcome {
    Projected,
    Unchanged,
    Zero,
    NonFinite,
}

/// Counts of line outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProjectReport {
    pub lines: usize,
    pub projected: usize,
    pub unchanged: usize,
    pub zero: usize,
    pub nonfinite: usize,
}

impl ProjectReport {
    fn from(outcomes: &[LineOutcome]) -> Self {
        let mut r = ProjectReport { lines: outcomes.len(), ..Default::default() };
        for o in outcomes {
            match o {
                LineOutcome::Projected => r.projected += 1,
                LineOutcome::Unchanged => r.unchanged += 1,
                LineOutcome::Zero => r.zero += 1,
                LineOutcome::NonFinite => r.nonfinite += 1,
            }
        }
        r
    }
}

/// Where the ball bound applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Bound {
    /// Every line along the axis (anGPT: `Axis::Rows`, the input dimension).
    PerLine(Axis),
    /// The whole matrix: `||W||_F <= radius`.
    Frobenius,
}

fn unit_roundoff<T: Element>() -> f64 {
    2f64.powi(-(T::DTYPE.mantissa_digits() as i32))
}

/// The band `|norm - 1| <= u + 1e-12` that a unit projection guarantees and inside which it
/// leaves a line alone (`u` the unit roundoff of the storage type).
pub fn unit_tolerance<T: Element>() -> f64 {
    unit_roundoff::<T>() + 1e-12
}

fn unit_line<T: Element>(line: &mut [T]) -> LineOutcome {
    let ss = sum_sq(line);
    if !ss.is_finite() {
        return LineOutcome::NonFinite;
    }
    if ss == 0.0 {
        return LineOutcome::Zero;
    }
    let n = ss.sqrt();
    if (n - 1.0).abs() <= unit_tolerance::<T>() {
        return LineOutcome::Unchanged;
    }
    let s = 1.0 / n;
    for x in line.iter_mut() {
        *x = T::from_f64(x.to_f64() * s);
    }
    LineOutcome::Projected
}

fn ball_line<T: Element>(line: &mut [T], radius: f64) -> LineOutcome {
    let ss = sum_sq(line);
    if !ss.is_finite() {
        return LineOutcome::NonFinite;
    }
    let r2 = radius * radius;
    if ss <= r2 {
        return LineOutcome::Unchanged;
    }
    let src: Vec<f64> = line.iter().map(|x| x.to_f64()).collect();
    // Shrink by 1 - 2u, doubling the step each retry (one retry is the usual worst case).
    let mut step = 2.0 * unit_roundoff::<T>();
    let mut s = radius / ss.sqrt();
    loop {
        for (x, v) in line.iter_mut().zip(&src) {
            *x = T::from_f64(v * s);
        }
        if sum_sq(line) <= r2 {
            return LineOutcome::Projected;
        }
        s *= 1.0 - step;
        step = (2.0 * step).min(0.5);
    }
}

/// nGPT's projection: every line along `axis` of the `(out, in)` matrix `w` to unit L2 norm.
pub fn project_unit<T: Element>(w: &mut [T], shape: MatShape, axis: Axis) -> Result<ProjectReport> {
    shape.check("weight matrix", w.len())?;
    let outcomes = map_lines(w, shape, axis, unit_line::<T>);
    Ok(ProjectReport::from(&outcomes))
}

/// anGPT's projection `w_i <- radius * w_i / max(radius, ||w_i||)` per line, or of the whole
/// matrix for [`Bound::Frobenius`] (`radius = 1` is the paper's bound).
pub fn project_ball<T: Element>(w: &mut [T], shape: MatShape, bound: Bound, radius: f64) -> Result<ProjectReport> {
    shape.check("weight matrix", w.len())?;
    if !(radius.is_finite() && radius > 0.0) {
        return Err(NormError::OutOfRange { what: "norm bound radius", range: "finite values > 0", value: radius });
    }
    let outcomes = match bound {
        Bound::PerLine(axis) => map_lines(w, shape, axis, |l| ball_line::<T>(l, radius)),
        Bound::Frobenius => vec![ball_line::<T>(w, radius)],
    };
    Ok(ProjectReport::from(&outcomes))
}
