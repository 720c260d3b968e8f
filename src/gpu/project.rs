//! Launch wrapper of the fused weight projection (normlab-kernels' `project.cu`: nGPT's unit
//! lines, anGPT's ball per line or Frobenius ball) on a CUDA stream, built as the other
//! families' wrappers ([`crate::gpu::rows`], [`crate::gpu::updates`], [`crate::gpu::batch`]) on
//! the shared [`crate::gpu::module::FamilyModule`] and [`crate::gpu::module::PerContext`].
//!
//! One call covers a list of device matrices of one storage type (f32, f16 or bf16), each given
//! by its device address, `(rows, cols)` (row-major, `(out, in)`) and a [`Projection`]:
//! 1. [`plan_matrices`] plans with `normlab_kernels::project::plan_project` (typed errors: empty
//!    dimensions, a radius that is not finite and > 0, more than `2^31 - 1` blocks) and checks
//!    the addresses (not null, aligned to the element, no two matrices overlapping: two blocks
//!    would race on the shared elements), then fills the descriptor table with them;
//! 2. [`ProjectKernels::prepare`] uploads the table (48 bytes per matrix);
//! 3. [`ProjectKernels::launch`] launches ONE `nl_project_<dtype>` over every matrix (grid = the
//!    plan's block count, 256 threads, no dynamic shared memory), optionally with the per-block
//!    outcome counts;
//! 4. [`ProjectKernels::project`] does all of this, reads the counts back (a synchronisation of
//!    the stream) and returns one `ProjectReport` per matrix (`normlab_kernels::project::reports`,
//!    the same counts as the CPU path `normlab_norms::weight::project`);
//!    [`ProjectKernels::enqueue`] launches without counts and returns without waiting (the
//!    model's post-step path, which discards the reports).
//!
//! The projection is in place: the kernel writes the matrices at the given addresses, so the
//! caller passes the parameter's own storage (the `Var`'s buffer, not a copy). Uploading the
//! table from pageable host memory synchronises the stream first (cudarc's `clone_htod` from a
//! `Vec`); the table is a few KiB for a whole model, the wait is the price of no pinned buffer.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use normlab_kernels::project::{plan_project, reports, ProjDesc, ProjParams, ProjStorage, ProjectPlan, Projection};
use normlab_kernels::sources;
use normlab_norms::weight::{MatShape, ProjectReport};

use crate::gpu::args::{DevPtr, ParamArg};
use crate::gpu::error::{GpuError, PlanError, Result};
use crate::gpu::module::{family_kernels, Source};
use crate::gpu::rows::launch;

/// The projection source as the runtime compiles it.
pub const PROJECT: Source = Source {
    module: "project",
    file_name: sources::PROJECT_CU_NAME,
    text: sources::PROJECT_CU,
    options: sources::NVRTC_OPTIONS,
    needs_headers: true,
};

/// A descriptor as it travels to the device: `ProjDesc` (a device address, integers and a
/// float; 48 bytes, checked against the CUDA struct by tests/gpu_runtime.rs), wrapped so that
/// cudarc may copy it.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct DevDesc(pub ProjDesc);

// SAFETY: `#[repr(C)]` plain data (a device address, integers, a float) laid out as the
// kernel's `nlp::ProjDesc` / `nlp::ProjParams` (checked against NVRTC by tests/gpu_runtime.rs).
unsafe impl DeviceRepr for DevDesc {}
unsafe impl DeviceRepr for ParamArg<ProjParams> {}

/// One matrix to project in place: its device address, `(rows, cols)` = `(out, in)`
/// row-major, and what to do to it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevMatrix {
    pub w: DevPtr,
    pub rows: usize,
    pub cols: usize,
    pub projection: Projection,
}

/// Bytes per element of a storage type.
pub fn elem_bytes(storage: ProjStorage) -> usize {
    match storage {
        ProjStorage::F32 => 4,
        ProjStorage::F16 | ProjStorage::BF16 => 2,
    }
}

/// Plan one launch over `mats` and fill the descriptor table with their addresses. Errors
/// (typed, nothing launched): those of `plan_project`, a null or misaligned address, a matrix
/// past the end of the address space, two matrices sharing elements.
pub fn plan_matrices(storage: ProjStorage, mats: &[DevMatrix]) -> Result<ProjectPlan> {
    let specs: Vec<(MatShape, Projection, usize)> =
        mats.iter().map(|m| (MatShape::new(m.rows, m.cols), m.projection, m.rows.saturating_mul(m.cols))).collect();
    let mut plan = plan_project(storage, &specs)?;
    let es = elem_bytes(storage) as u64;
    let bad = |msg: String| GpuError::Plan(PlanError(msg));
    let mut spans = Vec::with_capacity(mats.len());
    for (k, m) in mats.iter().enumerate() {
        if m.w == 0 {
            return Err(bad(format!("projection matrix {k} ({}x{}): null device address", m.rows, m.cols)));
        }
        if m.w % es != 0 {
            return Err(bad(format!("projection matrix {k}: device address {:#x} is not aligned to its {es}-byte {} elements", m.w, storage.name())));
        }
        // plan_project bounded rows * cols by i64::MAX elements.
        let end = ((m.rows * m.cols) as u64).checked_mul(es).and_then(|b| m.w.checked_add(b));
        let end = end.ok_or_else(|| bad(format!("projection matrix {k}: {}x{} elements at {:#x} pass the end of the address space", m.rows, m.cols, m.w)))?;
        spans.push((m.w, end, k));
    }
    spans.sort_unstable();
    for p in spans.windows(2) {
        let ((a0, a1, i), (b0, _, j)) = (p[0], p[1]);
        if b0 < a1 {
            return Err(bad(format!(
                "projection matrices {} and {} overlap ({:#x}..{a1:#x} and {b0:#x}..): two blocks would write the same elements",
                i.min(j),
                i.max(j),
                a0
            )));
        }
    }
    for (d, m) in plan.descs.iter_mut().zip(mats) {
        d.w = m.w as usize as *mut c_void;
    }
    Ok(plan)
}

/// The kernel parameters of a launch: the device table, its length and the optional counts.
pub fn params(plan: &ProjectPlan, table: DevPtr, counts: Option<DevPtr>) -> ProjParams {
    ProjParams {
        desc: table as usize as *const ProjDesc,
        count: plan.descs.len() as i32,
        counts: counts.map_or(std::ptr::null_mut(), |c| c as usize as *mut i32),
    }
}

/// A planned launch whose descriptor table is on the device (absent for no matrix). Dropping
/// it frees the table in stream order (or after a synchronisation), after the launches that
/// read it.
pub struct ProjectLaunch {
    pub plan: ProjectPlan,
    table: Option<CudaSlice<DevDesc>>,
}

impl std::fmt::Debug for ProjectLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectLaunch").field("plan", &self.plan).finish()
    }
}

/// What [`ProjectKernels::project`] returns: the plan and one report per matrix, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectOutcome {
    pub plan: ProjectPlan,
    pub reports: Vec<ProjectReport>,
}

// No reserve: the kernels take no dynamic shared memory (2176 B static) and their plan needs no
// device view (one block per tile, not a persistent grid).
family_kernels!(
    /// The projection kernels loaded in one context.
    ProjectKernels,
    PROJECT,
    reserve: 0
);

impl ProjectKernels {
    /// Plan over `mats` ([`plan_matrices`]) and upload the descriptor table on `stream`.
    pub fn prepare(&self, stream: &Arc<CudaStream>, storage: ProjStorage, mats: &[DevMatrix]) -> Result<ProjectLaunch> {
        let plan = plan_matrices(storage, mats)?;
        let table = if plan.grid == 0 {
            None
        } else {
            let descs: Vec<DevDesc> = plan.descs.iter().copied().map(DevDesc).collect();
            Some(stream.clone_htod(&descs).map_err(GpuError::driver("cuMemcpyHtoD(projection table)"))?)
        };
        Ok(ProjectLaunch { plan, table })
    }

    /// Enqueue the one launch of `l` on `stream`; `counts` (optional) receives 4 ints per block
    /// (projected, unchanged, zero, non-finite lines). Nothing is launched for no matrix.
    ///
    /// # Safety
    /// The addresses of `l`'s matrices must be device buffers of this context holding their
    /// `rows * cols` elements, not used by other work during the launch, and `counts` must hold
    /// `4 * l.plan.grid` ints, until the launch completes.
    pub unsafe fn launch(&self, stream: &Arc<CudaStream>, l: &ProjectLaunch, counts: Option<DevPtr>) -> Result<()> {
        let Some(table) = &l.table else { return Ok(()) };
        let f = self.m.function(&l.plan.kernel, 0)?;
        let (ta, _gt) = table.device_ptr(stream);
        let arg = ParamArg(params(&l.plan, ta, counts));
        launch(stream, &f, &l.plan.kernel, l.plan.grid, l.plan.block, 0, &arg)
    }

    /// Project every matrix of `mats` in ONE launch on `stream`, in place, and return one
    /// report per matrix. Reads the outcome counts back: returns after the launch completed.
    ///
    /// # Safety
    /// As [`ProjectKernels::launch`].
    pub unsafe fn project(&self, stream: &Arc<CudaStream>, storage: ProjStorage, mats: &[DevMatrix]) -> Result<ProjectOutcome> {
        let l = self.prepare(stream, storage, mats)?;
        if l.plan.grid == 0 {
            return Ok(ProjectOutcome { plan: l.plan, reports: Vec::new() });
        }
        let mut counts = stream.alloc_zeros::<i32>(4 * l.plan.grid as usize).map_err(GpuError::driver("cuMemAlloc(projection counts)"))?;
        {
            let (ca, _gc) = counts.device_ptr_mut(stream);
            self.launch(stream, &l, Some(ca))?;
        }
        // Waits for the launch (the copy is ordered after it on the stream).
        let c = stream.clone_dtoh(&counts).map_err(GpuError::driver("cuMemcpyDtoH(projection counts)"))?;
        let reports = reports(&l.plan, &c);
        let ProjectLaunch { plan, table } = l;
        drop(table);
        Ok(ProjectOutcome { plan, reports })
    }

    /// Project every matrix of `mats` in ONE launch on `stream`, in place, without outcome
    /// counts and without waiting for the launch (the table is freed in stream order).
    ///
    /// # Safety
    /// As [`ProjectKernels::launch`].
    pub unsafe fn enqueue(&self, stream: &Arc<CudaStream>, storage: ProjStorage, mats: &[DevMatrix]) -> Result<ProjectPlan> {
        let l = self.prepare(stream, storage, mats)?;
        self.launch(stream, &l, None)?;
        let ProjectLaunch { plan, table } = l;
        drop(table);
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use normlab_kernels::project::{THREADS, ROW_TILE, COL_TILE};
    use normlab_kernels::KernelError;
    use normlab_norms::weight::{Axis, Bound};
    use normlab_norms::NormError;

    const UNIT_ROWS: Projection = Projection::Unit(Axis::Rows);
    const BALL_COLS: Projection = Projection::Ball { bound: Bound::PerLine(Axis::Cols), radius: 1.0 };
    const FROB: Projection = Projection::Ball { bound: Bound::Frobenius, radius: 1.0 };

    fn msg(e: GpuError) -> String {
        e.to_string()
    }

    #[test]
    fn the_table_carries_the_addresses_and_the_plan() {
        let mats = [
            DevMatrix { w: 0x7000_0000, rows: 17, cols: 5, projection: UNIT_ROWS },
            DevMatrix { w: 0x7000_1000, rows: 3, cols: 65, projection: BALL_COLS },
            DevMatrix { w: 0x7000_2000, rows: 9, cols: 9, projection: FROB },
        ];
        let p = plan_matrices(ProjStorage::BF16, &mats).unwrap();
        assert_eq!((p.kernel.as_str(), p.grid, p.block), ("nl_project_bf16", 17usize.div_ceil(ROW_TILE) as u32 + 65usize.div_ceil(COL_TILE) as u32 + 1, THREADS));
        assert_eq!(p.descs.iter().map(|d| d.w as usize as u64).collect::<Vec<_>>(), vec![0x7000_0000, 0x7000_1000, 0x7000_2000]);
        assert_eq!(p.descs.iter().map(|d| (d.rows, d.cols, d.axis, d.kind)).collect::<Vec<_>>(), vec![(17, 5, 0, 0), (3, 65, 1, 1), (9, 9, 0, 2)]);
        let q = params(&p, 0xabc0, Some(0xdef0));
        assert_eq!((q.desc as usize, q.count, q.counts as usize), (0xabc0, 3, 0xdef0));
        assert!(params(&p, 0xabc0, None).counts.is_null());
        // No matrix: an empty plan, nothing to launch.
        assert_eq!(plan_matrices(ProjStorage::F32, &[]).unwrap().grid, 0);
    }

    #[test]
    fn addresses_are_checked_with_typed_errors() {
        let m = |w, rows, cols| DevMatrix { w, rows, cols, projection: UNIT_ROWS };
        let e = msg(plan_matrices(ProjStorage::F16, &[m(0, 4, 4)]).unwrap_err());
        assert!(e.contains("null device address"), "{e}");
        let e = msg(plan_matrices(ProjStorage::F32, &[m(0x1002, 4, 4)]).unwrap_err());
        assert!(e.contains("0x1002") && e.contains("4-byte f32"), "{e}");
        assert!(plan_matrices(ProjStorage::F16, &[m(0x1002, 4, 4)]).is_ok(), "2-byte elements need 2-byte alignment only");
        // f16 4x4 = 32 bytes: [0x1000, 0x1020). Adjacent is fine, one element of overlap is not.
        assert!(plan_matrices(ProjStorage::F16, &[m(0x1020, 4, 4), m(0x1000, 4, 4)]).is_ok());
        let e = msg(plan_matrices(ProjStorage::F16, &[m(0x2000, 2, 2), m(0x101e, 4, 4), m(0x1000, 4, 4)]).unwrap_err());
        assert!(e.contains("matrices 1 and 2 overlap"), "{e}");
        // The same matrix twice (the same Var listed twice).
        let e = msg(plan_matrices(ProjStorage::BF16, &[m(0x4000, 3, 3), m(0x4000, 3, 3)]).unwrap_err());
        assert!(e.contains("overlap"), "{e}");
        let e = msg(plan_matrices(ProjStorage::F32, &[m(u64::MAX - 15, 4, 4)]).unwrap_err());
        assert!(e.contains("end of the address space"), "{e}");
        // The planner's own errors pass through, typed, before any address is looked at.
        let e = plan_matrices(ProjStorage::F32, &[m(0, 0, 4)]).unwrap_err();
        assert_eq!(e.to_string(), GpuError::from(KernelError::Norm(NormError::Empty { what: "matrix output dimension", value: 0 })).to_string());
        let bad = DevMatrix { w: 0x1000, rows: 2, cols: 2, projection: Projection::Ball { bound: Bound::Frobenius, radius: f64::NAN } };
        assert!(msg(plan_matrices(ProjStorage::F32, &[bad]).unwrap_err()).contains("NaN"));
    }

    #[test]
    fn device_structs_are_the_kernels() {
        use std::mem::{align_of, size_of};
        assert_eq!((size_of::<DevDesc>(), align_of::<DevDesc>()), (48, 8));
        assert_eq!(size_of::<ParamArg<ProjParams>>(), 24);
        assert_eq!((elem_bytes(ProjStorage::F32), elem_bytes(ProjStorage::F16), elem_bytes(ProjStorage::BF16)), (4, 2, 2));
        assert_eq!(PROJECT.text, sources::PROJECT_CU);
    }
}
