//! Bounded weight normalisation ("Norm matters", Hoffer et al. 2018; algorithms.md 3.4).
//!
//! Every output channel (row `c` of an `(out, in)` matrix) is `w_c = rho_c v_c / ||v_c||_p`:
//!
//! - [`BoundedWeightNorm`]: one scalar `rho` fixed at initialisation, no learned gain. `rho` is the
//!   paper's `||V_0||_F / sqrt(N_out)` (the RMS channel norm, [`RhoInit::PaperFrobenius`]), the
//!   convNet code's mean channel Lp norm (`mean_c ||V_0[c]||_p`, [`RhoInit::MeanLineNorm`]), or given.
//! - [`GainPinnedWeightNorm`] (norm_matters `bwn.py`): learnable gains `g_c` (initialised to
//!   `||V_0[c]||_p`, so `W(0) = V_0`) whose L2 norm is pinned: `rho_c = pre g_c / ||g||_2`,
//!   `pre = ||g_0||_2`.
//!
//! Gradients (n_c = ||v_c||_p, `grad n` the Lp (sub)gradient of [`LpNorm`]):
//!
//! - `dL/dv_c = (rho_c / n_c) (dw_c - (dw_c . v_c / n_c) grad n_c)`;
//! - `dL/drho_c = dw_c . v_c / n_c`;
//! - gain-pinned: `dL/dg_k = (pre/G) (drho_k - g_k (sum_c drho_c g_c) / G^2)`, `G = ||g||_2`.
//!
//! Math in f64 over exactly widened storage values, one rounding into each output.

use rayon::prelude::*;

use crate::element::Element;
use crate::error::{NormError, Result};
use crate::weight::lines::MatShape;
use crate::weight::lp::LpNorm;

/// How `rho` is fixed at initialisation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum RhoInit {
    /// `||V_0||_F / sqrt(N_out)` (the paper).
    PaperFrobenius,
    /// `mean_c ||V_0[c]||_p` (convNet.pytorch `bwn.py`, version 1).
    MeanLineNorm,
    /// A given value (> 0).
    Given(f64),
}

fn widen<T: Element>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.to_f64()).collect()
}

fn row_norms(v: &[f64], shape: MatShape, p: LpNorm) -> Result<Vec<f64>> {
    v.chunks(shape.inp)
        .enumerate()
        .map(|(c, row)| {
            let n = p.norm(row);
            if n > 0.0 && n.is_finite() {
                Ok(n)
            } else {
                Err(NormError::Shape(format!("row {c} of the direction parameter v has ||v_c||_{} = {n}: bounded weight norm needs finite, non-zero rows", p.p())))
            }
        })
        .collect()
}

/// `w_c = rho_c v_c / n_c` for every row, one rounding into `w`.
fn forward_rows<T: Element>(v: &[f64], n: &[f64], rho: &(dyn Fn(usize) -> f64 + Sync), shape: MatShape, w: &mut [T]) {
    w.par_chunks_mut(shape.inp).enumerate().for_each(|(c, wr)| {
        let k = rho(c) / n[c];
        for (o, x) in wr.iter_mut().zip(&v[c * shape.inp..(c + 1) * shape.inp]) {
            *o = T::from_f64(k * x);
        }
    });
}

/// `dv` per row (rounded once into `dv`) and `drho_c` (returned, f64).
fn backward_rows<T: Element>(v: &[f64], n: &[f64], rho: &(dyn Fn(usize) -> f64 + Sync), p: LpNorm, shape: MatShape, dw: &[T], dv: &mut [T]) -> Vec<f64> {
    dv.par_chunks_mut(shape.inp)
        .enumerate()
        .map(|(c, dvr)| {
            let vr = &v[c * shape.inp..(c + 1) * shape.inp];
            let g: Vec<f64> = dw[c * shape.inp..(c + 1) * shape.inp].iter().map(|x| x.to_f64()).collect();
            let gv: f64 = g.iter().zip(vr).map(|(a, b)| a * b).sum();
            let k = rho(c) / n[c];
            let mut acc: Vec<f64> = g.iter().map(|x| k * x).collect();
            p.add_grad(vr, n[c], -k * gv / n[c], &mut acc);
            for (o, a) in dvr.iter_mut().zip(&acc) {
                *o = T::from_f64(*a);
            }
            gv / n[c]
        })
        .collect()
}

/// Bounded weight normalisation with a scalar `rho` fixed at initialisation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BoundedWeightNorm {
    pub out: usize,
    pub inp: usize,
    pub p: LpNorm,
    pub rho: f64,
}

impl BoundedWeightNorm {
    /// Fixes `rho` from the initial weights `v0` (`(out, in)` row-major).
    pub fn init<T: Element>(v0: &[T], shape: MatShape, p: LpNorm, rho: RhoInit) -> Result<Self> {
        shape.check("initial weights V_0", v0.len())?;
        let v = widen(v0);
        let rho = match rho {
            RhoInit::PaperFrobenius => (v.iter().map(|x| x * x).sum::<f64>() / shape.out as f64).sqrt(),
            RhoInit::MeanLineNorm => v.chunks(shape.inp).map(|r| p.norm(r)).sum::<f64>() / shape.out as f64,
            RhoInit::Given(r) => r,
        };
        if !(rho.is_finite() && rho > 0.0) {
            return Err(NormError::OutOfRange { what: "bounded weight norm rho", range: "finite values > 0", value: rho });
        }
        Ok(BoundedWeightNorm { out: shape.out, inp: shape.inp, p, rho })
    }

    pub fn shape(&self) -> MatShape {
        MatShape::new(self.out, self.inp)
    }

    /// `w = rho v_c / ||v_c||_p` per row.
    pub fn forward<T: Element>(&self, v: &[T], w: &mut [T]) -> Result<()> {
        let s = self.shape();
        s.check("direction parameter v", v.len())?;
        s.check("output weights w", w.len())?;
        let vf = widen(v);
        let n = row_norms(&vf, s, self.p)?;
        forward_rows(&vf, &n, &|_| self.rho, s, w);
        Ok(())
    }

    /// `dv` from `dw` (rho is a constant).
    pub fn backward<T: Element>(&self, v: &[T], dw: &[T], dv: &mut [T]) -> Result<()> {
        let s = self.shape();
        s.check("direction parameter v", v.len())?;
        s.check("weight gradient dw", dw.len())?;
        s.check("direction gradient dv", dv.len())?;
        let vf = widen(v);
        let n = row_norms(&vf, s, self.p)?;
        backward_rows(&vf, &n, &|_| self.rho, self.p, s, dw, dv);
        Ok(())
    }
}

/// Bounded weight normalisation with learnable per-channel gains of pinned L2 norm.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GainPinnedWeightNorm {
    pub out: usize,
    pub inp: usize,
    pub p: LpNorm,
    /// `||g_0||_2`.
    pub pre: f64,
}

impl GainPinnedWeightNorm {
    /// Returns the module and the initial gains `g_0[c] = ||V_0[c]||_p` (so `W(0) = V_0`).
    pub fn init<T: Element>(v0: &[T], shape: MatShape, p: LpNorm) -> Result<(Self, Vec<T>)> {
        shape.check("initial weights V_0", v0.len())?;
        let v = widen(v0);
        let g = row_norms(&v, shape, p)?;
        let pre = g.iter().map(|x| x * x).sum::<f64>().sqrt();
        Ok((GainPinnedWeightNorm { out: shape.out, inp: shape.inp, p, pre }, g.iter().map(|x| T::from_f64(*x)).collect()))
    }

    pub fn shape(&self) -> MatShape {
        MatShape::new(self.out, self.inp)
    }

    fn gains<T: Element>(&self, g: &[T]) -> Result<(Vec<f64>, f64)> {
        if g.len() != self.out {
            return Err(NormError::Length { what: "gains g", expected: self.out, got: g.len() });
        }
        let gf = widen(g);
        let gn = gf.iter().map(|x| x * x).sum::<f64>().sqrt();
        if !(gn > 0.0 && gn.is_finite()) {
            return Err(NormError::OutOfRange { what: "||g||_2 of the gains", range: "finite values > 0", value: gn });
        }
        Ok((gf, gn))
    }

    /// `w_c = v_c (pre / ||g||_2) g_c / ||v_c||_p`.
    pub fn forward<T: Element>(&self, v: &[T], g: &[T], w: &mut [T]) -> Result<()> {
        let s = self.shape();
        s.check("direction parameter v", v.len())?;
        s.check("output weights w", w.len())?;
        let (gf, gn) = self.gains(g)?;
        let vf = widen(v);
        let n = row_norms(&vf, s, self.p)?;
        let k = self.pre / gn;
        forward_rows(&vf, &n, &|c| k * gf[c], s, w);
        Ok(())
    }

    /// `dv` and `dg` from `dw`.
    pub fn backward<T: Element>(&self, v: &[T], g: &[T], dw: &[T], dv: &mut [T], dg: &mut [T]) -> Result<()> {
        let s = self.shape();
        s.check("direction parameter v", v.len())?;
        s.check("weight gradient dw", dw.len())?;
        s.check("direction gradient dv", dv.len())?;
        if dg.len() != self.out {
            return Err(NormError::Length { what: "gain gradient dg", expected: self.out, got: dg.len() });
        }
        let (gf, gn) = self.gains(g)?;
        let vf = widen(v);
        let n = row_norms(&vf, s, self.p)?;
        let k = self.pre / gn;
        let drho = backward_rows(&vf, &n, &|c| k * gf[c], self.p, s, dw, dv);
        let dot: f64 = drho.iter().zip(&gf).map(|(a, b)| a * b).sum();
        for (o, (dr, gk)) in dg.iter_mut().zip(drho.iter().zip(&gf)) {
            *o = T::from_f64(k * (dr - gk * dot / (gn * gn)));
        }
        Ok(())
    }
}
