//! `normlab gpu-check`, weight projections: nGPT's unit lines and anGPT's ball per line or
//! Frobenius ball (normlab-kernels' `project.cu`, through [`crate::gpu::project`]) run on the
//! GPU, every matrix of a case in ONE launch, against `normlab_norms::weight` on the CPU, with
//! the acceptance criterion of the CPU emulation tests (kernels/tests/emulated_project.rs):
//!
//! - every element of a projected line within 1 ulp of the storage type of the f64 reference
//!   (`x / ||x||`, `radius x / max(radius, ||x||)`; ball lines get an extra `4u |ref|`, u the unit
//!   roundoff: a line whose rounded values left the ball is shrunk by `1 - 2u`, then `4u`...), and
//!   within 1 ulp of the CPU path on the same storage type;
//! - the same per-matrix report (projected / unchanged / zero / non-finite lines) as the CPU path;
//! - norms measured in f64 over the stored values: unit lines within `unit_tolerance` of 1, ball
//!   lines `||w||^2 <= radius^2` exactly; lines inside the ball, zero lines and lines with a NaN
//!   or Inf unchanged (bit-identical);
//! - a second launch changes no bit and projects no line (idempotent).
//!
//! Cases (f32, f16, bf16 each): unit rows, unit columns, ball rows, ball columns, Frobenius (a
//! matrix inside and one outside the ball), all kinds mixed in one launch (radius 1 and 0.75),
//! and zero / NaN / Inf lines; rows and widths not multiples of the 8-row and 32-column tiles.
//! [`matrix_errors`] needs no GPU: the unit tests feed it the CPU emulator's outputs and
//! corrupted copies of them.

use cudarc::driver::{CudaSlice, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};
use normlab_kernels::project::{ProjElem, ProjStorage, Projection};
use normlab_norms::weight::{project_ball, project_unit, unit_tolerance, Axis, Bound, MatShape, ProjectReport};
use normlab_norms::Element;

use crate::gpu::check::{Rng, Session};
use crate::gpu::error::{GpuError, Result};
use crate::gpu::project::{DevMatrix, ProjectKernels};

/// Bound beyond the allowance, in ulps of the storage type.
pub const BOUND_ULP: f64 = 1.0;

/// Shapes `(rows, cols)` of the per-line cases: one element, a row, a column, tails of the
/// 8-row and 32-column tiles (7, 9, 37, 300, 1000 rows; 5, 33, 37, 70, 1000, 4099 columns), and
/// model-sized matrices (1024 x 1024, 4096 x 1024: many blocks).
pub const SHAPES: [(usize, usize); 10] = [(1, 1), (1, 37), (37, 1), (7, 5), (9, 33), (40, 70), (300, 1000), (1024, 1024), (1000, 4099), (4096, 1024)];
/// `--quick`.
pub const QUICK_SHAPES: [(usize, usize); 5] = [(1, 37), (37, 1), (7, 5), (9, 33), (300, 1000)];
/// Shapes of the Frobenius cases (one block streams each matrix).
pub const FROBENIUS_SHAPES: [(usize, usize); 4] = [(1, 1), (9, 33), (40, 70), (1024, 1000)];
pub const QUICK_FROBENIUS_SHAPES: [(usize, usize); 2] = [(9, 33), (40, 70)];
/// Shapes of the mixed and zero / non-finite cases.
pub const MIXED_SHAPES: [(usize, usize); 4] = [(7, 5), (12, 36), (33, 65), (100, 257)];

/// One case: ONE launch over `mats`, all of one storage type.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjCase {
    pub name: &'static str,
    pub storage: ProjStorage,
    pub mats: Vec<(MatShape, Projection)>,
    /// Plant a zero line, a line with a NaN and one with an Inf in every per-line matrix with
    /// enough lines; Frobenius-bounded matrices get a NaN (even index) or are all zero (odd).
    pub special_lines: bool,
}

const UNIT_ROWS: Projection = Projection::Unit(Axis::Rows);
const UNIT_COLS: Projection = Projection::Unit(Axis::Cols);
const BALL_ROWS: Projection = Projection::Ball { bound: Bound::PerLine(Axis::Rows), radius: 1.0 };
const BALL_COLS: Projection = Projection::Ball { bound: Bound::PerLine(Axis::Cols), radius: 1.0 };
const FROBENIUS: Projection = Projection::Ball { bound: Bound::Frobenius, radius: 1.0 };

/// Every kind, as used by the mixed and the zero / non-finite cases (ball rows also at radius 0.75).
pub fn projections() -> Vec<Projection> {
    vec![UNIT_ROWS, UNIT_COLS, BALL_ROWS, BALL_COLS, FROBENIUS, Projection::Ball { bound: Bound::PerLine(Axis::Rows), radius: 0.75 }]
}

/// The cases of a run.
pub fn cases(quick: bool) -> Vec<ProjCase> {
    let shapes: &[(usize, usize)] = if quick { &QUICK_SHAPES } else { &SHAPES };
    let frob: &[(usize, usize)] = if quick { &QUICK_FROBENIUS_SHAPES } else { &FROBENIUS_SHAPES };
    let mixed: &[(usize, usize)] = if quick { &MIXED_SHAPES[..2] } else { &MIXED_SHAPES };
    let of = |p: Projection, shapes: &[(usize, usize)]| -> Vec<(MatShape, Projection)> { shapes.iter().map(|&(o, i)| (MatShape::new(o, i), p)).collect() };
    let mut v = Vec::new();
    for storage in ProjStorage::ALL {
        let case = |name, mats, special_lines| ProjCase { name, storage, mats, special_lines };
        v.push(case("unit rows", of(UNIT_ROWS, shapes), false));
        v.push(case("unit cols", of(UNIT_COLS, shapes), false));
        v.push(case("ball rows", of(BALL_ROWS, shapes), false));
        v.push(case("ball cols", of(BALL_COLS, shapes), false));
        // Twice each shape: a matrix inside the ball, one outside (see case_data).
        v.push(case("frobenius", frob.iter().flat_map(|&(o, i)| [(MatShape::new(o, i), FROBENIUS); 2]).collect(), false));
        let all: Vec<(MatShape, Projection)> = mixed.iter().flat_map(|&(o, i)| projections().into_iter().map(move |p| (MatShape::new(o, i), p))).collect();
        v.push(case("mixed", all.clone(), false));
        v.push(case("zero/nan/inf lines", all, true));
    }
    v
}

/// The line axis a projection acts along (rows for the Frobenius bound's data).
fn axis_of(p: Projection) -> Option<Axis> {
    match p {
        Projection::Unit(a) | Projection::Ball { bound: Bound::PerLine(a), .. } => Some(a),
        Projection::Ball { bound: Bound::Frobenius, .. } => None,
    }
}

/// Element indices of line `l` along `axis`, into `out`.
fn line_into(shape: MatShape, axis: Axis, l: usize, out: &mut Vec<usize>) {
    out.clear();
    match axis {
        Axis::Rows => out.extend((0..shape.inp).map(|j| l * shape.inp + j)),
        Axis::Cols => out.extend((0..shape.out).map(|i| i * shape.inp + l)),
    }
}

/// Calls `f` with the indices of every line a projection acts on (the whole matrix for the
/// Frobenius bound), one at a time.
fn for_each_line(shape: MatShape, p: Projection, mut f: impl FnMut(&[usize])) {
    let mut idx = Vec::new();
    match axis_of(p) {
        Some(a) => {
            for l in 0..shape.lines(a).0 {
                line_into(shape, a, l, &mut idx);
                f(&idx);
            }
        }
        None => {
            idx.extend(0..shape.out * shape.inp);
            f(&idx);
        }
    }
}

/// Deterministic data of a case, one buffer per matrix. Per-line matrices: each line N(0, 1)
/// times one of 0.05, 0.5, 1, 3, 40 over sqrt(line length), so that some lines lie inside the
/// unit ball and some outside; Frobenius matrices: the whole matrix at 0.5 (even index: inside)
/// or 3 (odd: outside) over sqrt(elements).
pub fn case_data<T: Element>(case: &ProjCase, seed: u64) -> Vec<Vec<T>> {
    let mut rng = Rng(seed | 1);
    let scales = [0.05, 0.5, 1.0, 3.0, 40.0];
    let mut idx = Vec::new();
    case.mats
        .iter()
        .enumerate()
        .map(|(k, &(shape, p))| {
            let n = shape.out * shape.inp;
            let mut w = vec![T::from_f64(0.0); n];
            match axis_of(p) {
                Some(a) => {
                    let (nlines, len) = shape.lines(a);
                    for l in 0..nlines {
                        let s = scales[((rng.uniform() * 5.0) as usize).min(4)] / (len as f64).sqrt();
                        line_into(shape, a, l, &mut idx);
                        for &i in &idx {
                            w[i] = T::from_f64(s * rng.normal());
                        }
                    }
                    if case.special_lines && nlines >= 5 {
                        line_into(shape, a, 1, &mut idx);
                        idx.iter().for_each(|&i| w[i] = T::from_f64(0.0));
                        line_into(shape, a, 3, &mut idx);
                        w[idx[2.min(len - 1)]] = T::from_f64(f64::NAN);
                        line_into(shape, a, nlines - 1, &mut idx);
                        w[idx[0]] = T::from_f64(f64::INFINITY);
                    }
                }
                None => {
                    let s = (if k % 2 == 0 { 0.5 } else { 3.0 }) / (n as f64).sqrt();
                    w.iter_mut().for_each(|x| *x = T::from_f64(s * rng.normal()));
                    if case.special_lines {
                        if k % 2 == 0 {
                            w[n / 2] = T::from_f64(f64::NAN);
                        } else {
                            w.iter_mut().for_each(|x| *x = T::from_f64(0.0));
                        }
                    }
                }
            }
            w
        })
        .collect()
}

/// The CPU path (`normlab_norms::weight`) on storage type `S` (f64: the reference).
fn cpu_project<S: Element>(w: &mut [S], shape: MatShape, p: Projection) -> Result<ProjectReport> {
    Ok(match p {
        Projection::Unit(a) => project_unit(w, shape, a)?,
        Projection::Ball { bound, radius } => project_ball(w, shape, bound, radius)?,
    })
}

/// The errors of one projected matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatrixErrors {
    /// Largest error of a projected line's element against the f64 reference, in ulps of the
    /// storage type, beyond the ball allowance `4u |ref|`.
    pub ulp: f64,
    /// Largest distance from the CPU path on the same storage type, in ulps.
    pub cpu_ulp: f64,
    /// Lines breaking a guarantee: a unit norm outside `unit_tolerance`, a ball line with
    /// `||w||^2 > radius^2`, a changed line that was inside the ball, zero or non-finite (and a
    /// buffer of the wrong length).
    pub violations: usize,
    /// The kernel's report equals the CPU path's.
    pub report_matches: bool,
}

impl MatrixErrors {
    pub fn pass(&self) -> bool {
        self.ulp <= BOUND_ULP && self.cpu_ulp <= BOUND_ULP && self.violations == 0 && self.report_matches
    }
}

/// NaN (a NaN output) counts as an infinite error.
fn finite_or_inf(e: f64) -> f64 {
    if e.is_nan() {
        f64::INFINITY
    } else {
        e
    }
}

fn same_bits<T: Element>(a: T, b: T) -> bool {
    a.to_f64().to_bits() == b.to_f64().to_bits()
}

/// Errors of the projected matrix `after` (the kernel's output from `before`, with its
/// `report`) against the f64 reference and the CPU path on `T` (the acceptance criterion of
/// kernels/tests/emulated_project.rs).
pub fn matrix_errors<T: ProjElem>(before: &[T], after: &[T], shape: MatShape, p: Projection, report: &ProjectReport) -> Result<MatrixErrors> {
    let mut want: Vec<f64> = before.iter().map(|x| x.to_f64()).collect();
    cpu_project(&mut want, shape, p)?;
    let mut cpu_t = before.to_vec();
    let cpu_report = cpu_project(&mut cpu_t, shape, p)?;
    let mut e = MatrixErrors { ulp: 0.0, cpu_ulp: 0.0, violations: 0, report_matches: *report == cpu_report };
    if after.len() != before.len() {
        e.violations += 1;
        return Ok(e);
    }
    let dt = T::DTYPE;
    let u = 2f64.powi(-(dt.mantissa_digits() as i32));
    let ball = matches!(p, Projection::Ball { .. });
    for_each_line(shape, p, |line| {
        let ss_before: f64 = line.iter().map(|&i| before[i].to_f64().powi(2)).sum();
        if !ss_before.is_finite() || ss_before == 0.0 {
            if line.iter().any(|&i| !same_bits(after[i], before[i])) {
                e.violations += 1;
            }
            return;
        }
        for &i in line {
            let (got, w) = (after[i].to_f64(), want[i]);
            let slack = if ball { 4.0 * u * w.abs() } else { 0.0 };
            e.ulp = e.ulp.max(finite_or_inf(((got - w).abs() - slack).max(0.0) / dt.ulp(w)));
            let c = cpu_t[i].to_f64();
            e.cpu_ulp = e.cpu_ulp.max(finite_or_inf((got - c).abs() / dt.ulp(c)));
        }
        let ss: f64 = line.iter().map(|&i| after[i].to_f64().powi(2)).sum();
        let ok = match p {
            Projection::Unit(_) => (ss.sqrt() - 1.0).abs() <= unit_tolerance::<T>(),
            Projection::Ball { radius, .. } => ss <= radius * radius && (ss_before > radius * radius || line.iter().all(|&i| same_bits(after[i], before[i]))),
        };
        if !ok {
            e.violations += 1;
        }
    });
    Ok(e)
}

/// One checked case (two launches: the projection, then the idempotence check).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ProjectCaseCheck {
    pub case: String,
    pub dtype: String,
    pub matrices: usize,
    pub elements: usize,
    pub kernel: String,
    pub grid: u32,
    pub block: u32,
    /// Summed over the matrices, from the kernel's counts.
    pub lines: usize,
    pub projected: usize,
    pub unchanged: usize,
    pub zero: usize,
    pub nonfinite: usize,
    /// Worst [`MatrixErrors::ulp`] / [`MatrixErrors::cpu_ulp`] over the matrices.
    pub max_ulp: f64,
    pub max_cpu_ulp: f64,
    pub violations: usize,
    /// Every matrix's report equals the CPU path's.
    pub reports_match: bool,
    /// A second launch changed no bit and projected no line.
    pub idempotent: bool,
    pub pass: bool,
}

/// Storage types as their bit patterns (how buffers travel to the device: cudarc has no half types here).
pub(crate) trait ProjBits: ProjElem + Copy {
    type Bits: DeviceRepr + ValidAsZeroBits + Copy + PartialEq + Unpin + std::fmt::Debug;
    fn bits(self) -> Self::Bits;
    fn from_bits(b: Self::Bits) -> Self;
}
impl ProjBits for f32 {
    type Bits = u32;
    fn bits(self) -> u32 {
        self.to_bits()
    }
    fn from_bits(b: u32) -> Self {
        f32::from_bits(b)
    }
}
impl ProjBits for f16 {
    type Bits = u16;
    fn bits(self) -> u16 {
        self.to_bits()
    }
    fn from_bits(b: u16) -> Self {
        f16::from_bits(b)
    }
}
impl ProjBits for bf16 {
    type Bits = u16;
    fn bits(self) -> u16 {
        self.to_bits()
    }
    fn from_bits(b: u16) -> Self {
        bf16::from_bits(b)
    }
}

/// Project every buffer in one launch through the wrapper; the outcome and the buffers' bits after.
fn project_on_device<T: ProjBits>(s: &Session, k: &ProjectKernels, case: &ProjCase, bufs: &mut [CudaSlice<T::Bits>]) -> Result<(crate::gpu::project::ProjectOutcome, Vec<Vec<T::Bits>>)> {
    let st = &s.stream;
    let outcome = {
        let ptrs: Vec<_> = bufs.iter_mut().map(|b| b.device_ptr_mut(st)).collect();
        let mats: Vec<DevMatrix> =
            ptrs.iter().zip(&case.mats).map(|((w, _), &(shape, projection))| DevMatrix { w: *w, rows: shape.out, cols: shape.inp, projection }).collect();
        // SAFETY: every buffer holds its matrix's rows * cols elements and lives until the
        // counts are read back (project returns after the launch completed).
        unsafe { k.project(st, T::STORAGE, &mats)? }
    };
    let after = bufs.iter().map(|b| st.clone_dtoh(b).map_err(GpuError::driver("cuMemcpyDtoH"))).collect::<Result<Vec<_>>>()?;
    Ok((outcome, after))
}

/// Run one case on the GPU and compare with the CPU.
fn check_case<T: ProjBits>(s: &Session, k: &ProjectKernels, case: &ProjCase, seed: u64) -> Result<ProjectCaseCheck> {
    let before: Vec<Vec<T>> = case_data(case, seed);
    let mut bufs = before
        .iter()
        .map(|m| s.stream.clone_htod(&m.iter().map(|x| x.bits()).collect::<Vec<_>>()).map_err(GpuError::driver("cuMemcpyHtoD")))
        .collect::<Result<Vec<_>>>()?;
    let (o1, after_bits) = project_on_device::<T>(s, k, case, &mut bufs)?;
    let (o2, again_bits) = project_on_device::<T>(s, k, case, &mut bufs)?;
    let idempotent = again_bits == after_bits && o2.reports.iter().all(|r| r.projected == 0);
    let mut c = ProjectCaseCheck {
        case: case.name.to_string(),
        dtype: T::STORAGE.name().to_string(),
        matrices: case.mats.len(),
        elements: before.iter().map(Vec::len).sum(),
        kernel: o1.plan.kernel.clone(),
        grid: o1.plan.grid,
        block: o1.plan.block,
        lines: 0,
        projected: 0,
        unchanged: 0,
        zero: 0,
        nonfinite: 0,
        max_ulp: 0.0,
        max_cpu_ulp: 0.0,
        violations: 0,
        reports_match: o1.reports.len() == case.mats.len(),
        idempotent,
        pass: false,
    };
    for (m, ((b, a), r)) in before.iter().zip(&after_bits).zip(&o1.reports).enumerate() {
        let after: Vec<T> = a.iter().map(|&x| T::from_bits(x)).collect();
        let (shape, p) = case.mats[m];
        let e = matrix_errors(b, &after, shape, p, r)?;
        c.max_ulp = c.max_ulp.max(e.ulp);
        c.max_cpu_ulp = c.max_cpu_ulp.max(e.cpu_ulp);
        c.violations += e.violations;
        c.reports_match &= e.report_matches;
        c.lines += r.lines;
        c.projected += r.projected;
        c.unchanged += r.unchanged;
        c.zero += r.zero;
        c.nonfinite += r.nonfinite;
    }
    c.pass = c.max_ulp <= BOUND_ULP && c.max_cpu_ulp <= BOUND_ULP && c.violations == 0 && c.reports_match && c.idempotent;
    Ok(c)
}

/// Run every projection case on the session's device; `progress` is called before each case.
pub fn run_cases(s: &Session, quick: bool, progress: &mut dyn FnMut(usize, usize, &str)) -> Result<Vec<ProjectCaseCheck>> {
    let k = ProjectKernels::for_context(&s.ctx)?;
    let all = cases(quick);
    let mut out = Vec::with_capacity(all.len());
    for (i, case) in all.iter().enumerate() {
        progress(i, all.len(), &format!("projection {} {} ({} matrices)", case.name, case.storage.name(), case.mats.len()));
        let seed = 0x7072_6f6a_6563_7400 ^ (i as u64).wrapping_mul(0x9e37_79b9);
        out.push(match case.storage {
            ProjStorage::F32 => check_case::<f32>(s, &k, case, seed)?,
            ProjStorage::F16 => check_case::<f16>(s, &k, case, seed)?,
            ProjStorage::BF16 => check_case::<bf16>(s, &k, case, seed)?,
        });
    }
    Ok(out)
}

/// The table of the projection cases.
pub fn render(cases: &[ProjectCaseCheck]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "\nweight projections: every matrix of a case in one launch, vs normlab_norms::weight (1 ulp of the f64 reference, ball + 4u|ref|; 1 ulp of the CPU path; same reports; norms; idempotent)\n");
    let _ = writeln!(
        s,
        "{:<18} {:<5} {:>4} {:>9} {:<16} {:>6} {:>20} {:>7} {:>7} {:>5} {:>5} {:>5}  ok",
        "case", "dtype", "mats", "elements", "kernel", "grid", "lines proj/unch/0/nf", "ulp", "cpu ulp", "viol", "rep", "idem"
    );
    for c in cases {
        let _ = writeln!(
            s,
            "{:<18} {:<5} {:>4} {:>9} {:<16} {:>6} {:>20} {:>7.3} {:>7.3} {:>5} {:>5} {:>5}  {}",
            c.case,
            c.dtype,
            c.matrices,
            c.elements,
            c.kernel,
            c.grid,
            format!("{}/{}/{}/{}", c.projected, c.unchanged, c.zero, c.nonfinite),
            c.max_ulp,
            c.max_cpu_ulp,
            c.violations,
            if c.reports_match { "same" } else { "DIFF" },
            if c.idempotent { "yes" } else { "NO" },
            if c.pass { "ok" } else { "FAIL" }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    //! The case list, and the acceptance criterion on the CPU emulator's outputs of the same
    //! kernel (no GPU needed): the emulator passes, corrupted outputs fail.
    use super::*;
    use normlab_kernels::cpu::{self as emu, EmuOptions};
    use normlab_kernels::project::{ProjMatrix, COL_TILE, ROW_TILE};

    #[test]
    fn case_list_covers_every_dtype_kind_tail_and_special_line() {
        for quick in [true, false] {
            let all = cases(quick);
            assert_eq!(all.len(), 3 * 7);
            for storage in ProjStorage::ALL {
                let mine: Vec<&ProjCase> = all.iter().filter(|c| c.storage == storage).collect();
                for p in [UNIT_ROWS, UNIT_COLS, BALL_ROWS, BALL_COLS, FROBENIUS] {
                    assert!(mine.iter().any(|c| c.mats.iter().all(|m| m.1 == p)), "{storage:?} {p:?}: a case of its own");
                }
                // Several matrices in one launch, every kind among them.
                let mixed = mine.iter().find(|c| c.name == "mixed").unwrap();
                assert!(projections().iter().all(|p| mixed.mats.iter().any(|m| m.1 == *p)));
                assert!(mine.iter().all(|c| c.mats.len() >= 2));
                // Zero / NaN / Inf lines, in matrices that have lines to plant them in.
                let special = mine.iter().find(|c| c.special_lines).unwrap();
                assert!(special.mats.iter().any(|(s, p)| axis_of(*p).is_some_and(|a| s.lines(a).0 >= 5)));
                // Tails of the 8-row and 32-column tiles on both axes.
                for p in [UNIT_ROWS, UNIT_COLS] {
                    let c = mine.iter().find(|c| c.mats.iter().all(|m| m.1 == p)).unwrap();
                    assert!(c.mats.iter().any(|(s, _)| s.out % ROW_TILE != 0 && s.out > ROW_TILE), "{p:?}: rows not a multiple of 8");
                    assert!(c.mats.iter().any(|(s, _)| s.inp % COL_TILE != 0 && s.inp > COL_TILE), "{p:?}: widths not a multiple of 32");
                    assert!(c.mats.iter().any(|(s, _)| s.inp % 8 != 0), "{p:?}: widths not a multiple of 8");
                }
            }
        }
        assert!(cases(true).iter().map(|c| c.mats.len()).sum::<usize>() < cases(false).iter().map(|c| c.mats.len()).sum::<usize>());
        // The Frobenius case has a matrix inside and one outside the ball.
        let c = cases(true).into_iter().find(|c| c.name == "frobenius").unwrap();
        let data = case_data::<f32>(&c, 3);
        let ss = |w: &Vec<f32>| w.iter().map(|x| (*x as f64).powi(2)).sum::<f64>();
        assert!(ss(&data[0]) < 1.0 && ss(&data[1]) > 1.0);
    }

    /// The emulator's output of a case (small matrices only: the emulator is slow).
    fn emulate<T: ProjElem>(case: &ProjCase) -> (Vec<Vec<T>>, Vec<Vec<T>>, Vec<ProjectReport>) {
        let before: Vec<Vec<T>> = case_data(case, 5);
        let mut after = before.clone();
        let reports = {
            let mut pm: Vec<ProjMatrix<T>> = after.iter_mut().zip(&case.mats).map(|(w, m)| ProjMatrix { w, shape: m.0, projection: m.1 }).collect();
            emu::project(&mut pm, &EmuOptions::default()).unwrap()
        };
        (before, after, reports)
    }

    fn small(mut c: ProjCase) -> ProjCase {
        c.mats.retain(|(s, _)| s.out * s.inp <= 4096);
        c
    }

    fn check_emulated<T: ProjElem>() {
        let u = 2f64.powi(-(T::DTYPE.mantissa_digits() as i32));
        let (mut corrupted, mut special) = (0, 0);
        for case in cases(true).into_iter().filter(|c| c.storage == T::STORAGE).map(small) {
            let (before, after, reports) = emulate::<T>(&case);
            for (m, &(shape, p)) in case.mats.iter().enumerate() {
                let what = format!("{} {:?} matrix {m} {}x{} {p:?}", case.name, T::DTYPE, shape.out, shape.inp);
                let e = matrix_errors(&before[m], &after[m], shape, p, &reports[m]).unwrap();
                assert!(e.pass(), "{what}: the emulated kernel fails the check: {e:?}");
                let r = &reports[m];
                if r.projected == 0 {
                    continue;
                }
                // A projected line of this matrix, and its largest element.
                let mut line = Vec::new();
                for_each_line(shape, p, |l| {
                    let ss: f64 = l.iter().map(|&i| before[m][i].to_f64().powi(2)).sum();
                    let projected = ss.is_finite() && ss > 0.0 && l.iter().any(|&i| !same_bits(after[m][i], before[m][i]));
                    if line.is_empty() && projected {
                        line = l.to_vec();
                    }
                });
                assert!(!line.is_empty(), "{what}: no projected line");
                let big = *line.iter().max_by(|&&i, &&j| after[m][i].to_f64().abs().total_cmp(&after[m][j].to_f64().abs())).unwrap();
                let fails = |bad: &[T], rep: &ProjectReport, how: &str| {
                    let e = matrix_errors(&before[m], bad, shape, p, rep).unwrap();
                    assert!(!e.pass(), "{what}: {how} passes the check: {e:?}");
                };
                // Three ulps off at one element.
                let mut bad = after[m].clone();
                let v = bad[big].to_f64();
                bad[big] = T::from_f64(v + 3.0 * T::DTYPE.ulp(v));
                fails(&bad, r, "an element 3 ulps off");
                // A NaN written into a projected line.
                let mut bad = after[m].clone();
                bad[big] = T::from_f64(f64::NAN);
                fails(&bad, r, "a NaN output");
                // The whole line scaled up by 8u: each element a few ulps off, a ball line outside.
                let mut bad = after[m].clone();
                line.iter().for_each(|&i| bad[i] = T::from_f64(bad[i].to_f64() * (1.0 + 8.0 * u)));
                fails(&bad, r, "a line scaled by 1 + 8u");
                // Not projected at all.
                fails(&before[m], r, "the unprojected input");
                // A miscounted report.
                let wrong = ProjectReport { projected: r.projected - 1, unchanged: r.unchanged + 1, ..*r };
                fails(&after[m], &wrong, "a miscounted report");
                // A buffer of the wrong length.
                fails(&after[m][..after[m].len() - 1], r, "a short buffer");
                corrupted += 1;
            }
            if case.special_lines {
                // A zero line (or a non-finite one) that changed fails.
                for (m, &(shape, p)) in case.mats.iter().enumerate() {
                    let Some(a) = axis_of(p) else { continue };
                    if shape.lines(a).0 < 5 {
                        continue;
                    }
                    let mut idx = Vec::new();
                    line_into(shape, a, 1, &mut idx);
                    let mut bad = after[m].clone();
                    bad[idx[0]] = T::from_f64(0.5);
                    assert!(!matrix_errors(&before[m], &bad, shape, p, &reports[m]).unwrap().pass(), "{p:?}: a changed zero line passes");
                    special += 1;
                }
            }
        }
        // Every kind of every case family was corrupted (7 cases; the mixed ones: 2 shapes x 6 kinds).
        assert!(corrupted >= 30 && special >= 8, "{corrupted} matrices corrupted, {special} zero lines changed");
    }

    #[test]
    fn the_check_passes_the_emulated_kernel_and_catches_corruption_f32() {
        check_emulated::<f32>();
    }

    #[test]
    fn the_check_passes_the_emulated_kernel_and_catches_corruption_f16() {
        check_emulated::<f16>();
    }

    #[test]
    fn the_check_passes_the_emulated_kernel_and_catches_corruption_bf16() {
        check_emulated::<bf16>();
    }
}
