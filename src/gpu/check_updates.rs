//! `normlab gpu-check`, fused residual updates: nGPT's `Norm(h + a (Norm(b) - h))` and anGPT's
//! `nu(a) (h + a (b - h))` (normlab-kernels' `residual.cu`) run on the GPU, forward then
//! backward from the GPU forward's statistics, against the f64 reference
//! `normlab_norms::residual`, with the bounds of the CPU emulation tests
//! (kernels/tests/emulated_residual.rs, kernels/README.md):
//!
//! - y: 1 ulp beyond `2^-19 s_r (|(1 - a) h| + |a B|)` (nGPT) or `2^-20 (|c_h h| + |c_b b|)` (anGPT);
//! - dh, db: 1 ulp beyond the propagated fp32 error of `dr` (nGPT; see [`update_errors`]), plain
//!   1 ulp for anGPT;
//! - da (fp32): `|got - want| <= 2^-22 |want| + sum over rows of (slack of the term + 2^-17 |term|)`;
//!   reported as the largest `|got - want| / tolerance` (pass: <= 1).
//!
//! [`update_errors`] needs no GPU: the unit tests feed it the CPU emulator's outputs.

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use half::{bf16, f16};
use normlab_kernels::list::Storage;
use normlab_kernels::residual::Update;
use normlab_norms::residual::{angpt_backward, angpt_coefs, angpt_forward, ngpt_backward, ngpt_forward};
use normlab_norms::DType;

use crate::gpu::check::{to64, Half16, Rng, Session, BOUND_ULP};
use crate::gpu::error::{GpuError, Result};
use crate::gpu::ulp::{max_ulp_error, UlpError};
use crate::gpu::updates::{UpdBwdArgs, UpdFwdBuffers, UpdateKernels};

/// nGPT's eps (PyTorch F.normalize's default).
pub const UPDATE_EPS: f64 = 1e-12;

/// `[rows, d]` shapes: odd widths (scalar rows), warp rows, more rows than an H100 persistent
/// grid holds (20000 x 128, the [tokens x head_dim]-like narrow case), block rows up to 8192.
pub const UPDATE_SHAPES: [(usize, usize); 10] =
    [(1, 8), (3, 7), (37, 64), (20000, 128), (7, 100), (64, 1024), (2000, 1104), (33, 4096), (9, 4099), (4, 8192)];
/// `--quick`: one narrow, one warp and one block shape.
pub const UPDATE_QUICK_SHAPES: [(usize, usize); 3] = [(3, 7), (37, 128), (5, 2056)];

/// One checked update case (a forward and a backward launch).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct UpdateCaseCheck {
    pub update: String,
    pub dtype: String,
    pub rows: usize,
    pub d: usize,
    /// "vector" (one a per dimension) or "scalar".
    pub a: String,
    pub forward_kernel: String,
    pub backward_kernel: String,
    pub grid: u32,
    pub block: u32,
    pub smem: usize,
    pub forward_ulp: f64,
    pub dh_ulp: f64,
    pub db_ulp: f64,
    /// Largest `|da - reference| / tolerance` (<= 1 passes).
    pub da_bound_ratio: f64,
    pub pass: bool,
}

/// The errors of one case (from [`update_errors`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UpdateErrors {
    pub y: UlpError,
    pub dh: UlpError,
    pub db: UlpError,
    pub da_ratio: f64,
}

impl UpdateErrors {
    pub fn pass(&self) -> bool {
        self.y.max_ulp <= BOUND_ULP && self.dh.max_ulp <= BOUND_ULP && self.db.max_ulp <= BOUND_ULP && self.da_ratio <= 1.0
    }
}

fn coef(a: &[f64], j: usize) -> f64 {
    if a.len() == 1 {
        a[0]
    } else {
        a[j]
    }
}

/// Inputs of one case, widened to f64 (a: the fp32 values the kernel gets).
pub struct UpdateInputs<'a> {
    pub update: Update,
    pub dt: DType,
    pub d: usize,
    pub h: &'a [f64],
    pub b: &'a [f64],
    pub g: &'a [f64],
    pub a: &'a [f64],
}

/// Errors of kernel outputs (widened to f64; da as computed in fp32) against the f64 reference,
/// beyond the documented allowances.
pub fn update_errors(x: &UpdateInputs, y: &[f64], dh: &[f64], db: &[f64], da: &[f64]) -> Result<UpdateErrors> {
    let (d, h, b, g, a) = (x.d, x.h, x.b, x.g, x.a);
    let n = h.len();
    let rows = n / d;
    let (mut y_ref, mut dh_ref, mut db_ref, mut da_ref) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; a.len()]);
    let (mut s_y, mut s_dh, mut s_db, mut s_da) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; a.len()]);
    let ai = |j: usize| if a.len() == 1 { 0 } else { j };
    match x.update {
        Update::Ngpt => {
            ngpt_forward(h, b, a, d, UPDATE_EPS, &mut y_ref, None)?;
            ngpt_backward(h, b, a, d, UPDATE_EPS, g, &mut dh_ref, &mut db_ref, Some(&mut da_ref))?;
            for r in 0..rows {
                let rg = r * d..(r + 1) * d;
                let sb = 1.0 / b[rg.clone()].iter().map(|v| v * v).sum::<f64>().sqrt().max(UPDATE_EPS);
                let bn: Vec<f64> = rg.clone().map(|i| b[i] * sb).collect();
                let rr: Vec<f64> = (0..d).map(|j| h[r * d + j] + coef(a, j) * (bn[j] - h[r * d + j])).collect();
                let sr = 1.0 / rr.iter().map(|v| v * v).sum::<f64>().sqrt().max(UPDATE_EPS);
                let yy: Vec<f64> = rr.iter().map(|v| v * sr).collect();
                let gg = &g[rg.clone()];
                let sy: Vec<f64> = (0..d).map(|j| 2f64.powi(-19) * sr * (((1.0 - coef(a, j)) * h[r * d + j]).abs() + (coef(a, j) * bn[j]).abs())).collect();
                let gmax = gg.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                let dot1: f64 = (0..d).map(|j| yy[j] * gg[j]).sum();
                let sum_yg: f64 = (0..d).map(|j| (yy[j] * gg[j]).abs()).sum();
                let dr: Vec<f64> = (0..d).map(|j| sr * (gg[j] - yy[j] * dot1)).collect();
                let s_dr: Vec<f64> = (0..d).map(|j| 2f64.powi(-16) * sr * (gmax + sum_yg) + dot1.abs() * sy[j]).collect();
                let dot2: f64 = (0..d).map(|j| bn[j] * coef(a, j) * dr[j]).sum();
                let sum_bdb: f64 = (0..d).map(|j| (bn[j] * coef(a, j) * dr[j]).abs()).sum();
                let sum_bas: f64 = (0..d).map(|j| (bn[j] * coef(a, j)).abs() * s_dr[j]).sum();
                let dhmax = rg.clone().filter(|&i| dh_ref[i].is_finite()).fold(0.0f64, |m, i| m.max(dh_ref[i].abs()));
                let dbmax = rg.clone().filter(|&i| db_ref[i].is_finite()).fold(0.0f64, |m, i| m.max(db_ref[i].abs()));
                for j in 0..d {
                    let i = r * d + j;
                    let aj = coef(a, j);
                    s_y[i] = sy[j];
                    s_dh[i] = (1.0 - aj).abs() * s_dr[j] + 2f64.powi(-16) * dhmax;
                    s_db[i] = sb * (aj.abs() * s_dr[j] + bn[j].abs() * (sum_bas + 2f64.powi(-18) * sum_bdb) + 2f64.powi(-18) * dot2.abs() * bn[j].abs())
                        + 2f64.powi(-16) * dbmax;
                    let term = dr[j] * (bn[j] - h[i]);
                    s_da[ai(j)] += s_dr[j] * (bn[j] - h[i]).abs() + 2f64.powi(-18) * dr[j].abs() * (bn[j].abs() + h[i].abs()) + 2f64.powi(-17) * term.abs();
                }
            }
        }
        Update::Angpt => {
            angpt_forward(h, b, a, d, &mut y_ref)?;
            angpt_backward(h, b, a, d, g, &mut dh_ref, &mut db_ref, Some(&mut da_ref))?;
            for i in 0..n {
                let (ch, cb, nu) = angpt_coefs(coef(a, i % d));
                s_y[i] = 2f64.powi(-20) * ((ch * h[i]).abs() + (cb * b[i]).abs());
                let term = g[i] * nu * nu * (ch * b[i] - cb * h[i]);
                s_da[ai(i % d)] += 2f64.powi(-20) * (g[i] * nu * nu).abs() * ((ch * b[i]).abs() + (cb * h[i]).abs()) + 2f64.powi(-17) * term.abs();
            }
        }
    }
    let clean = |v: f64| if v.is_finite() { v } else { 0.0 };
    let ey = max_ulp_error(x.dt, y, &y_ref, &|i| clean(s_y[i]));
    let edh = max_ulp_error(x.dt, dh, &dh_ref, &|i| clean(s_dh[i]));
    let edb = max_ulp_error(x.dt, db, &db_ref, &|i| clean(s_db[i]));
    let mut ratio = 0.0f64;
    for j in 0..a.len() {
        let (got, want) = (da[j], da_ref[j]);
        let r = if got.is_nan() || want.is_nan() {
            if got.is_nan() && want.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            let tol = 2f64.powi(-22) * want.abs() + clean(s_da[j]);
            let e = (got - want).abs();
            if e == 0.0 {
                0.0
            } else {
                e / tol
            }
        };
        ratio = ratio.max(if r.is_nan() { f64::INFINITY } else { r });
    }
    if da.len() != a.len() {
        ratio = f64::INFINITY;
    }
    Ok(UpdateErrors { y: ey, dh: edh, db: edb, da_ratio: ratio })
}

/// The cases of a run: (update, storage, rows, d, scalar a).
pub fn update_cases(quick: bool) -> Vec<(Update, Storage, usize, usize, bool)> {
    let shapes: &[(usize, usize)] = if quick { &UPDATE_QUICK_SHAPES } else { &UPDATE_SHAPES };
    let mut v = Vec::new();
    for update in Update::ALL {
        for storage in Storage::ALL {
            for &(rows, d) in shapes {
                for scalar in [false, true] {
                    v.push((update, storage, rows, d, scalar));
                }
            }
        }
    }
    v
}

/// Deterministic inputs of a case: h with unit-scale rows, b of std 2, g of std 1, a in
/// [0.02, 0.6] per dimension or 0.3.
pub(crate) fn update_data<T: Half16>(seed: u64, rows: usize, d: usize, scalar: bool) -> (Vec<T>, Vec<T>, Vec<T>, Vec<f32>) {
    let mut rng = Rng(seed);
    let len = rows * d;
    let h: Vec<T> = rng.vec(len, 0.0, 1.0 / (d as f64).sqrt());
    let b: Vec<T> = rng.vec(len, 0.0, 2.0);
    let g: Vec<T> = rng.vec(len, 0.0, 1.0);
    let a: Vec<f32> = if scalar { vec![0.3] } else { (0..d).map(|_| (0.02 + 0.58 * rng.uniform()) as f32).collect() };
    (h, b, g, a)
}

/// Run one case on the GPU and compare with the reference.
pub(crate) fn check_update_case<T: Half16>(s: &Session, k: &UpdateKernels, update: Update, rows: usize, d: usize, scalar: bool, seed: u64) -> Result<UpdateCaseCheck> {
    let (h, b, g, a) = update_data::<T>(seed, rows, d, scalar);
    let len = rows * d;
    let st = &s.stream;
    let dh_ = s.upload(&h)?;
    let db_ = s.upload(&b)?;
    let dg_ = s.upload(&g)?;
    let da_in: CudaSlice<f32> = st.clone_htod(&a).map_err(GpuError::driver("cuMemcpyHtoD"))?;
    let mut dy = s.zeros(len)?;
    let mut dstats = st.alloc_zeros::<f32>((rows * 4).max(1)).map_err(GpuError::driver("cuMemAlloc"))?;
    let mut ddh = s.zeros(len)?;
    let mut ddb = s.zeros(len)?;
    let mut dda = st.alloc_zeros::<f32>(a.len()).map_err(GpuError::driver("cuMemAlloc"))?;
    let (ha, _g1) = dh_.device_ptr(st);
    let (ba, _g2) = db_.device_ptr(st);
    let (ga, _g3) = dg_.device_ptr(st);
    let (aa, _g4) = da_in.device_ptr(st);
    let (ya, _g5) = dy.device_ptr_mut(st);
    let (sa, _g6) = dstats.device_ptr_mut(st);
    let (dha, _g7) = ddh.device_ptr_mut(st);
    let (dba, _g8) = ddb.device_ptr_mut(st);
    let (daa, _g9) = dda.device_ptr_mut(st);
    let fb = UpdFwdBuffers { rows, h: ha, b: ba, a: aa, a_len: a.len(), y: ya, stats: Some(sa) };
    // SAFETY: every buffer was allocated above for this shape and lives until the copies back.
    let pf = unsafe { k.forward(st, update, T::STORAGE, d, UPDATE_EPS, &fb)? };
    let bb = UpdBwdArgs { rows, h: ha, b: ba, a: aa, a_len: a.len(), dy: ga, stats: Some(sa), dh: dha, db: dba, da: Some(daa) };
    let pb = unsafe { k.backward(st, update, T::STORAGE, d, &bb)? };
    drop((_g1, _g2, _g3, _g4, _g5, _g6, _g7, _g8, _g9));
    st.synchronize().map_err(GpuError::driver("cuStreamSynchronize"))?;
    let y_gpu = s.download::<T>(&dy)?;
    let dh_gpu = s.download::<T>(&ddh)?;
    let db_gpu = s.download::<T>(&ddb)?;
    let da_gpu: Vec<f64> = st.clone_dtoh(&dda).map_err(GpuError::driver("cuMemcpyDtoH"))?.into_iter().map(|v| v as f64).collect();
    let a64: Vec<f64> = a.iter().map(|&v| v as f64).collect();
    let (h64, b64, g64) = (to64(&h), to64(&b), to64(&g));
    let x = UpdateInputs { update, dt: T::DT, d, h: &h64, b: &b64, g: &g64, a: &a64 };
    let e = update_errors(&x, &y_gpu, &dh_gpu, &db_gpu, &da_gpu)?;
    Ok(UpdateCaseCheck {
        update: update.name().to_string(),
        dtype: T::STORAGE.name().to_string(),
        rows,
        d,
        a: if scalar { "scalar" } else { "vector" }.to_string(),
        forward_kernel: pf.kernel,
        backward_kernel: pb.kernel,
        grid: pf.grid,
        block: pf.block,
        smem: pf.smem,
        forward_ulp: e.y.max_ulp,
        dh_ulp: e.dh.max_ulp,
        db_ulp: e.db.max_ulp,
        da_bound_ratio: e.da_ratio,
        pass: e.pass(),
    })
}

/// Run case `c` of [`update_cases`] with its dtype.
pub fn run_update_case(s: &Session, k: &UpdateKernels, c: &(Update, Storage, usize, usize, bool), seed: u64) -> Result<UpdateCaseCheck> {
    let &(update, storage, rows, d, scalar) = c;
    match storage {
        Storage::F16 => check_update_case::<f16>(s, k, update, rows, d, scalar, seed),
        Storage::BF16 => check_update_case::<bf16>(s, k, update, rows, d, scalar, seed),
    }
}

/// The update table.
pub fn render_updates(cases: &[UpdateCaseCheck]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "\nfused residual updates (y: 1 ulp beyond the fp32 cancellation slack; dh/db: 1 ulp beyond the propagated dr error; da: |err| / tolerance)\n");
    let _ = writeln!(s, "{:<6} {:<5} {:>12} {:<6} {:<32} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8}  ok", "update", "dtype", "shape", "a", "forward kernel", "grid", "block", "y ulp", "dh ulp", "db ulp", "da/tol");
    for c in cases {
        let _ = writeln!(
            s,
            "{:<6} {:<5} {:>12} {:<6} {:<32} {:>6} {:>6} {:>8.3} {:>8.3} {:>8.3} {:>8.3}  {}",
            c.update,
            c.dtype,
            format!("{}x{}", c.rows, c.d),
            c.a,
            c.forward_kernel,
            c.grid,
            c.block,
            c.forward_ulp,
            c.dh_ulp,
            c.db_ulp,
            c.da_bound_ratio,
            if c.pass { "ok" } else { "FAIL" }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    //! The check's bounds on the CPU emulator's outputs of the same kernels (no GPU needed): the
    //! emulator passes, and a one-ulp-scale corruption of each output fails.
    use super::*;
    use normlab_kernels::cpu::update as emu;
    use normlab_kernels::cpu::EmuOptions;
    use normlab_kernels::residual::UpdateStats;

    /// h, b, g, a, y, dh, db, da (widened to f64).
    type Run = [Vec<f64>; 8];

    fn emulate<T: Half16 + normlab_kernels::cpu::Half16>(update: Update, rows: usize, d: usize, scalar: bool) -> Run {
        let (h, b, g, a) = update_data::<T>(11 + d as u64, rows, d, scalar);
        let o = EmuOptions::default();
        let mut y = vec![T::default(); rows * d];
        let mut st = vec![UpdateStats::default(); rows];
        emu::forward(update, &h, &b, &a, d, UPDATE_EPS, &mut y, Some(&mut st), &o).unwrap();
        let (mut dh, mut db, mut da) = (vec![T::default(); rows * d], vec![T::default(); rows * d], vec![0f32; a.len()]);
        emu::backward(update, &h, &b, &a, &g, d, &st, &mut dh, &mut db, Some(&mut da), &o).unwrap();
        [to64(&h), to64(&b), to64(&g), a.iter().map(|&v| v as f64).collect(), to64(&y), to64(&dh), to64(&db), da.iter().map(|&v| v as f64).collect()]
    }

    #[test]
    fn the_bounds_pass_the_emulated_kernels_and_catch_corruption() {
        for update in Update::ALL {
            for (rows, d, scalar) in [(5, 64, false), (3, 1100, true), (2, 37, false)] {
                let [h, b, g, a, y, dh, db, da] = emulate::<bf16>(update, rows, d, scalar);
                let x = UpdateInputs { update, dt: DType::BF16, d, h: &h, b: &b, g: &g, a: &a };
                let e = update_errors(&x, &y, &dh, &db, &da).unwrap();
                assert!(e.pass(), "{update:?} {rows}x{d}: {e:?}");
                // Three ulps off at the largest element of each output, 1% off in one da.
                let bump = |v: &[f64]| {
                    let i = (0..v.len()).max_by(|&p, &q| v[p].abs().total_cmp(&v[q].abs())).unwrap();
                    let mut w = v.to_vec();
                    w[i] += 3.0 * DType::BF16.ulp(w[i]);
                    w
                };
                assert!(!update_errors(&x, &bump(&y), &dh, &db, &da).unwrap().pass(), "{update:?}: corrupted y passes");
                assert!(!update_errors(&x, &y, &bump(&dh), &db, &da).unwrap().pass(), "{update:?}: corrupted dh passes");
                assert!(!update_errors(&x, &y, &dh, &bump(&db), &da).unwrap().pass(), "{update:?}: corrupted db passes");
                let mut da2 = da.clone();
                da2[0] *= 1.01;
                assert!(!update_errors(&x, &y, &dh, &db, &da2).unwrap().pass(), "{update:?}: corrupted da passes");
            }
        }
    }

    #[test]
    fn case_list() {
        assert_eq!(update_cases(true).len(), 2 * 2 * 3 * 2);
        assert_eq!(update_cases(false).len(), 2 * 2 * UPDATE_SHAPES.len() * 2);
    }
}
