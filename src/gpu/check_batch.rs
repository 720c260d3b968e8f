//! The batch-norm part of `normlab gpu-check`: every batch kernel sequence (`crate::gpu::batch`)
//! on the GPU against normlab-norms' f64 batch path (f64 storage, `Accum::F64`), with the bounds
//! of the emulator tests (normlab-kernels' tests/emulated_batch.rs, kernels/README.md):
//!
//! - forward y (train and eval): within 1 ulp of the storage type, plus `2^-20 (|x^ w| + |b|)`
//!   with a bias and `2^-20 mean|x^| |w|` over the channel for centred kinds
//!   (`normlab_kernels::bounds`);
//! - running statistics after the train step: within `2^-20` relative + `2^-40 (1 + eps)`;
//! - backward dx: 1 ulp beyond `2^-16 (max|dx| + s (max|g| + C |g . x^|))` of its channel;
//!   dweight / dbias: 1 ulp beyond `2^-18` of the channel sums of `|dy x^|` / `|dy|`.
//!
//! Cases: BatchNorm, RMS, unit L2, L1 (centred and not), L-inf, Top-k (k = 1, 8, 32) and
//! mean-only; fp16 and bf16; NCHW with H*W a multiple of 8 (16-byte paths), 49 and odd, NC with
//! C a multiple of 8 and not; train (weight and bias, running statistics, PyTorch convention)
//! then eval with the updated running statistics.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use half::{bf16, f16};
use normlab_kernels::batch::{BatchNorm, BatchTuning};
use normlab_kernels::bounds;
use normlab_kernels::list::Storage;
use normlab_norms::batch::{self, mean_only, Layout, Mode, RunningStats};
use normlab_norms::{Accum, NormKind, NormSpec, RowStats};

use crate::gpu::batch::{BatchKernels, BnBwdBuffers, BnFwdBuffers, DevRunning};
use crate::gpu::check::{to64, Half16, Rng, Session};
use crate::gpu::error::{GpuError, Result};
use crate::gpu::ulp::{max_ulp_error, UlpError};

/// Bound beyond the slack, in ulps.
pub const BOUND_ULP: f64 = 1.0;

/// One checked case (a train forward + backward, then an eval forward + backward).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BatchCaseCheck {
    pub kind: String,
    pub dtype: String,
    pub layout: String,
    pub stats_kernel: String,
    pub chunk: i64,
    pub nchunks: i32,
    pub train_y_ulp: f64,
    pub train_dx_ulp: f64,
    pub dweight_ulp: Option<f64>,
    pub dbias_ulp: f64,
    /// Largest running-statistics error divided by its tolerance (<= 1 passes).
    pub running_err: f64,
    pub eval_y_ulp: f64,
    pub eval_dx_ulp: f64,
    pub pass: bool,
}

/// `[N, C, H, W]` and `[N, C]` shapes.
pub const LAYOUTS: [Layout; 7] = [
    Layout::Nchw { n: 32, c: 64, h: 28, w: 28 },
    Layout::Nchw { n: 8, c: 24, h: 7, w: 7 },
    Layout::Nchw { n: 5, c: 3, h: 15, w: 13 },
    Layout::Nchw { n: 2, c: 5, h: 1, w: 1 },
    Layout::Nc { n: 4096, c: 256 },
    Layout::Nc { n: 1000, c: 67 },
    Layout::Nc { n: 3, c: 12 },
];
/// `--quick`.
pub const QUICK_LAYOUTS: [Layout; 2] = [Layout::Nchw { n: 8, c: 16, h: 14, w: 14 }, Layout::Nc { n: 300, c: 24 }];

pub fn norms() -> Vec<BatchNorm> {
    let eps = 1e-5;
    let mut v: Vec<BatchNorm> = [
        NormSpec::layer(eps),
        NormSpec::rms(eps),
        NormSpec::unit_l2(eps),
        NormSpec::l1(eps),
        NormSpec::l1(eps).with_centred(false),
        NormSpec::linf(eps),
        NormSpec::topk(1, eps),
        NormSpec::topk(8, eps),
        NormSpec::topk(32, eps),
    ]
    .into_iter()
    .map(BatchNorm::Spec)
    .collect();
    v.push(BatchNorm::MeanOnly);
    v
}

pub fn label(n: &BatchNorm) -> String {
    match n {
        BatchNorm::Spec(s) => match s.kind {
            NormKind::TopK { k } => format!("topk{k}"),
            NormKind::L1 if !s.centred => "l1-u".into(),
            k => k.name().into(),
        },
        BatchNorm::MeanOnly => "mean-only".into(),
    }
}

fn layout_name(l: &Layout) -> String {
    match l {
        Layout::Nc { n, c } => format!("{n}x{c}"),
        Layout::Nchw { n, c, h, w } => format!("{n}x{c}x{h}x{w}"),
    }
}

/// The cases of a run (skipping Top-k with k > N*H*W).
pub fn cases(quick: bool) -> Vec<(BatchNorm, Storage, Layout)> {
    let layouts: &[Layout] = if quick { &QUICK_LAYOUTS } else { &LAYOUTS };
    let mut v = Vec::new();
    for norm in norms() {
        for storage in Storage::ALL {
            for l in layouts {
                if let BatchNorm::Spec(s) = norm {
                    if s.validate(l.per_channel()).is_err() {
                        continue;
                    }
                }
                v.push((norm, storage, *l));
            }
        }
    }
    v
}

struct Dev<'a> {
    s: &'a Session,
}

impl Dev<'_> {
    /// The values on the device and as f64 (exact).
    fn up16<T: Half16>(&self, v: &[T]) -> Result<(CudaSlice<u16>, Vec<f64>)> {
        Ok((self.s.upload(v)?, to64(v)))
    }
    fn zeros<V: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<V>> {
        self.s.stream.alloc_zeros::<V>(n.max(1)).map_err(GpuError::driver("cuMemAlloc"))
    }
}

fn channel_of(l: &Layout, i: usize) -> usize {
    (i / l.spatial()) % l.channels()
}

/// The reference forward (f64) and its statistics.
fn ref_forward(norm: &BatchNorm, l: Layout, x: &[f64], w: Option<&[f64]>, b: Option<&[f64]>, mode: Mode, run: Option<&mut RunningStats>) -> Result<(Vec<f64>, Vec<RowStats>)> {
    let mut y = vec![0.0; x.len()];
    let mut st = vec![RowStats::default(); l.channels()];
    match norm {
        BatchNorm::Spec(spec) => {
            batch::forward(spec, Accum::F64, l, x, w, b, &mut y, mode, run, Some(&mut st))?;
        }
        BatchNorm::MeanOnly => {
            mean_only::forward(Accum::F64, l, x, b, &mut y, mode, run)?;
        }
    }
    Ok((y, st))
}

#[allow(clippy::type_complexity)]
fn ref_backward(norm: &BatchNorm, l: Layout, x: &[f64], dy: &[f64], mode: Mode, st: &[RowStats], w: Option<&[f64]>) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let c = l.channels();
    let (mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; c], vec![0.0; c]);
    match norm {
        BatchNorm::Spec(spec) => {
            batch::backward(spec, Accum::F64, l, x, dy, mode, st, w, &mut dx, Some(&mut dw), Some(&mut db))?;
        }
        BatchNorm::MeanOnly => {
            mean_only::backward(Accum::F64, l, dy, mode, &mut dx, Some(&mut db))?;
        }
    }
    Ok((dx, dw, db))
}

/// Per-channel dx slack `2^-16 (max|dx| + s (max|g| + C |g . x^|))` and the channel sums of
/// `|dy x^|`, `|dy|`.
#[allow(clippy::too_many_arguments)]
fn slacks(norm: &BatchNorm, l: &Layout, dy: &[f64], w: Option<&[f64]>, xhat: &[f64], dx: &[f64], st: &[RowStats], mode: Mode) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let c = l.channels();
    let cc = match norm {
        BatchNorm::Spec(s) => s.scale_constant(l.per_channel()).unwrap_or(1.0).max(1.0),
        BatchNorm::MeanOnly => 1.0,
    };
    let (mut gmax, mut dot, mut dxmax) = (vec![0.0f64; c], vec![0.0f64; c], vec![0.0f64; c]);
    let (mut aw, mut ab) = (vec![0.0; c], vec![0.0; c]);
    for i in 0..dy.len() {
        let ch = channel_of(l, i);
        let g = dy[i] * w.map_or(1.0, |w| w[ch]);
        gmax[ch] = gmax[ch].max(g.abs());
        dot[ch] += g * xhat[i];
        if dx[i].is_finite() {
            dxmax[ch] = dxmax[ch].max(dx[i].abs());
        }
        aw[ch] += (dy[i] * xhat[i]).abs();
        ab[ch] += dy[i].abs();
    }
    let scale = (0..c)
        .map(|ch| {
            let s = if *norm == BatchNorm::MeanOnly { 1.0 } else { 1.0 / st[ch].denominator() };
            let sel = if mode == Mode::Eval { 0.0 } else { cc * dot[ch].abs() };
            2f64.powi(-16) * (dxmax[ch] + s * (gmax[ch] + sel))
        })
        .collect();
    (scale, aw, ab)
}

fn check_case<T: Half16>(s: &Session, k: &Arc<BatchKernels>, norm: &BatchNorm, storage: Storage, l: Layout, seed: u64) -> Result<BatchCaseCheck> {
    let d = Dev { s };
    let st = &s.stream;
    let c = l.channels();
    let mean_only = *norm == BatchNorm::MeanOnly;
    let eps = match norm {
        BatchNorm::Spec(sp) => sp.eps,
        BatchNorm::MeanOnly => 0.0,
    };
    let mut rng = Rng(seed);
    let (dx_, x) = d.up16::<T>(&rng.vec(l.len(), 0.3, 1.5))?;
    let (ddy, dy) = d.up16::<T>(&rng.vec(l.len(), 0.0, 1.0))?;
    let (dw_, w) = d.up16::<T>(&rng.vec(c, 1.0, 0.5))?;
    let (db_, b) = d.up16::<T>(&rng.vec(c, 0.0, 0.5))?;
    let mut run = RunningStats::new(c).with_momentum(0.25);
    run.mean = rng.vec::<f64>(c, 0.0, 0.1);
    run.spread = (0..c).map(|i| 0.5 + 0.01 * i as f64).collect();
    let mut drm = st.clone_htod(&run.mean).map_err(GpuError::driver("cuMemcpyHtoD"))?;
    let mut drs = st.clone_htod(&run.spread).map_err(GpuError::driver("cuMemcpyHtoD"))?;
    let mut dy_out = d.zeros::<u16>(l.len())?;
    let mut ddx = d.zeros::<u16>(l.len())?;
    let mut dgw = d.zeros::<u16>(c)?;
    let mut dgb = d.zeros::<u16>(c)?;
    let mut dstats = d.zeros::<u8>(16 * c)?;
    let mut daux = d.zeros::<u8>(24 * c)?;
    let tuning = BatchTuning::DEFAULT;
    let wopt = (!mean_only).then_some(());

    let mut results = Vec::new();
    let mut plan_info = None;
    for mode in [Mode::Train, Mode::Eval] {
        // Device pointers for this step.
        let (xa, _g1) = dx_.device_ptr(st);
        let (dya, _g2) = ddy.device_ptr(st);
        let (wa, _g3) = dw_.device_ptr(st);
        let (ba, _g4) = db_.device_ptr(st);
        let (ya, _g5) = dy_out.device_ptr_mut(st);
        let (dxa, _g6) = ddx.device_ptr_mut(st);
        let (gwa, _g7) = dgw.device_ptr_mut(st);
        let (gba, _g8) = dgb.device_ptr_mut(st);
        let (sa, _g9) = dstats.device_ptr_mut(st);
        let (aa, _g10) = daux.device_ptr_mut(st);
        let (rma, _g11) = drm.device_ptr_mut(st);
        let (rsa, _g12) = drs.device_ptr_mut(st);
        let dr = DevRunning { mean: rma, spread: rsa, momentum: run.momentum, convention: run.convention };
        let fb = BnFwdBuffers { x: xa, y: ya, weight: wopt.map(|_| wa), bias: Some(ba), stats: sa, aux: aa };
        let bb = BnBwdBuffers { x: xa, dy: dya, stats: sa, aux: aa, weight: wopt.map(|_| wa), dx: dxa, dweight: wopt.map(|_| gwa), dbias: Some(gba) };
        // SAFETY: every buffer was allocated above for this layout and outlives the synchronisation.
        let plan = unsafe { k.forward(st, norm, storage, l, mode, Some(&dr), &fb, &tuning)? };
        unsafe { k.backward(st, norm, storage, l, mode, &bb, &tuning)? };
        drop((_g1, _g2, _g3, _g4, _g5, _g6, _g7, _g8, _g9, _g10, _g11, _g12));
        st.synchronize().map_err(GpuError::driver("cuStreamSynchronize"))?;
        plan_info.get_or_insert((plan.stats1.clone(), plan.geo.chunk, plan.geo.nchunks));

        // Reference in the same mode, from the running statistics before this step.
        let wv = (!mean_only).then_some(&w[..]);
        let mut run_ref = run.clone();
        let (y_ref, st_ref) = ref_forward(norm, l, &x, wv, Some(&b), mode, Some(&mut run_ref))?;
        let (xhat, _) = ref_forward(norm, l, &x, None, None, mode, Some(&mut run.clone()))?;
        let (dx_ref, dw_ref, db_ref) = ref_backward(norm, l, &x, &dy, mode, &st_ref, wv)?;
        let dt = T::DT;
        let y_gpu = s.download::<T>(&dy_out)?;
        let y_slack = bounds::batch_forward_slack(norm, &l, &y_ref, Some(&b));
        let y_err = max_ulp_error(dt, &y_gpu, &y_ref, &|i| y_slack[i]);
        let (dx_slack, aw, ab) = slacks(norm, &l, &dy, wv, &xhat, &dx_ref, &st_ref, mode);
        let dx_gpu = s.download::<T>(&ddx)?;
        let dx_err = max_ulp_error(dt, &dx_gpu, &dx_ref, &|i| dx_slack[channel_of(&l, i)]);
        let db_err = max_ulp_error(dt, &s.download::<T>(&dgb)?, &db_ref, &|ch| 2f64.powi(-18) * ab[ch]);
        let dw_err = (!mean_only).then(|| -> Result<UlpError> { Ok(max_ulp_error(dt, &s.download::<T>(&dgw)?, &dw_ref, &|ch| 2f64.powi(-18) * aw[ch])) }).transpose()?;
        let mut run_err = 0.0f64;
        if mode == Mode::Train {
            let gm = st.clone_dtoh(&drm).map_err(GpuError::driver("cuMemcpyDtoH"))?;
            let gs = st.clone_dtoh(&drs).map_err(GpuError::driver("cuMemcpyDtoH"))?;
            for (g, r) in gm.iter().zip(&run_ref.mean).chain(gs.iter().zip(&run_ref.spread)) {
                let tol = 2f64.powi(-20) * r.abs() + 2f64.powi(-40) * (1.0 + eps);
                let e = if r.is_nan() || g.is_nan() { if r.is_nan() && g.is_nan() { 0.0 } else { f64::INFINITY } } else { (g - r).abs() / tol };
                run_err = run_err.max(e);
            }
            // Eval then runs with the kernel's updated running statistics (equal to the
            // reference's within the tolerance checked here).
            run.mean = gm;
            run.spread = gs;
        }
        results.push((y_err, dx_err, dw_err, db_err, run_err));
    }
    let (tr, ev) = (&results[0], &results[1]);
    let (stats_kernel, chunk, nchunks) = plan_info.unwrap_or_default();
    let worst = [tr.0, tr.1, tr.3, ev.0, ev.1, ev.3].into_iter().chain(tr.2).chain(ev.2).fold(UlpError::ZERO, UlpError::max);
    Ok(BatchCaseCheck {
        kind: label(norm),
        dtype: storage.name().into(),
        layout: layout_name(&l),
        stats_kernel,
        chunk,
        nchunks,
        train_y_ulp: tr.0.max_ulp,
        train_dx_ulp: tr.1.max_ulp,
        dweight_ulp: tr.2.map(|e| e.max_ulp.max(ev.2.map_or(0.0, |e| e.max_ulp))),
        dbias_ulp: tr.3.max_ulp.max(ev.3.max_ulp),
        running_err: tr.4,
        eval_y_ulp: ev.0.max_ulp,
        eval_dx_ulp: ev.1.max_ulp,
        pass: worst.max_ulp <= BOUND_ULP && tr.4 <= 1.0,
    })
}

/// Run every batch case on the session's device; `progress` is called before each case.
pub fn run_cases(s: &Session, quick: bool, progress: &mut dyn FnMut(usize, usize, &str)) -> Result<Vec<BatchCaseCheck>> {
    let k = BatchKernels::for_context(&s.ctx)?;
    let all = cases(quick);
    let mut out = Vec::with_capacity(all.len());
    for (i, (norm, storage, l)) in all.iter().enumerate() {
        progress(i, all.len(), &format!("batch {} {} {}", label(norm), storage.name(), layout_name(l)));
        let seed = 0x6261_7463_685f_6e6f ^ (i as u64).wrapping_mul(0x9e37_79b9);
        out.push(match storage {
            Storage::F16 => check_case::<f16>(s, &k, norm, *storage, *l, seed)?,
            Storage::BF16 => check_case::<bf16>(s, &k, norm, *storage, *l, seed)?,
        });
    }
    Ok(out)
}

/// The table of the batch cases.
pub fn render(cases: &[BatchCaseCheck]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "\nbatch norms: train (weight, bias, running statistics) then eval; bounds as kernels/README.md (Batch norms)\n");
    let _ = writeln!(
        s,
        "{:<9} {:<5} {:>14} {:<26} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  ok",
        "kind", "dtype", "layout", "stats kernel", "chunks", "y ulp", "dx ulp", "dw ulp", "db ulp", "run/tol", "eval y", "eval dx"
    );
    for c in cases {
        let _ = writeln!(
            s,
            "{:<9} {:<5} {:>14} {:<26} {:>6} {:>8.3} {:>8.3} {:>8} {:>8.3} {:>8.3} {:>8.3} {:>8.3}  {}",
            c.kind,
            c.dtype,
            c.layout,
            c.stats_kernel,
            c.nchunks,
            c.train_y_ulp,
            c.train_dx_ulp,
            c.dweight_ulp.map_or("-".to_string(), |v| format!("{v:.3}")),
            c.dbias_ulp,
            c.running_err,
            c.eval_y_ulp,
            c.eval_dx_ulp,
            if c.pass { "ok" } else { "FAIL" }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_cover_every_kind_dtype_and_layout_family() {
        let all = cases(false);
        for n in norms() {
            assert!(all.iter().any(|c| c.0 == n), "{}", label(&n));
        }
        assert!(all.iter().any(|c| matches!(c.2, Layout::Nc { c, .. } if c % 8 != 0)));
        assert!(all.iter().any(|c| matches!(c.2, Layout::Nchw { h, w, .. } if (h * w) % 8 == 0)));
        // Top-k 32 is skipped where a channel has fewer than 32 elements.
        assert!(!all.iter().any(|c| label(&c.0) == "topk32" && c.2.per_channel() < 32));
        assert!(cases(true).len() < all.len());
    }
}
