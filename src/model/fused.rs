//! Fused elementwise layers, each one candle custom op with a one-pass backward.
//!
//! Why: composed from candle ops, `h + a (x - h)` is three graph nodes, and candle's backward
//! of every binary node computes both input gradients, allocates a zero tensor per gradient it
//! accumulates into, and reduces a broadcast vector's gradient with a strided index loop (two
//! integer divisions per element). A per-feature scale or LERP then costs ten or more passes
//! over the activations instead of two; fused, the forward is one pass and the backward one pass
//! that writes every input's gradient.
//!
//! - [`scale`]: `y = x * s`, `s` a vector along the last axis (per feature) or the first axis
//!   (per row of a matrix).
//! - [`lerp`]: `y = c_h * h + c_x * x` with per-feature coefficient vectors (nGPT's
//!   `h + a (x - h)` with `c_h = 1 - a`, `c_x = a`; anGPT's `nu(a) (h + a (x - h))`).
//! - [`swiglu`]: `u * SiLU(z)` on `[u | z]` (all three models; candle's `narrow` backward
//!   alone builds two zero-padded copies of the full `[.., 2r]` gradient).
//!
//! Each entry point ([`scale`], [`lerp`], [`swiglu`]) takes an [`OpPath`]: these custom ops
//! have only a `cpu_fwd`, so on another device (or with `OpPath::Composed`) the entry point runs
//! the same function composed from candle ops instead (`crate::model::composed`).
//!
//! Arithmetic: in f32 for f32/f16/bf16 tensors (f64 for f64), rounded once into the output
//! dtype. The vector gradients (`sum over rows of dy * x`) are accumulated in f32 (f64) over
//! fixed blocks of rows, added in block order, so they do not depend on the thread count.

use std::mem::MaybeUninit;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType};
use normlab_norms::Element;
use rayon::prelude::*;

use crate::model::composed;
use crate::ops::storage::{read, with_dtype};
use crate::ops::OpPath;

/// Rows per block of the vector-gradient reductions (the order of the f32 sums is fixed by it).
const ROW_BLOCK: usize = 64;

/// Along which axis the vector of [`scale`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Axis {
    /// `s[j]` multiplies `x[.., j]` (length = last dimension).
    Last,
    /// `s[i]` multiplies row `i` of a matrix `x[i, ..]` (length = first dimension).
    First,
}

/// `(rows, n)` of `x` viewed as a matrix whose rows run along the last dimension.
fn rows_n(layout: &Layout) -> Result<(usize, usize)> {
    let n = *layout.dims().last().ok_or_else(|| candle_core::Error::msg("fused op: scalar input"))?;
    if n == 0 {
        candle_core::bail!("fused op: empty last dimension in shape {:?}", layout.dims());
    }
    Ok((layout.shape().elem_count() / n, n))
}

fn check_dtypes(what: &str, a: DType, b: DType) -> Result<()> {
    if a != b {
        candle_core::bail!("{what}: dtypes {a:?} and {b:?} differ");
    }
    Ok(())
}

/// A vector of `len` elements written by `fill` without being zeroed first (an output of an op
/// that writes every element: zeroing would be one more pass, and fresh pages of the kernel).
fn filled<T>(len: usize, fill: impl FnOnce(&mut [MaybeUninit<T>])) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    fill(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: every caller's `fill` writes each of the `len` elements (the rows of the output
    // and the vector gradients, all of them); nothing was read before.
    unsafe { v.set_len(len) };
    v
}

/// Sum over rows of `f(row index, row)` (a vector of length `n`, accumulator type `A`), over
/// fixed blocks of `ROW_BLOCK` rows in parallel, the block sums added in block order.
fn column_sums<A>(rows: usize, n: usize, f: impl Fn(usize, &mut [A]) + Sync) -> Vec<A>
where
    A: Copy + Default + Send + std::ops::AddAssign,
{
    let blocks: Vec<Vec<A>> = (0..rows.div_ceil(ROW_BLOCK))
        .into_par_iter()
        .map(|b| {
            let mut acc = vec![A::default(); n];
            for r in b * ROW_BLOCK..((b + 1) * ROW_BLOCK).min(rows) {
                f(r, &mut acc);
            }
            acc
        })
        .collect();
    let mut out = vec![A::default(); n];
    for b in blocks {
        for (o, v) in out.iter_mut().zip(b) {
            *o += v;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// scale

struct Scale {
    axis: Axis,
}

struct ScaleBwd {
    axis: Axis,
    want_ds: bool,
}

fn check_scale(axis: Axis, rows: usize, n: usize, s_len: usize) -> Result<()> {
    let want = match axis {
        Axis::Last => n,
        Axis::First => rows,
    };
    if s_len != want {
        candle_core::bail!("scale: vector of length {s_len} along {axis:?} of a [{rows}, {n}] tensor (expected {want})");
    }
    Ok(())
}

macro_rules! scale_kernels {
    ($acc:ty, $to:ident, $from:ident) => {
        /// One output row: `yr[j] = xr[j] * s_j` (`s_j = s[j]` along `Last`, `s[r]` along `First`).
        #[inline(always)]
        fn row<T: Element>(axis: Axis, r: usize, xr: &[T], s: &[T], yr: &mut [MaybeUninit<T>]) {
            match axis {
                Axis::Last => {
                    for ((o, &v), &c) in yr.iter_mut().zip(xr).zip(s) {
                        o.write(T::$from(v.$to() * c.$to()));
                    }
                }
                Axis::First => {
                    let c = s[r].$to();
                    for (o, &v) in yr.iter_mut().zip(xr) {
                        o.write(T::$from(v.$to() * c));
                    }
                }
            }
        }

        pub(super) fn fwd<T: Element>(axis: Axis, x: &[T], s: &[T], n: usize) -> Vec<T> {
            filled(x.len(), |y| {
                y.par_chunks_mut(n).zip(x.par_chunks(n)).enumerate().for_each(|(r, (yr, xr))| row(axis, r, xr, s, yr));
            })
        }

        /// `[dx (rows * n) | ds (s.len(), when wanted)]`.
        pub(super) fn bwd<T: Element>(axis: Axis, want_ds: bool, x: &[T], s: &[T], dy: &[T], rows: usize, n: usize) -> Vec<T> {
            let ds_len = if want_ds { s.len() } else { 0 };
            filled(rows * n + ds_len, |out| {
                let (dx, ds) = out.split_at_mut(rows * n);
                dx.par_chunks_mut(n).zip(dy.par_chunks(n)).enumerate().for_each(|(r, (dxr, gr))| row(axis, r, gr, s, dxr));
                if !want_ds {
                    return;
                }
                match axis {
                    Axis::Last => {
                        let sums = column_sums::<$acc>(rows, n, |r, acc| {
                            let (xr, gr) = (&x[r * n..(r + 1) * n], &dy[r * n..(r + 1) * n]);
                            for ((a, &v), &g) in acc.iter_mut().zip(xr).zip(gr) {
                                *a += g.$to() * v.$to();
                            }
                        });
                        for (o, v) in ds.iter_mut().zip(sums) {
                            o.write(T::$from(v));
                        }
                    }
                    Axis::First => {
                        ds.par_iter_mut().enumerate().for_each(|(r, o)| {
                            let (xr, gr) = (&x[r * n..(r + 1) * n], &dy[r * n..(r + 1) * n]);
                            let mut a: $acc = 0.0;
                            for (&v, &g) in xr.iter().zip(gr) {
                                a += g.$to() * v.$to();
                            }
                            o.write(T::$from(a));
                        });
                    }
                }
            })
        }
    };
}

mod scale32 {
    use super::*;
    scale_kernels!(f32, to_f32, from_f32);
}
mod scale64 {
    use super::*;
    scale_kernels!(f64, to_f64, from_f64);
}

impl CustomOp2 for Scale {
    fn name(&self) -> &'static str {
        "normlab-scale"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout, ss: &CpuStorage, sl: &Layout) -> Result<(CpuStorage, Shape)> {
        check_dtypes("scale", xs.dtype(), ss.dtype())?;
        let (rows, n) = rows_n(xl)?;
        check_scale(self.axis, rows, n, sl.shape().elem_count())?;
        let out = with_dtype!(xs.dtype(), T => {
            let x = read::<T>("input", xs, xl)?;
            let s = read::<T>("scale", ss, sl)?;
            let y = if xs.dtype() == DType::F64 { scale64::fwd::<T>(self.axis, &x, &s, n) } else { scale32::fwd::<T>(self.axis, &x, &s, n) };
            Ok::<_, candle_core::Error>(T::to_cpu_storage_owned(y))
        })?;
        Ok((out, xl.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, s: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let want_ds = s.track_op();
        let packed = x.apply_op3_no_bwd(s, dy, &ScaleBwd { axis: self.axis, want_ds })?;
        let len = x.elem_count();
        let dx = packed.narrow(0, 0, len)?.reshape(x.shape())?;
        let ds = if want_ds { Some(packed.narrow(0, len, s.elem_count())?.reshape(s.shape())?) } else { None };
        Ok((Some(dx), ds))
    }
}

impl CustomOp3 for ScaleBwd {
    fn name(&self) -> &'static str {
        "normlab-scale-bwd"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout, ss: &CpuStorage, sl: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        check_dtypes("scale backward", xs.dtype(), gs.dtype())?;
        let (rows, n) = rows_n(xl)?;
        let s_len = sl.shape().elem_count();
        let out = with_dtype!(xs.dtype(), T => {
            let x = read::<T>("input", xs, xl)?;
            let s = read::<T>("scale", ss, sl)?;
            let g = read::<T>("output gradient", gs, gl)?;
            let v = if xs.dtype() == DType::F64 {
                scale64::bwd::<T>(self.axis, self.want_ds, &x, &s, &g, rows, n)
            } else {
                scale32::bwd::<T>(self.axis, self.want_ds, &x, &s, &g, rows, n)
            };
            Ok::<_, candle_core::Error>(T::to_cpu_storage_owned(v))
        })?;
        Ok((out, Shape::from(rows * n + if self.want_ds { s_len } else { 0 })))
    }
}

/// `y = x * s` with `s` (1-D, x's dtype) along `axis`: per feature (`Last`, length = last
/// dimension) or per row (`First`, x 2-D, length = rows). Gradients for x and, when it tracks
/// them, s. The fused op, or its composed form where `ops` says so (`composed::scale`).
pub(crate) fn scale(x: &Tensor, s: &Tensor, axis: Axis, ops: OpPath) -> Result<Tensor> {
    if axis == Axis::First && x.rank() != 2 {
        candle_core::bail!("scale along the first axis needs a matrix, got shape {:?}", x.dims());
    }
    if ops.composed_on(&x.device().location()) {
        let (rows, n) = rows_n(x.layout())?;
        check_dtypes("scale", x.dtype(), s.dtype())?;
        check_scale(axis, rows, n, s.elem_count())?;
        return composed::scale(x, s, axis);
    }
    x.apply_op2(s, Scale { axis })
}

// ---------------------------------------------------------------------------------------------
// lerp

struct Lerp;

struct LerpBwd {
    /// `[c_h | c_x]`, exactly (every dtype widens exactly to f64).
    c: Vec<f64>,
    want_dc: bool,
}

macro_rules! lerp_kernels {
    ($acc:ty, $to:ident, $from:ident) => {
        /// `c` is `[c_h (n) | c_x (n)]`.
        pub(super) fn fwd<T: Element>(h: &[T], x: &[T], c: &[T], n: usize) -> Vec<T> {
            let ch: Vec<$acc> = c[..n].iter().map(|v| v.$to()).collect();
            let cx: Vec<$acc> = c[n..].iter().map(|v| v.$to()).collect();
            filled(h.len(), |y| {
                y.par_chunks_mut(n).zip(h.par_chunks(n).zip(x.par_chunks(n))).for_each(|(yr, (hr, xr))| {
                    for j in 0..n {
                        yr[j].write(T::$from(ch[j] * hr[j].$to() + cx[j] * xr[j].$to()));
                    }
                });
            })
        }

        /// `[dh (rows n) | dx (rows n) | dc_h (n) | dc_x (n), when wanted]`; `c` = `[c_h | c_x]`.
        pub(super) fn bwd<T: Element>(want_dc: bool, h: &[T], x: &[T], c: &[f64], dy: &[T], n: usize) -> Vec<T> {
            let len = h.len();
            let rows = len / n;
            let c: Vec<$acc> = c.iter().map(|&v| v as $acc).collect();
            let (ch, cx) = c.split_at(n);
            filled(2 * len + if want_dc { 2 * n } else { 0 }, |out| {
                let (dh, rest) = out.split_at_mut(len);
                let (dx, dc) = rest.split_at_mut(len);
                dh.par_chunks_mut(n).zip(dx.par_chunks_mut(n)).zip(dy.par_chunks(n)).for_each(|((dhr, dxr), gr)| {
                    for j in 0..n {
                        let g = gr[j].$to();
                        dhr[j].write(T::$from(g * ch[j]));
                        dxr[j].write(T::$from(g * cx[j]));
                    }
                });
                if want_dc {
                    let sums = column_sums::<$acc>(rows, 2 * n, |r, acc| {
                        let (hr, xr, gr) = (&h[r * n..(r + 1) * n], &x[r * n..(r + 1) * n], &dy[r * n..(r + 1) * n]);
                        let (ah, ax) = acc.split_at_mut(n);
                        for j in 0..n {
                            let g = gr[j].$to();
                            ah[j] += g * hr[j].$to();
                            ax[j] += g * xr[j].$to();
                        }
                    });
                    for (o, v) in dc.iter_mut().zip(sums) {
                        o.write(T::$from(v));
                    }
                }
            })
        }
    };
}

mod lerp32 {
    use super::*;
    lerp_kernels!(f32, to_f32, from_f32);
}
mod lerp64 {
    use super::*;
    lerp_kernels!(f64, to_f64, from_f64);
}

fn check_lerp(hl: &Layout, xl: &Layout, cl: &Layout) -> Result<usize> {
    if hl.dims() != xl.dims() {
        candle_core::bail!("lerp: shapes {:?} and {:?} differ", hl.dims(), xl.dims());
    }
    let (_, n) = rows_n(hl)?;
    if cl.dims() != [2, n] {
        candle_core::bail!("lerp: coefficients of shape {:?}, expected [2, {n}]", cl.dims());
    }
    Ok(n)
}

impl CustomOp3 for Lerp {
    fn name(&self) -> &'static str {
        "normlab-lerp"
    }

    fn cpu_fwd(&self, hs: &CpuStorage, hl: &Layout, xs: &CpuStorage, xl: &Layout, cs: &CpuStorage, cl: &Layout) -> Result<(CpuStorage, Shape)> {
        check_dtypes("lerp", hs.dtype(), xs.dtype())?;
        check_dtypes("lerp", hs.dtype(), cs.dtype())?;
        let n = check_lerp(hl, xl, cl)?;
        let out = with_dtype!(hs.dtype(), T => {
            let h = read::<T>("h", hs, hl)?;
            let x = read::<T>("x", xs, xl)?;
            let c = read::<T>("coefficients", cs, cl)?;
            let y = if hs.dtype() == DType::F64 { lerp64::fwd::<T>(&h, &x, &c, n) } else { lerp32::fwd::<T>(&h, &x, &c, n) };
            Ok::<_, candle_core::Error>(T::to_cpu_storage_owned(y))
        })?;
        Ok((out, hl.shape().clone()))
    }

    fn bwd(&self, h: &Tensor, x: &Tensor, c: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let want_dc = c.track_op();
        let cv = c.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        let packed = h.apply_op3_no_bwd(x, dy, &LerpBwd { c: cv, want_dc })?;
        let len = h.elem_count();
        let dh = packed.narrow(0, 0, len)?.reshape(h.shape())?;
        let dx = packed.narrow(0, len, len)?.reshape(x.shape())?;
        let dc = if want_dc { Some(packed.narrow(0, 2 * len, c.elem_count())?.reshape(c.shape())?) } else { None };
        Ok((Some(dh), Some(dx), dc))
    }
}

impl CustomOp3 for LerpBwd {
    fn name(&self) -> &'static str {
        "normlab-lerp-bwd"
    }

    /// Arguments: h, x, dy (same shape).
    fn cpu_fwd(&self, hs: &CpuStorage, hl: &Layout, xs: &CpuStorage, xl: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        check_dtypes("lerp backward", hs.dtype(), gs.dtype())?;
        check_dtypes("lerp backward", hs.dtype(), xs.dtype())?;
        let (_, n) = rows_n(hl)?;
        let len = hl.shape().elem_count();
        if xl.dims() != hl.dims() || gl.dims() != hl.dims() || self.c.len() != 2 * n {
            candle_core::bail!("lerp backward: shapes {:?}, {:?}, {:?} with {} coefficients", hl.dims(), xl.dims(), gl.dims(), self.c.len());
        }
        let out = with_dtype!(hs.dtype(), T => {
            let h = read::<T>("h", hs, hl)?;
            let x = read::<T>("x", xs, xl)?;
            let g = read::<T>("output gradient", gs, gl)?;
            let v = if hs.dtype() == DType::F64 { lerp64::bwd::<T>(self.want_dc, &h, &x, &self.c, &g, n) } else { lerp32::bwd::<T>(self.want_dc, &h, &x, &self.c, &g, n) };
            Ok::<_, candle_core::Error>(T::to_cpu_storage_owned(v))
        })?;
        Ok((out, Shape::from(2 * len + if self.want_dc { 2 * n } else { 0 })))
    }
}

/// `y = c_h * h + c_x * x` over the last dimension: `h`, `x` of the same shape, `c_h`, `c_x`
/// 1-D of the last dimension's size; all one dtype. Gradients for all four. The fused op, or
/// its composed form where `ops` says so (`composed::lerp`).
pub(crate) fn lerp(h: &Tensor, x: &Tensor, c_h: &Tensor, c_x: &Tensor, ops: OpPath) -> Result<Tensor> {
    let c = Tensor::stack(&[c_h, c_x], 0)?;
    if ops.composed_on(&h.device().location()) {
        check_dtypes("lerp", h.dtype(), x.dtype())?;
        check_dtypes("lerp", h.dtype(), c.dtype())?;
        check_lerp(h.layout(), x.layout(), c.layout())?;
        return composed::lerp(h, x, c_h, c_x);
    }
    h.apply_op3(x, &c, Lerp)
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

/// `y = u * SiLU(z)` on `uz = [u | z]` (last dimension `2r`).
struct SwiGlu;

struct SwiGluBwd;

macro_rules! swiglu_kernels {
    ($acc:ty, $to:ident, $from:ident) => {
        #[inline(always)]
        fn sigmoid(z: $acc) -> $acc {
            1.0 / (1.0 + (-z).exp())
        }

        /// `uz` rows of `2r`: output rows of `r`.
        pub(super) fn fwd<T: Element>(uz: &[T], r: usize) -> Vec<T> {
            let rows = uz.len() / (2 * r);
            filled(rows * r, |y| {
                y.par_chunks_mut(r).zip(uz.par_chunks(2 * r)).for_each(|(yr, ur)| {
                    let (u, z) = ur.split_at(r);
                    for j in 0..r {
                        let zj = z[j].$to();
                        yr[j].write(T::$from(u[j].$to() * (zj * sigmoid(zj))));
                    }
                });
            })
        }

        /// `duz` (rows of `2r`): `du = dy SiLU(z)`, `dz = dy u SiLU'(z)`,
        /// `SiLU'(z) = s (1 + z (1 - s))`, `s = sigmoid(z)`.
        pub(super) fn bwd<T: Element>(uz: &[T], dy: &[T], r: usize) -> Vec<T> {
            filled(uz.len(), |out| {
                out.par_chunks_mut(2 * r).zip(uz.par_chunks(2 * r).zip(dy.par_chunks(r))).for_each(|(dr, (ur, gr))| {
                    let (du, dz) = dr.split_at_mut(r);
                    let (u, z) = ur.split_at(r);
                    for j in 0..r {
                        let (uj, zj, g) = (u[j].$to(), z[j].$to(), gr[j].$to());
                        let sg = sigmoid(zj);
                        du[j].write(T::$from(g * (zj * sg)));
                        dz[j].write(T::$from(g * uj * (sg * (1.0 + zj * (1.0 - sg)))));
                    }
                });
            })
        }
    };
}

mod swiglu32 {
    use super::*;
    swiglu_kernels!(f32, to_f32, from_f32);
}
mod swiglu64 {
    use super::*;
    swiglu_kernels!(f64, to_f64, from_f64);
}

/// `r` of a SwiGLU input layout `[.., 2r]`.
fn swiglu_r(l: &Layout) -> Result<usize> {
    let (_, two_r) = rows_n(l)?;
    if two_r % 2 != 0 {
        candle_core::bail!("swiglu: the last dimension {two_r} of {:?} is odd", l.dims());
    }
    Ok(two_r / 2)
}

impl candle_core::CustomOp1 for SwiGlu {
    fn name(&self) -> &'static str {
        "normlab-swiglu"
    }

    fn cpu_fwd(&self, us: &CpuStorage, ul: &Layout) -> Result<(CpuStorage, Shape)> {
        let r = swiglu_r(ul)?;
        let out = with_dtype!(us.dtype(), T => {
            let x = read::<T>("input", us, ul)?;
            let y = if us.dtype() == DType::F64 { swiglu64::fwd::<T>(&x, r) } else { swiglu32::fwd::<T>(&x, r) };
            Ok::<_, candle_core::Error>(T::to_cpu_storage_owned(y))
        })?;
        let mut dims = ul.dims().to_vec();
        *dims.last_mut().expect("rank >= 1") = r;
        Ok((out, Shape::from(dims)))
    }

    fn bwd(&self, uz: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(uz.apply_op2_no_bwd(dy, &SwiGluBwd)?.reshape(uz.shape())?))
    }
}

impl CustomOp2 for SwiGluBwd {
    fn name(&self) -> &'static str {
        "normlab-swiglu-bwd"
    }

    /// Arguments: uz `[.., 2r]`, dy `[.., r]`.
    fn cpu_fwd(&self, us: &CpuStorage, ul: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        check_dtypes("swiglu backward", us.dtype(), gs.dtype())?;
        let r = swiglu_r(ul)?;
        if 2 * gl.shape().elem_count() != ul.shape().elem_count() {
            candle_core::bail!("swiglu backward: gradient {:?} for input {:?}", gl.dims(), ul.dims());
        }
        let out = with_dtype!(us.dtype(), T => {
            let uz = read::<T>("input", us, ul)?;
            let g = read::<T>("output gradient", gs, gl)?;
            let v = if us.dtype() == DType::F64 { swiglu64::bwd::<T>(&uz, &g, r) } else { swiglu32::bwd::<T>(&uz, &g, r) };
            Ok::<_, candle_core::Error>(T::to_cpu_storage_owned(v))
        })?;
        Ok((out, ul.shape().clone()))
    }
}

/// SwiGLU on `uz = [u | z]` (last dimension `2r`, NVIDIA/ngpt's `c_fc` layout: u first, the
/// gate z second): `u * SiLU(z)`, computed in f32 (f64) and rounded once. The fused op, or its
/// composed form where `ops` says so (`composed::swiglu`).
pub(crate) fn swiglu(uz: &Tensor, ops: OpPath) -> Result<Tensor> {
    if ops.composed_on(&uz.device().location()) {
        swiglu_r(uz.layout())?;
        return composed::swiglu(uz);
    }
    uz.apply_op1(SwiGlu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn vals(t: &Tensor) -> Vec<f64> {
        t.flatten_all().unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap()
    }

    fn var(v: Vec<f64>, shape: &[usize], dt: DType) -> Var {
        Var::from_tensor(&Tensor::from_vec(v, shape, &Device::Cpu).unwrap().to_dtype(dt).unwrap()).unwrap()
    }

    fn wave(n: usize, a: f64, b: f64) -> Vec<f64> {
        (0..n).map(|i| (a * i as f64 + b).sin()).collect()
    }

    /// The fused ops against the same function composed from candle ops: values and every
    /// gradient, f64 (to rounding) and f32 (to a few ulp), with a strided input.
    #[test]
    fn fused_ops_match_candle_compositions() {
        let (b, t, n) = (3, 70, 5); // 210 rows: more than one ROW_BLOCK, not a multiple of it
        for dt in [DType::F64, DType::F32] {
            let tol = if dt == DType::F64 { 1e-12 } else { 2e-5 };
            let close = |a: &[f64], b: &[f64], what: &str| {
                assert_eq!(a.len(), b.len(), "{what}");
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{dt:?} {what}[{i}]: {x} vs {y}");
                }
            };
            let h = var(wave(b * t * n, 0.37, 0.1), &[b, t, n], dt);
            let x = var(wave(b * t * n, 0.71, 0.5), &[b, t, n], dt);
            let ch = var(wave(n, 1.3, 0.2), &[n], dt);
            let cx = var(wave(n, 0.9, 1.1), &[n], dt);
            let w = Tensor::from_vec(wave(b * t * n, 0.13, 0.7), (b, t, n), &Device::Cpu).unwrap().to_dtype(dt).unwrap();

            let fused = lerp(&h, &x, &ch, &cx, OpPath::Fused).unwrap();
            let plain = (h.broadcast_mul(&ch).unwrap() + x.broadcast_mul(&cx).unwrap()).unwrap();
            close(&vals(&fused), &vals(&plain), "lerp");
            let gf = (fused * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let gp = (plain * &w).unwrap().sum_all().unwrap().backward().unwrap();
            for (name, v) in [("dh", &h), ("dx", &x), ("dc_h", &ch), ("dc_x", &cx)] {
                close(&vals(gf.get(v).unwrap()), &vals(gp.get(v).unwrap()), name);
            }

            // SwiGLU against candle's narrow / silu / mul.
            let uz = var(wave(b * t * 2 * n, 0.43, 0.3).iter().map(|v| 3.0 * v).collect(), &[b, t, 2 * n], dt);
            let fused = swiglu(&uz, OpPath::Fused).unwrap();
            let plain = (uz.narrow(2, 0, n).unwrap() * uz.narrow(2, n, n).unwrap().silu().unwrap()).unwrap();
            close(&vals(&fused), &vals(&plain), "swiglu");
            let gf = (fused * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let gp = (plain * &w).unwrap().sum_all().unwrap().backward().unwrap();
            close(&vals(gf.get(&uz).unwrap()), &vals(gp.get(&uz).unwrap()), "swiglu duz");

            // Per feature, on a strided (transposed) input.
            let m = var(wave(n * 7, 0.5, 0.3), &[n, 7], dt);
            let mt = m.t().unwrap();
            let s = var(wave(n, 2.1, 0.4), &[n], dt);
            let w2 = Tensor::from_vec(wave(7 * n, 0.29, 0.0), (7, n), &Device::Cpu).unwrap().to_dtype(dt).unwrap();
            let fused = scale(&mt, &s, Axis::Last, OpPath::Fused).unwrap();
            let plain = mt.broadcast_mul(&s).unwrap();
            close(&vals(&fused), &vals(&plain), "scale last");
            let gf = (fused * &w2).unwrap().sum_all().unwrap().backward().unwrap();
            let gp = (plain * &w2).unwrap().sum_all().unwrap().backward().unwrap();
            close(&vals(gf.get(&m).unwrap()), &vals(gp.get(&m).unwrap()), "scale last dx");
            close(&vals(gf.get(&s).unwrap()), &vals(gp.get(&s).unwrap()), "scale last ds");

            // Per row.
            let r = var(wave(7, 1.7, 0.9), &[7], dt);
            let fused = scale(&mt, &r, Axis::First, OpPath::Fused).unwrap();
            let plain = mt.broadcast_mul(&r.reshape((7, 1)).unwrap()).unwrap();
            close(&vals(&fused), &vals(&plain), "scale first");
            let gf = (fused * &w2).unwrap().sum_all().unwrap().backward().unwrap();
            let gp = (plain * &w2).unwrap().sum_all().unwrap().backward().unwrap();
            close(&vals(gf.get(&m).unwrap()), &vals(gp.get(&m).unwrap()), "scale first dx");
            close(&vals(gf.get(&r).unwrap()), &vals(gp.get(&r).unwrap()), "scale first ds");
        }
    }

    /// Half precision: computed in f32 and rounded once (so exactly the f32 result, rounded).
    #[test]
    fn half_dtypes_round_once() {
        let n = 6;
        for dt in [DType::BF16, DType::F16] {
            let h = var(wave(4 * n, 0.37, 0.1), &[4, n], dt);
            let x = var(wave(4 * n, 0.71, 0.5), &[4, n], dt);
            let ch = var(wave(n, 1.3, 0.2), &[n], dt);
            let cx = var(wave(n, 0.9, 1.1), &[n], dt);
            let y = vals(&lerp(&h, &x, &ch, &cx, OpPath::Fused).unwrap());
            let (hv, xv, chv, cxv) = (vals(&h), vals(&x), vals(&ch), vals(&cx));
            for i in 0..4 * n {
                let j = i % n;
                let f = (chv[j] as f32) * (hv[i] as f32) + (cxv[j] as f32) * (xv[i] as f32);
                let want = Tensor::new(&[f], &Device::Cpu).unwrap().to_dtype(dt).unwrap().to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap()[0];
                assert_eq!(y[i], want, "{dt:?} [{i}]");
            }
        }
    }

    /// Both paths refuse the same bad arguments with the same messages.
    #[test]
    fn bad_shapes_are_errors() {
        let d = Device::Cpu;
        let x = Tensor::zeros((3, 4), DType::F32, &d).unwrap();
        for ops in [OpPath::Fused, OpPath::Composed] {
            assert!(scale(&x, &Tensor::zeros(3, DType::F32, &d).unwrap(), Axis::Last, ops).unwrap_err().to_string().contains("length 3"), "{ops:?}");
            assert!(scale(&x, &Tensor::zeros(4, DType::F32, &d).unwrap(), Axis::First, ops).is_err(), "{ops:?}");
            assert!(scale(&x, &Tensor::zeros(4, DType::F64, &d).unwrap(), Axis::Last, ops).unwrap_err().to_string().contains("F64"), "{ops:?}");
            let c = Tensor::zeros(4, DType::F32, &d).unwrap();
            assert!(lerp(&x, &Tensor::zeros((4, 3), DType::F32, &d).unwrap(), &c, &c, ops).is_err(), "{ops:?}");
            assert!(lerp(&x, &x, &Tensor::zeros(3, DType::F32, &d).unwrap(), &Tensor::zeros(3, DType::F32, &d).unwrap(), ops).is_err(), "{ops:?}");
            assert!(swiglu(&Tensor::zeros((2, 3), DType::F32, &d).unwrap(), ops).unwrap_err().to_string().contains("odd"), "{ops:?}");
        }
    }
}
