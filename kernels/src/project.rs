//! Host side of the fused weight projection (`src/cuda/project.cu`): one launch covers every
//! matrix of a model. The host builds a descriptor table (pointer, rows, cols, axis, kind,
//! radius, first block), validates it with typed errors, and after the launch turns the
//! per-block outcome counts into one [`ProjectReport`] per matrix, as the CPU path
//! (`normlab_norms::weight::project`) returns.
//!
//! Blocks per matrix (256 threads each): `ceil(rows / 8)` for row lines (a warp per row),
//! `ceil(cols / 32)` for column lines (32 columns per block, coalesced), 1 for the Frobenius
//! bound. `block_start` is the prefix sum of these counts; block `b` of the grid serves the last
//! matrix with `block_start <= b` (binary search on the device).

use std::ffi::c_void;

use half::{bf16, f16};
use normlab_norms::weight::{Axis, Bound, MatShape, ProjectReport};
use normlab_norms::NormError;

use crate::error::{KernelError, Result};

/// Threads per block of every projection kernel (`nlp::THREADS`).
pub const THREADS: u32 = 256;
/// Rows per block on the row axis (one warp each, `nlp::ROW_TILE`).
pub const ROW_TILE: usize = 8;
/// Columns per block on the column axis (`nlp::COL_TILE`).
pub const COL_TILE: usize = 32;

/// Storage types the projection kernels are instantiated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProjStorage {
    F32,
    F16,
    BF16,
}

impl ProjStorage {
    pub const ALL: [ProjStorage; 3] = [ProjStorage::F32, ProjStorage::F16, ProjStorage::BF16];
    pub fn name(self) -> &'static str {
        match self {
            ProjStorage::F32 => "f32",
            ProjStorage::F16 => "f16",
            ProjStorage::BF16 => "bf16",
        }
    }
    /// The kernel entry point for this storage type.
    pub fn kernel(self) -> String {
        format!("nl_project_{}", self.name())
    }
}

/// Parameter element types with a projection kernel.
pub trait ProjElem: normlab_norms::Element {
    const STORAGE: ProjStorage;
}
impl ProjElem for f32 {
    const STORAGE: ProjStorage = ProjStorage::F32;
}
impl ProjElem for f16 {
    const STORAGE: ProjStorage = ProjStorage::F16;
}
impl ProjElem for bf16 {
    const STORAGE: ProjStorage = ProjStorage::BF16;
}

/// What to do to one matrix: the same choices as the CPU path's `project_unit(axis)` and
/// `project_ball(bound, radius)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Projection {
    /// nGPT: every line along the axis to unit L2 norm.
    Unit(Axis),
    /// anGPT: every line (or the whole matrix) into the ball of `radius` (1 in the paper).
    Ball { bound: Bound, radius: f64 },
}

/// One matrix of the fused launch (the same layout as `nlp::ProjDesc`, 48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProjDesc {
    pub w: *mut c_void,
    pub rows: i64,
    pub cols: i64,
    pub block_start: i64,
    pub radius: f64,
    /// 0 rows, 1 columns.
    pub axis: i32,
    /// 0 unit, 1 ball per line, 2 Frobenius ball.
    pub kind: i32,
}

/// Kernel parameters (`nlp::ProjParams`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProjParams {
    pub desc: *const ProjDesc,
    pub count: i32,
    /// Optional: `[grid][4]` outcome counts (projected, unchanged, zero, non-finite).
    pub counts: *mut i32,
}

/// A validated fused launch. `descs` carry null pointers until the caller fills `w`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectPlan {
    pub kernel: String,
    pub grid: u32,
    pub block: u32,
    pub descs: Vec<ProjDesc>,
    /// Blocks of each matrix (`descs[m].block_start .. + blocks[m]`).
    pub blocks: Vec<u64>,
}

fn blocks_of(shape: MatShape, p: Projection) -> usize {
    match p {
        Projection::Unit(Axis::Rows) | Projection::Ball { bound: Bound::PerLine(Axis::Rows), .. } => shape.out.div_ceil(ROW_TILE),
        Projection::Unit(Axis::Cols) | Projection::Ball { bound: Bound::PerLine(Axis::Cols), .. } => shape.inp.div_ceil(COL_TILE),
        Projection::Ball { bound: Bound::Frobenius, .. } => 1,
    }
}

/// Plans one launch over `mats` (shape, projection, element count of the buffer). Errors name
/// the offending matrix's value: empty dimensions or a buffer of the wrong length (from
/// [`MatShape::check`]), a radius that is not finite and > 0, more than `2^31 - 1` blocks.
pub fn plan_project(storage: ProjStorage, mats: &[(MatShape, Projection, usize)]) -> Result<ProjectPlan> {
    if mats.len() > i32::MAX as usize {
        return Err(KernelError::TooLarge { what: "matrices in one projection launch", value: mats.len(), bits: 31 });
    }
    let mut descs = Vec::with_capacity(mats.len());
    let mut blocks = Vec::with_capacity(mats.len());
    let mut start: usize = 0;
    for &(shape, p, len) in mats {
        shape.check("weight matrix", len)?;
        if shape.out.checked_mul(shape.inp).is_none_or(|n| n > i64::MAX as usize) {
            return Err(KernelError::TooLarge { what: "matrix elements", value: shape.out.saturating_mul(shape.inp), bits: 63 });
        }
        let (axis, kind, radius) = match p {
            Projection::Unit(a) => (a, 0, 1.0),
            Projection::Ball { bound, radius } => {
                if !(radius.is_finite() && radius > 0.0) {
                    return Err(NormError::OutOfRange { what: "norm bound radius", range: "finite values > 0", value: radius }.into());
                }
                match bound {
                    Bound::PerLine(a) => (a, 1, radius),
                    Bound::Frobenius => (Axis::Rows, 2, radius),
                }
            }
        };
        let nb = blocks_of(shape, p);
        descs.push(ProjDesc {
            w: std::ptr::null_mut(),
            rows: shape.out as i64,
            cols: shape.inp as i64,
            block_start: start as i64,
            radius,
            axis: match axis {
                Axis::Rows => 0,
                Axis::Cols => 1,
            },
            kind,
        });
        blocks.push(nb as u64);
        start = start.saturating_add(nb);
        if start > i32::MAX as usize {
            return Err(KernelError::TooLarge { what: "projection blocks (grid)", value: start, bits: 31 });
        }
    }
    Ok(ProjectPlan { kernel: storage.kernel(), grid: start as u32, block: THREADS, descs, blocks })
}

/// One [`ProjectReport`] per matrix from the kernel's per-block outcome counts (`[grid][4]`).
pub fn reports(plan: &ProjectPlan, counts: &[i32]) -> Vec<ProjectReport> {
    plan.descs
        .iter()
        .zip(&plan.blocks)
        .map(|(d, &nb)| {
            let mut r = ProjectReport::default();
            for b in d.block_start as usize..d.block_start as usize + nb as usize {
                let c = &counts[4 * b..4 * b + 4];
                r.projected += c[0] as usize;
                r.unchanged += c[1] as usize;
                r.zero += c[2] as usize;
                r.nonfinite += c[3] as usize;
            }
            r.lines = r.projected + r.unchanged + r.zero + r.nonfinite;
            r
        })
        .collect()
}

/// A matrix to project in place: the parameter itself (not a copy), its shape and what to do.
#[derive(Debug)]
pub struct ProjMatrix<'a, T> {
    pub w: &'a mut [T],
    pub shape: MatShape,
    pub projection: Projection,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_layout_matches_the_kernel() {
        assert_eq!(std::mem::size_of::<ProjDesc>(), 48);
        assert_eq!(std::mem::size_of::<ProjParams>(), 24);
    }

    #[test]
    fn block_prefix_sums() {
        let m = |o, i| MatShape::new(o, i);
        let p = plan_project(
            ProjStorage::F16,
            &[
                (m(17, 5), Projection::Unit(Axis::Rows), 85),
                (m(3, 65), Projection::Unit(Axis::Cols), 195),
                (m(9, 9), Projection::Ball { bound: Bound::Frobenius, radius: 1.0 }, 81),
                (m(8, 1), Projection::Ball { bound: Bound::PerLine(Axis::Rows), radius: 2.0 }, 8),
            ],
        )
        .unwrap();
        assert_eq!(p.blocks, vec![3, 3, 1, 1]);
        assert_eq!(p.descs.iter().map(|d| d.block_start).collect::<Vec<_>>(), vec![0, 3, 6, 7]);
        assert_eq!(p.grid, 8);
        assert_eq!(p.kernel, "nl_project_f16");
        assert_eq!((p.descs[2].kind, p.descs[3].kind, p.descs[1].axis), (2, 1, 1));
    }

    #[test]
    fn typed_errors_name_the_value() {
        let e = plan_project(ProjStorage::F32, &[(MatShape::new(4, 4), Projection::Ball { bound: Bound::Frobenius, radius: -2.0 }, 16)]).unwrap_err();
        assert!(e.to_string().contains("-2"), "{e}");
        let e = plan_project(ProjStorage::F32, &[(MatShape::new(4, 4), Projection::Unit(Axis::Rows), 15)]).unwrap_err();
        assert!(e.to_string().contains("15") && e.to_string().contains("16"), "{e}");
        let e = plan_project(ProjStorage::F32, &[(MatShape::new(0, 4), Projection::Unit(Axis::Rows), 0)]).unwrap_err();
        assert!(matches!(e, KernelError::Norm(NormError::Empty { .. })), "{e}");
        let big = (1usize << 31) * ROW_TILE;
        let e = plan_project(ProjStorage::F32, &[(MatShape::new(big, 1), Projection::Unit(Axis::Rows), big)]).unwrap_err();
        assert!(matches!(e, KernelError::TooLarge { bits: 31, .. }), "{e}");
    }
}
