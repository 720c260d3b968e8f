//! `normlab gpu-check`: every row kernel (and, through [`crate::gpu::check_updates`],
//! [`crate::gpu::check_batch`] and [`crate::gpu::check_project`], the fused nGPT/anGPT residual
//! updates, the batch norms and the fused weight projections) run on the GPU against the f64
//! reference of
//! normlab-norms (f64 storage, `Accum::F64`) over many shapes, with the error bounds of the CPU
//! emulation tests (kernels/README.md):
//!
//! - forward y: within 1 ulp of the storage type beyond `2^-20 mean|x̂| |w|` for centred kinds
//!   (the absolute error of the fp32 mean; [`normlab_kernels::bounds`]);
//! - backward dx: 1 ulp beyond `2^-16 * (max|dx| + s * (max|g| + C |g . x̂|))` of its row (the
//!   backward subtracts fp32 terms of that size; s = 1/D, g = dy * w, C = the kind's constant);
//! - dweight / dbias: 1 ulp beyond `2^-18 * sum over rows of |dy x̂|` (resp. `|dy|`).
//!
//! Shapes cover one element, tails, warp and block kernels, one row and many rows (more rows than
//! the persistent grid holds), up to 12288-wide rows; every kind (Top-k with k = 1, 8, 32), fp16
//! and bf16, without and with affine parameters (weight in the forward; weight, dweight and
//! dbias in the backward). The backward uses the statistics the GPU forward saved.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use half::{bf16, f16};
use normlab_kernels::bounds;
use normlab_kernels::list::{FwdVariant, Storage};
use normlab_kernels::params::RowCounts;
use normlab_norms::{row, Accum, Counters, DType, Element, NormKind, NormSpec, RowStats};

use crate::gpu::device::{open, DeviceInfo};
use crate::gpu::error::{GpuError, Result};
use crate::gpu::module::ImageInfo;
use crate::gpu::rows::{BwdArgs, RowKernels};
use crate::gpu::args::FwdBuffers;
use crate::gpu::ulp::{max_ulp_error, UlpError};

pub const SCHEMA: &str = "normlab.gpu_check/1";
/// Every bound is this many ulps beyond its slack.
pub const BOUND_ULP: f64 = 1.0;

/// `[rows, n]` shapes: single element, tails, warp rows (n <= 1024), block rows, wide rows, and
/// more rows than a persistent grid holds on an H100 (20000 rows of 64 for the warp kernels:
/// above 132 SMs x 16 blocks x 4 rows; 2000 rows of 1100 for the block kernels), so that the
/// grid-stride loops run more than once per block; 700 rows of 2048 do that on the block kernels'
/// register path (n a multiple of 8, aligned rows), whose loop carries the next row's load from
/// one row to the next.
pub const SHAPES: [(usize, usize); 13] = [
    (1, 1),
    (3, 7),
    (5, 33),
    (37, 64),
    (20000, 64),
    (7, 100),
    (129, 1000),
    (64, 1024),
    (2000, 1100),
    (700, 2048),
    (33, 4096),
    (9, 4099),
    (4, 12288),
];
/// `--quick`: two warp shapes and two block shapes, one of them on the block kernels' register
/// path with more rows than the grid has blocks.
pub const QUICK_SHAPES: [(usize, usize); 4] = [(3, 7), (37, 128), (5, 2050), (3000, 2048)];

/// The specs checked: every kind with its natural centring, Top-k at k = 1, 8 and 32.
pub fn specs() -> Vec<NormSpec> {
    let eps = 1e-5;
    vec![
        NormSpec::rms(eps),
        NormSpec::layer(eps),
        NormSpec::unit_l2(eps),
        NormSpec::l1(eps),
        NormSpec::linf(eps),
        NormSpec::topk(1, eps),
        NormSpec::topk(8, eps),
        NormSpec::topk(32, eps),
    ]
}

/// One checked case (a forward and a backward launch).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CaseCheck {
    pub kind: String,
    pub dtype: String,
    pub rows: usize,
    pub n: usize,
    pub affine: bool,
    pub forward_kernel: String,
    pub backward_kernel: String,
    pub grid: u32,
    pub block: u32,
    pub smem: usize,
    pub forward_ulp: f64,
    pub dx_ulp: f64,
    pub dweight_ulp: Option<f64>,
    pub dbias_ulp: Option<f64>,
    pub pass: bool,
}

/// One checked forward-variant case.
///
/// - `pure`: the GPU's pure-half forward against normlab-norms' CPU path with the pure
///   accumulator of the storage type (`Accum::PureF16` / `PureBf16`): the same operations in the
///   same order, so `mismatches` (outputs whose bits differ; NaN = NaN) must be 0 and the summed
///   counters equal. `scale` is the data's standard deviation (60: sums of squares overflow fp16).
/// - `e4m3`: fp8 output `round_e4m3(y * scale)` against the f64 reference times `scale`, within
///   `BOUND_ULP` ulp of E4M3 (`max_ulp`), +-448 where the reference saturates.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VariantCheck {
    pub variant: String,
    pub kind: String,
    pub dtype: String,
    pub rows: usize,
    pub n: usize,
    pub affine: bool,
    pub scale: f32,
    pub kernel: String,
    pub max_ulp: Option<f64>,
    pub mismatches: Option<usize>,
    pub counters_gpu: Option<Counters>,
    pub counters_cpu: Option<Counters>,
    pub pass: bool,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CheckReport {
    pub schema: String,
    pub device: DeviceInfo,
    pub image: ImageInfo,
    pub bound_ulp: f64,
    pub bounds: String,
    /// The case families this run checked (`--only`; all by default).
    pub families: Vec<String>,
    pub cases: Vec<CaseCheck>,
    /// The forward variants (pure-half, fp8 output).
    pub variants: Vec<VariantCheck>,
    /// The fused residual updates (`crate::gpu::check_updates`).
    pub updates: Vec<crate::gpu::check_updates::UpdateCaseCheck>,
    /// The batch-norm sequences (`crate::gpu::check_batch`), counted in `total` and `failed`.
    /// Row cases plus variant, update and batch cases.
    pub batch_cases: Vec<crate::gpu::check_batch::BatchCaseCheck>,
    /// The fused weight projections (`crate::gpu::check_project`), counted in `total` and
    /// `failed`.
    pub projections: Vec<crate::gpu::check_project::ProjectCaseCheck>,
    pub total: usize,
    pub failed: usize,
}

/// 16-bit storage with its bit pattern (how buffers travel to the device).
pub(crate) trait Half16: Copy + Default + Element {
    const STORAGE: Storage;
    const DT: DType;
    /// normlab-norms' pure accumulator of this storage type.
    const PURE: Accum;
    fn to_bits(self) -> u16;
    fn from_bits(b: u16) -> Self;
}
impl Half16 for f16 {
    const STORAGE: Storage = Storage::F16;
    const DT: DType = DType::F16;
    const PURE: Accum = Accum::PureF16;
    fn to_bits(self) -> u16 {
        f16::to_bits(self)
    }
    fn from_bits(b: u16) -> Self {
        f16::from_bits(b)
    }
}
impl Half16 for bf16 {
    const STORAGE: Storage = Storage::BF16;
    const DT: DType = DType::BF16;
    const PURE: Accum = Accum::PureBf16;
    fn to_bits(self) -> u16 {
        bf16::to_bits(self)
    }
    fn from_bits(b: u16) -> Self {
        bf16::from_bits(b)
    }
}

/// splitmix64 + Box-Muller: deterministic data without a dependency (all of gpu-check's cases).
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub(crate) fn normal(&mut self) -> f64 {
        (-2.0 * self.uniform().ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
    /// `len` draws of N(mean, scale^2), rounded to `T`.
    pub(crate) fn vec<T: Element>(&mut self, len: usize, mean: f64, scale: f64) -> Vec<T> {
        (0..len).map(|_| T::from_f64(mean + scale * self.normal())).collect()
    }
}

/// A device session: context, stream, kernels.
pub struct Session {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub kernels: Arc<RowKernels>,
}

impl Session {
    /// Open device `ordinal` and load the kernels (typed errors without a GPU, driver or NVRTC).
    pub fn open(ordinal: usize) -> Result<Self> {
        let (ctx, _) = open(ordinal)?;
        let kernels = RowKernels::for_context(&ctx)?;
        let stream = ctx.default_stream();
        Ok(Session { ctx, stream, kernels })
    }

    pub(crate) fn upload<T: Half16>(&self, v: &[T]) -> Result<CudaSlice<u16>> {
        let bits: Vec<u16> = v.iter().map(|x| x.to_bits()).collect();
        self.stream.clone_htod(&bits).map_err(GpuError::driver("cuMemcpyHtoD"))
    }
    pub(crate) fn download<T: Half16>(&self, s: &CudaSlice<u16>) -> Result<Vec<f64>> {
        let bits = self.stream.clone_dtoh(s).map_err(GpuError::driver("cuMemcpyDtoH"))?;
        Ok(bits.into_iter().map(|b| T::from_bits(b).to_f64()).collect())
    }
    pub(crate) fn zeros(&self, len: usize) -> Result<CudaSlice<u16>> {
        self.stream.alloc_zeros::<u16>(len.max(1)).map_err(GpuError::driver("cuMemAlloc"))
    }
}

pub(crate) fn to64<T: Half16>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Run one case on the GPU and compare with the reference.
fn check_case<T: Half16>(s: &Session, spec: &NormSpec, rows: usize, n: usize, affine: bool, seed: u64) -> Result<CaseCheck> {
    let mut rng = Rng(seed);
    let len = rows * n;
    let x: Vec<T> = rng.vec(len, 0.1, 1.0);
    let dy: Vec<T> = rng.vec(len, 0.1, 1.0);
    let w: Option<Vec<T>> = affine.then(|| rng.vec(n, 1.0, 0.5));
    let (x64, dy64, w64) = (to64(&x), to64(&dy), w.as_deref().map(to64));

    // GPU forward (with statistics), then backward from those statistics.
    let dx_ = s.upload(&x)?;
    let ddy = s.upload(&dy)?;
    let dw_ = w.as_deref().map(|w| s.upload(w)).transpose()?;
    let mut dy_out = s.zeros(len)?;
    let mut dstats = s.stream.alloc_zeros::<f32>((rows * 4).max(1)).map_err(GpuError::driver("cuMemAlloc"))?;
    let mut ddx = s.zeros(len)?;
    let mut dgw = s.zeros(n)?;
    let mut dgb = s.zeros(n)?;
    let st = &s.stream;
    let (xa, _g1) = dx_.device_ptr(st);
    let (dya, _g2) = ddy.device_ptr(st);
    let wa = dw_.as_ref().map(|w| w.device_ptr(st));
    let (ya, _g3) = dy_out.device_ptr_mut(st);
    let (sa, _g4) = dstats.device_ptr_mut(st);
    let (dxa, _g5) = ddx.device_ptr_mut(st);
    let (gwa, _g6) = dgw.device_ptr_mut(st);
    let (gba, _g7) = dgb.device_ptr_mut(st);
    let waddr = wa.as_ref().map(|(a, _)| *a);
    let fb = FwdBuffers { rows, x: xa, y: ya, weight: waddr, bias: None, stats: Some(sa) };
    // SAFETY: every buffer was allocated above for this shape and lives until the copies back.
    let pf = unsafe { s.kernels.forward(st, spec, T::STORAGE, n, &fb)? };
    let bb = BwdArgs {
        rows,
        x: xa,
        dy: dya,
        stats: sa,
        weight: waddr,
        dx: dxa,
        dweight: affine.then_some(gwa),
        dbias: affine.then_some(gba),
    };
    let pb = unsafe { s.kernels.backward(st, spec, T::STORAGE, n, &bb)? };
    drop((_g1, _g2, _g3, _g4, _g5, _g6, _g7, wa));
    st.synchronize().map_err(GpuError::driver("cuStreamSynchronize"))?;
    let y_gpu = s.download::<T>(&dy_out)?;
    let dx_gpu = s.download::<T>(&ddx)?;
    let gw_gpu = s.download::<T>(&dgw)?;
    let gb_gpu = s.download::<T>(&dgb)?;

    // Reference: f64 storage, f64 accumulation.
    let mut y_ref = vec![0.0; len];
    let mut st_ref = vec![RowStats::default(); rows];
    row::forward(spec, Accum::F64, &x64, n, w64.as_deref(), None, &mut y_ref, None)?;
    let mut xh = vec![0.0; len];
    row::forward(spec, Accum::F64, &x64, n, None, None, &mut xh, Some(&mut st_ref))?;
    let (mut dx_ref, mut gw_ref, mut gb_ref) = (vec![0.0; len], vec![0.0; n], vec![0.0; n]);
    row::backward(
        spec,
        Accum::F64,
        &x64,
        &dy64,
        n,
        &st_ref,
        w64.as_deref(),
        &mut dx_ref,
        affine.then_some(&mut gw_ref[..]),
        affine.then_some(&mut gb_ref[..]),
    )?;

    let dt = T::DT;
    let fwd_slack = bounds::row_forward_slack(spec, &xh, n, w64.as_deref(), None);
    let fwd = max_ulp_error(dt, &y_gpu, &y_ref, &|i| fwd_slack[i]);
    let c = spec.scale_constant(n)?.max(1.0);
    // Per row: the dx error scale (analytic dx bound) and the dot of the weighted dy with
    // x-hat, which the selection-tie allowance needs too.
    let (row_scale, dots): (Vec<f64>, Vec<f64>) = (0..rows)
        .map(|r| {
            let s = 1.0 / st_ref[r].denominator();
            let (mut gmax, mut dot, mut dxmax) = (0.0f64, 0.0f64, 0.0f64);
            for j in 0..n {
                let i = r * n + j;
                let g = dy64[i] * w64.as_ref().map_or(1.0, |w| w[j]);
                gmax = gmax.max(g.abs());
                dot += g * xh[i];
                if dx_ref[i].is_finite() {
                    dxmax = dxmax.max(dx_ref[i].abs());
                }
            }
            (dxmax + s * (gmax + c * dot.abs()), dot)
        })
        .unzip();
    // Rows whose Top-k / L-inf selection is ambiguous at fp32 resolution (bounds::selection_tie_slack).
    let tie: Vec<f64> = (0..rows)
        .flat_map(|r| {
            let st = &st_ref[r];
            bounds::selection_tie_slack(spec, &xh[r * n..(r + 1) * n], 1.0 / st.denominator(), st.mean_hi + st.mean_lo, dots[r])
        })
        .collect();
    let dx_err = max_ulp_error(dt, &dx_gpu, &dx_ref, &|i| 2f64.powi(-16) * row_scale[i / n] + tie[i]);
    let (mut abs_w, mut abs_b) = (vec![0.0; n], vec![0.0; n]);
    for i in 0..len {
        abs_w[i % n] += (dy64[i] * xh[i]).abs();
        abs_b[i % n] += dy64[i].abs();
    }
    let gw_err: Option<UlpError> = affine.then(|| max_ulp_error(dt, &gw_gpu, &gw_ref, &|j| 2f64.powi(-18) * abs_w[j]));
    let gb_err: Option<UlpError> = affine.then(|| max_ulp_error(dt, &gb_gpu, &gb_ref, &|j| 2f64.powi(-18) * abs_b[j]));
    let worst = [Some(fwd), Some(dx_err), gw_err, gb_err].into_iter().flatten().fold(UlpError::ZERO, UlpError::max);
    Ok(CaseCheck {
        kind: label(spec),
        dtype: T::STORAGE.name().to_string(),
        rows,
        n,
        affine,
        forward_kernel: pf.kernel,
        backward_kernel: pb.kernel,
        grid: pf.grid,
        block: pf.block,
        smem: pf.smem,
        forward_ulp: fwd.max_ulp,
        dx_ulp: dx_err.max_ulp,
        dweight_ulp: gw_err.map(|e| e.max_ulp),
        dbias_ulp: gb_err.map(|e| e.max_ulp),
        pass: worst.max_ulp <= BOUND_ULP,
    })
}

/// A pure-half forward on the GPU against the CPU pure path (bitwise) and its counters.
fn check_pure_case<T: Half16>(s: &Session, spec: &NormSpec, rows: usize, n: usize, affine: bool, scale: f32, seed: u64) -> Result<VariantCheck> {
    let mut rng = Rng(seed);
    let len = rows * n;
    let x: Vec<T> = rng.vec(len, 0.1, scale as f64);
    let w: Option<Vec<T>> = affine.then(|| rng.vec(n, 1.0, 0.5));
    let b: Option<Vec<T>> = affine.then(|| rng.vec(n, 0.0, 0.5));
    let dx_ = s.upload(&x)?;
    let dw_ = w.as_deref().map(|w| s.upload(w)).transpose()?;
    let db_ = b.as_deref().map(|b| s.upload(b)).transpose()?;
    let mut dy_ = s.zeros(len)?;
    let mut dcounts = s.stream.alloc_zeros::<u32>((rows * 4).max(1)).map_err(GpuError::driver("cuMemAlloc"))?;
    let st = &s.stream;
    let (xa, _g1) = dx_.device_ptr(st);
    let wa = dw_.as_ref().map(|w| w.device_ptr(st));
    let ba = db_.as_ref().map(|b| b.device_ptr(st));
    let (ya, _g2) = dy_.device_ptr_mut(st);
    let (ca, _g3) = dcounts.device_ptr_mut(st);
    let fb = FwdBuffers { rows, x: xa, y: ya, weight: wa.as_ref().map(|(a, _)| *a), bias: ba.as_ref().map(|(a, _)| *a), stats: None };
    // SAFETY: every buffer was allocated above for this shape and lives until the copies back.
    let p = unsafe { s.kernels.forward_variant(st, spec, T::STORAGE, FwdVariant::Pure, n, &fb, Some(ca), 1.0)? };
    drop((_g1, _g2, _g3, wa, ba));
    st.synchronize().map_err(GpuError::driver("cuStreamSynchronize"))?;
    let y_gpu = s.download::<T>(&dy_)?;
    let c = st.clone_dtoh(&dcounts).map_err(GpuError::driver("cuMemcpyDtoH"))?;
    let gpu_counts: Counters = (0..rows)
        .map(|r| RowCounts { nonfinite_in: c[4 * r], acc_overflow: c[4 * r + 1], nonfinite_out: c[4 * r + 2], reserved: 0 }.to_counters())
        .sum();
    let mut y_cpu = vec![T::default(); len];
    let cpu_counts = row::forward(spec, T::PURE, &x, n, w.as_deref(), b.as_deref(), &mut y_cpu, None)?;
    let mismatches = y_gpu
        .iter()
        .zip(&y_cpu)
        .filter(|(g, c)| {
            let c = Element::to_f64(**c);
            !((g.is_nan() && c.is_nan()) || g.to_bits() == c.to_bits())
        })
        .count();
    Ok(VariantCheck {
        variant: "pure".into(),
        kind: label(spec),
        dtype: T::STORAGE.name().into(),
        rows,
        n,
        affine,
        scale,
        kernel: p.kernel,
        max_ulp: None,
        mismatches: Some(mismatches),
        counters_gpu: Some(gpu_counts),
        counters_cpu: Some(cpu_counts),
        pass: mismatches == 0 && gpu_counts == cpu_counts,
    })
}

/// An fp8-output forward on the GPU against the f64 reference times the scale.
fn check_e4m3_case<T: Half16>(s: &Session, spec: &NormSpec, rows: usize, n: usize, affine: bool, scale: f32, seed: u64) -> Result<VariantCheck> {
    let mut rng = Rng(seed);
    let len = rows * n;
    let x: Vec<T> = rng.vec(len, 0.1, 1.0);
    let w: Option<Vec<T>> = affine.then(|| rng.vec(n, 1.0, 0.5));
    let dx_ = s.upload(&x)?;
    let dw_ = w.as_deref().map(|w| s.upload(w)).transpose()?;
    let mut dy_ = s.stream.alloc_zeros::<u8>(len.max(1)).map_err(GpuError::driver("cuMemAlloc"))?;
    let st = &s.stream;
    let (xa, _g1) = dx_.device_ptr(st);
    let wa = dw_.as_ref().map(|w| w.device_ptr(st));
    let (ya, _g2) = dy_.device_ptr_mut(st);
    let fb = FwdBuffers { rows, x: xa, y: ya, weight: wa.as_ref().map(|(a, _)| *a), bias: None, stats: None };
    // SAFETY: as above; y holds rows * n bytes.
    let p = unsafe { s.kernels.forward_variant(st, spec, T::STORAGE, FwdVariant::E4M3, n, &fb, None, scale)? };
    drop((_g1, _g2, wa));
    st.synchronize().map_err(GpuError::driver("cuStreamSynchronize"))?;
    let y_gpu: Vec<f64> = st
        .clone_dtoh(&dy_)
        .map_err(GpuError::driver("cuMemcpyDtoH"))?
        .into_iter()
        .map(|b| normlab_norms::F8E4M3::from_bits(b).to_f64())
        .collect();
    let (x64, w64) = (to64(&x), w.as_deref().map(to64));
    let mut y_ref = vec![0.0; len];
    row::forward(spec, Accum::F64, &x64, n, w64.as_deref(), None, &mut y_ref, None)?;
    y_ref.iter_mut().for_each(|v| *v *= scale as f64);
    let e = max_ulp_error(DType::F8E4M3, &y_gpu, &y_ref, &|_| 0.0);
    Ok(VariantCheck {
        variant: "e4m3".into(),
        kind: label(spec),
        dtype: T::STORAGE.name().into(),
        rows,
        n,
        affine,
        scale,
        kernel: p.kernel,
        max_ulp: Some(e.max_ulp),
        mismatches: None,
        counters_gpu: None,
        counters_cpu: None,
        pass: e.max_ulp <= BOUND_ULP,
    })
}

/// The forward-variant cases: (variant, spec, storage, rows, n, affine, scale). Pure: data of
/// standard deviation 1 and 60 (fp16 sums of squares overflow); E4M3: output scales 1 and 100
/// (saturation at 448).
pub fn variant_cases(quick: bool) -> Vec<(FwdVariant, NormSpec, Storage, usize, usize, bool, f32)> {
    let shapes: &[(usize, usize)] = if quick { &QUICK_SHAPES } else { &SHAPES };
    let mut v = Vec::new();
    for variant in FwdVariant::ALL {
        for spec in specs() {
            for storage in Storage::ALL {
                for &(rows, n) in shapes {
                    if spec.validate(n).is_err() {
                        continue;
                    }
                    let scales: [f32; 2] = match variant {
                        FwdVariant::Pure => [1.0, 60.0],
                        FwdVariant::E4M3 => [1.0, 100.0],
                    };
                    for (i, scale) in scales.into_iter().enumerate() {
                        v.push((variant, spec, storage, rows, n, i == 0, scale));
                    }
                }
            }
        }
    }
    v
}

/// `rms`, `layer`, ..., `topk8`.
pub fn label(spec: &NormSpec) -> String {
    match spec.kind {
        NormKind::TopK { k } => format!("topk{k}"),
        k => k.name().to_string(),
    }
}

/// The cases of a run: (spec, storage, rows, n, affine), skipping Top-k with k > n.
pub fn cases(quick: bool) -> Vec<(NormSpec, Storage, usize, usize, bool)> {
    let shapes: &[(usize, usize)] = if quick { &QUICK_SHAPES } else { &SHAPES };
    let mut v = Vec::new();
    for spec in specs() {
        for storage in Storage::ALL {
            for &(rows, n) in shapes {
                if spec.validate(n).is_err() {
                    continue;
                }
                for affine in [false, true] {
                    v.push((spec, storage, rows, n, affine));
                }
            }
        }
    }
    v
}

/// The case families of a run, each selectable on its own (`normlab gpu-check --only`), so that
/// one family failing to launch on a new device does not hide the others' results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Families {
    /// The row kernels, forward and backward.
    pub rows: bool,
    /// The forward variants (pure half, E4M3 output).
    pub variants: bool,
    /// The fused nGPT/anGPT residual updates.
    pub updates: bool,
    /// The batch-norm sequences.
    pub batch: bool,
    /// The fused weight projections.
    pub project: bool,
}

impl Families {
    pub const ALL: Families = Families { rows: true, variants: true, updates: true, batch: true, project: true };
    pub const NONE: Families = Families { rows: false, variants: false, updates: false, batch: false, project: false };

    /// The names of the families selected, in run order (the report's `families`).
    pub fn names(self) -> Vec<String> {
        let all = [(self.rows, "rows"), (self.variants, "variants"), (self.updates, "updates"), (self.batch, "batch"), (self.project, "project")];
        all.iter().filter(|f| f.0).map(|f| f.1.to_string()).collect()
    }
}

/// Number of cases of a run of `only`, for progress bars.
pub fn total_cases(quick: bool, only: Families) -> usize {
    let n = |on: bool, len: fn(bool) -> usize| if on { len(quick) } else { 0 };
    n(only.rows, |q| cases(q).len())
        + n(only.variants, |q| variant_cases(q).len())
        + n(only.updates, |q| crate::gpu::check_updates::update_cases(q).len())
        + n(only.batch, |q| crate::gpu::check_batch::cases(q).len())
        + n(only.project, |q| crate::gpu::check_project::cases(q).len())
}

/// Run the cases of `only` on device `ordinal`; `progress` is called before each case. An error
/// (a failed launch, say) ends the run and names the case it happened in.
pub fn run(ordinal: usize, quick: bool, only: Families, progress: &mut dyn FnMut(usize, usize, &str)) -> Result<CheckReport> {
    use crate::gpu::check_updates::{run_update_case, update_cases};
    let s = Session::open(ordinal)?;
    let all = if only.rows { cases(quick) } else { Vec::new() };
    let upd = if only.updates { update_cases(quick) } else { Vec::new() };
    let vall = if only.variants { variant_cases(quick) } else { Vec::new() };
    let total = total_cases(quick, only);
    // The label of the case in progress, for errors.
    let current = std::cell::RefCell::new(String::new());
    let in_case = |e: GpuError| GpuError::InCase { case: current.borrow().clone(), source: Box::new(e) };
    let mut step = |i: usize, label: &str| {
        *current.borrow_mut() = label.to_string();
        progress(i, total, label)
    };
    let mut out = Vec::with_capacity(all.len());
    for (i, (spec, storage, rows, n, affine)) in all.iter().enumerate() {
        step(i, &format!("{} {} {rows}x{n}{}", label(spec), storage.name(), if *affine { " affine" } else { "" }));
        let seed = 0x6e6f_726d_6c61_6200 ^ (i as u64).wrapping_mul(0x9e37_79b9);
        let c = match storage {
            Storage::F16 => check_case::<f16>(&s, spec, *rows, *n, *affine, seed),
            Storage::BF16 => check_case::<bf16>(&s, spec, *rows, *n, *affine, seed),
        };
        out.push(c.map_err(in_case)?);
    }
    let mut vout = Vec::with_capacity(vall.len());
    for (i, (variant, spec, storage, rows, n, affine, scale)) in vall.iter().enumerate() {
        step(out.len() + i, &format!("{} {} {} {rows}x{n} scale {scale}", variant.name(), label(spec), storage.name()));
        let seed = 0x7661_7269_616e_7400 ^ (i as u64).wrapping_mul(0x9e37_79b9);
        let c = match (variant, storage) {
            (FwdVariant::Pure, Storage::F16) => check_pure_case::<f16>(&s, spec, *rows, *n, *affine, *scale, seed),
            (FwdVariant::Pure, Storage::BF16) => check_pure_case::<bf16>(&s, spec, *rows, *n, *affine, *scale, seed),
            (FwdVariant::E4M3, Storage::F16) => check_e4m3_case::<f16>(&s, spec, *rows, *n, *affine, *scale, seed),
            (FwdVariant::E4M3, Storage::BF16) => check_e4m3_case::<bf16>(&s, spec, *rows, *n, *affine, *scale, seed),
        };
        vout.push(c.map_err(in_case)?);
    }
    let mut updates = Vec::with_capacity(upd.len());
    if !upd.is_empty() {
        let uk = crate::gpu::updates::UpdateKernels::for_context(&s.ctx)?;
        for (i, c) in upd.iter().enumerate() {
            step(out.len() + vout.len() + i, &format!("{} update {} {}x{} a {}", c.0.name(), c.1.name(), c.2, c.3, if c.4 { "scalar" } else { "vector" }));
            let seed = 0x7570_6461_7465_0000 ^ (i as u64).wrapping_mul(0x9e37_79b9);
            updates.push(run_update_case(&s, &uk, c, seed).map_err(in_case)?);
        }
    }
    let rows_done = out.len() + vout.len() + updates.len();
    let batch_cases = if only.batch {
        crate::gpu::check_batch::run_cases(&s, quick, &mut |i, _, label| step(rows_done + i, label)).map_err(in_case)?
    } else {
        Vec::new()
    };
    let batch_done = rows_done + batch_cases.len();
    let projections = if only.project {
        crate::gpu::check_project::run_cases(&s, quick, &mut |i, _, label| step(batch_done + i, label)).map_err(in_case)?
    } else {
        Vec::new()
    };
    let failed = out.iter().filter(|c| !c.pass).count()
        + vout.iter().filter(|c| !c.pass).count()
        + updates.iter().filter(|c| !c.pass).count()
        + batch_cases.iter().filter(|c| !c.pass).count()
        + projections.iter().filter(|c| !c.pass).count();
    Ok(CheckReport {
        schema: SCHEMA.to_string(),
        device: s.kernels.info().clone(),
        image: s.kernels.image().clone(),
        bound_ulp: BOUND_ULP,
        families: only.names(),
        bounds: "forward: 1 ulp; dx: 1 ulp beyond 2^-16 (max|dx| + s (max|g| + C|g.x^|)) of its row; dweight/dbias: 1 ulp beyond 2^-18 sum|dy x^| (sum|dy|); variants: pure bitwise, e4m3 1 ulp; updates, batch and projections: see their tables".to_string(),
        total: out.len() + vout.len() + updates.len() + batch_cases.len() + projections.len(),
        failed,
        cases: out,
        variants: vout,
        updates,
        batch_cases,
        projections,
    })
}

/// The table: one line per case.
pub fn render(r: &CheckReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let d = &r.device;
    let _ = writeln!(
        s,
        "gpu-check on {} (device {}, sm_{}{}, {} SMs, driver {}), kernels {} ({}, NVRTC {}.{}, {})",
        d.name,
        d.ordinal,
        d.compute_capability.0,
        d.compute_capability.1,
        d.sm_count,
        d.driver_version,
        r.image.target,
        r.image.kind,
        r.image.nvrtc_version.0,
        r.image.nvrtc_version.1,
        r.image.origin
    );
    let _ = writeln!(s, "families checked: {}", r.families.join(", "));
    let _ = writeln!(s, "bounds: {}\n", r.bounds);
    let _ = writeln!(s, "{:<8} {:<5} {:>12} {:<6} {:<26} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8}  ok", "kind", "dtype", "shape", "affine", "forward kernel", "grid", "block", "y ulp", "dx ulp", "dw ulp", "db ulp");
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    for c in &r.cases {
        let _ = writeln!(
            s,
            "{:<8} {:<5} {:>12} {:<6} {:<26} {:>6} {:>6} {:>8.3} {:>8.3} {:>8} {:>8}  {}",
            c.kind,
            c.dtype,
            format!("{}x{}", c.rows, c.n),
            if c.affine { "w" } else { "-" },
            c.forward_kernel,
            c.grid,
            c.block,
            c.forward_ulp,
            c.dx_ulp,
            opt(c.dweight_ulp),
            opt(c.dbias_ulp),
            if c.pass { "ok" } else { "FAIL" }
        );
    }
    let _ = writeln!(s, "\nforward variants (pure: bits vs the CPU pure-half path and its counters; e4m3: ulp of E4M3 vs f64 x scale)");
    let _ = writeln!(s, "{:<7} {:<8} {:<5} {:>12} {:<6} {:>7} {:<30} {:>9} {:>10} {:<28}  ok", "variant", "kind", "dtype", "shape", "affine", "scale", "kernel", "e4m3 ulp", "mismatch", "counters gpu (in/ovf/out)");
    for c in &r.variants {
        let counters = c.counters_gpu.map_or("-".to_string(), |g| {
            format!("{}/{}/{}{}", g.nonfinite_in, g.acc_overflow, g.nonfinite_out, if c.counters_cpu == Some(g) { "" } else { " (cpu differs)" })
        });
        let _ = writeln!(
            s,
            "{:<7} {:<8} {:<5} {:>12} {:<6} {:>7} {:<30} {:>9} {:>10} {:<28}  {}",
            c.variant,
            c.kind,
            c.dtype,
            format!("{}x{}", c.rows, c.n),
            if c.affine { "w" } else { "-" },
            c.scale,
            c.kernel,
            opt(c.max_ulp),
            c.mismatches.map_or("-".to_string(), |m| m.to_string()),
            counters,
            if c.pass { "ok" } else { "FAIL" }
        );
    }
    s.push_str(&crate::gpu::check_updates::render_updates(&r.updates));
    s.push_str(&crate::gpu::check_batch::render(&r.batch_cases));
    s.push_str(&crate::gpu::check_project::render(&r.projections));
    let _ = writeln!(s, "\n{} of {} cases within {} ulp beyond their slack (or bitwise, pure)", r.total - r.failed, r.total, r.bound_ulp);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_select_their_cases_and_add_up() {
        for quick in [true, false] {
            let one = |f: fn(&mut Families)| {
                let mut only = Families::NONE;
                f(&mut only);
                total_cases(quick, only)
            };
            let parts = [
                one(|f| f.rows = true),
                one(|f| f.variants = true),
                one(|f| f.updates = true),
                one(|f| f.batch = true),
                one(|f| f.project = true),
            ];
            assert_eq!(parts[0], cases(quick).len());
            assert!(parts.iter().all(|&n| n > 0), "{parts:?}");
            assert_eq!(parts.iter().sum::<usize>(), total_cases(quick, Families::ALL));
            assert_eq!(total_cases(quick, Families::NONE), 0);
        }
        assert_eq!(Families::ALL.names(), ["rows", "variants", "updates", "batch", "project"]);
        assert_eq!(Families { batch: true, ..Families::NONE }.names(), ["batch"]);
    }

    #[test]
    fn variant_cases_cover_both_variants_dtypes_and_overflow_data() {
        let v = variant_cases(true);
        for variant in FwdVariant::ALL {
            for storage in Storage::ALL {
                assert!(v.iter().any(|c| c.0 == variant && c.2 == storage && c.4 > 1024), "{variant:?} {storage:?}: a block shape");
                assert!(v.iter().any(|c| c.0 == variant && c.2 == storage && c.4 <= 1024), "{variant:?} {storage:?}: a warp shape");
            }
        }
        // Pure cases at data scale 60 (fp16 sums of squares overflow), E4M3 at an output scale that saturates.
        assert!(v.iter().any(|c| c.0 == FwdVariant::Pure && c.6 == 60.0));
        assert!(v.iter().any(|c| c.0 == FwdVariant::E4M3 && c.6 == 100.0));
        // Top-k with k > n is skipped, as for the 16-bit cases.
        assert!(v.iter().all(|c| c.1.validate(c.4).is_ok()));
        assert_eq!(v.len(), 2 * cases(true).len());
    }
}
