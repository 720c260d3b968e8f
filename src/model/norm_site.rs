//! One norm site of a model: the configured [`NormChoice`] scaled to the site's target magnitude.
//!
//! Every site has a target the architecture's own exact norm produces:
//!
//! - [`Target::Rms`] (GPT+'s RMSNorm): `rms(y) = 1`, i.e. `||y|| = sqrt(n)`;
//! - [`Target::Unit`] (nGPT's and anGPT's `x/||x||`): `||y|| = 1`.
//!
//! The replacements estimate the scale of `x` differently but are calibrated (by default the
//! exact constants of `normlab_norms::constants`, `ConstMode::Exact`; `model.norm_constant`
//! chooses the authors' `c(n)` or no constant, for the "Norm matters" 4.1 ablation) so that for
//! Gaussian coordinates they give per-coordinate std 1, like RMSNorm. At a `Unit` site their output is therefore divided by
//! `sqrt(n)` as well, so every choice has the same expected magnitude:
//!
//! | choice | Rms site | Unit site |
//! |---|---|---|
//! | `L2` | `x / sqrt(mean x^2 + eps)` | `x / max(||x||, eps)` |
//! | `Rms` | `x / sqrt(mean x^2 + eps)` | `x / sqrt(mean x^2 + eps) / sqrt(n)` |
//! | `L1` | `x / (sqrt(pi/2) mean|x| + eps)` | same `/ sqrt(n)` |
//! | `LInf` | `x / (C_inf(n) max|x| + eps)` | same `/ sqrt(n)` |
//! | `TopK{k}` | `x / (C_topk(n,k) mean of the k largest |x| + eps)` | same `/ sqrt(n)` |
//!
//! The replacements are uncentred (like RMSNorm and unit L2, which they replace). `Nu` is not a
//! per-site norm: the models handle it (it replaces some sites by constant factors).
//! A learnable gain, where the site has one, is applied by the op (`y * w`); the `1/sqrt(n)` is
//! folded into the gain when there is one.
//!
//! # fp8 storage (`ForwardCtx::fp8_norm_io`, the training option `train.fp8_norm_io`)
//!
//! The site's input and its output (after the gain and the `1/sqrt(n)`: what the next op
//! reads) are stored as fp8 E4M3 with a per-tensor power-of-two scale from the tensor's amax
//! and read back ([`crate::ops::fp8_e4m3_store`]: no finite value saturates; underflows and
//! subnormals are counted in the model's telemetry). In between, the norm runs in f32 storage
//! (f64 on the f64 path) with the mode's accumulator: it reads the E4M3 values exactly and its
//! output is rounded once, into E4M3, not first into the 16-bit compute dtype, so the result is
//! what a fused kernel reading and writing E4M3 with these scales computes. The E4M3 values are
//! exact in the compute dtype (f32, bf16; f16 down to its subnormals). The backward is
//! straight-through for both roundings: the norm's own backward at the stored (quantized)
//! input, gradients in f32 and then the compute dtype, never quantized.

use std::sync::Arc;

use candle_core::{DType, Result, Tensor};
use normlab_norms::{NormKind, NormSpec};

use crate::model::{ForwardCtx, ModelConfig, ModelError, NormChoice};
use crate::ops::{fp8_e4m3_store, norm_on, Telemetry};

/// The magnitude the architecture's own norm gives at a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Rms,
    Unit,
}

/// A configured norm over a last dimension of width `n`.
#[derive(Clone, Debug)]
pub(crate) struct NormSite {
    spec: NormSpec,
    /// Applied after the norm (1 or `1/sqrt(n)`).
    post: f64,
}

impl NormSite {
    /// `choice` at a site of width `n` and target `target`, with the eps and scale constant of
    /// `cfg`; `Nu` is refused (the caller maps it).
    pub fn new(choice: NormChoice, n: usize, target: Target, cfg: &ModelConfig) -> std::result::Result<Self, ModelError> {
        let kind = match (choice, target) {
            (NormChoice::L2, Target::Rms) | (NormChoice::Rms, _) => NormKind::Rms,
            (NormChoice::L2, Target::Unit) => NormKind::UnitL2,
            (NormChoice::L1, _) => NormKind::L1,
            (NormChoice::LInf, _) => NormKind::LInf,
            (NormChoice::TopK { k }, _) => NormKind::TopK { k },
            (NormChoice::Nu, _) => {
                return Err(ModelError::Unsupported { arch: "-", norm: choice.name(), why: "nu is not a per-site norm".into() });
            }
        };
        let spec = NormSpec::new(kind, cfg.norm_eps).with_centred(false).with_constant(cfg.norm_constant);
        spec.validate(n).map_err(|e| ModelError::Unsupported { arch: "-", norm: choice.name(), why: format!("at a norm site of width {n}: {e}") })?;
        let post = match (kind, target) {
            (NormKind::UnitL2, _) | (_, Target::Rms) => 1.0,
            (_, Target::Unit) => 1.0 / (n as f64).sqrt(),
        };
        Ok(NormSite { spec, post })
    }

    /// The norm's spec (kind, eps, constant; uncentred).
    pub fn spec(&self) -> &NormSpec {
        &self.spec
    }

    /// Normalise `x` over its last dimension, times `gain` if given (in `x`'s dtype), with
    /// `ctx`'s accumulator, through fp8 storage when `ctx.fp8_norm_io` (module doc), on the
    /// implementation `ctx.ops` chooses (`crate::ops::norm_on`: the norm op, or its composed
    /// candle form where the op cannot run).
    pub fn apply(&self, x: &Tensor, gain: Option<&Tensor>, ctx: &ForwardCtx, telemetry: &Arc<Telemetry>) -> Result<Tensor> {
        if !ctx.fp8_norm_io {
            return self.norm(x, gain, ctx, telemetry);
        }
        let dt = x.dtype();
        let work = if dt == DType::F64 { DType::F64 } else { DType::F32 };
        let xq = fp8_e4m3_store(&x.to_dtype(work)?, Some(telemetry))?;
        let gain = gain.map(|g| g.to_dtype(work)).transpose()?;
        let y = self.norm(&xq, gain.as_ref(), ctx, telemetry)?;
        fp8_e4m3_store(&y, Some(telemetry))?.to_dtype(dt)
    }

    /// The norm itself, in `x`'s dtype.
    fn norm(&self, x: &Tensor, gain: Option<&Tensor>, ctx: &ForwardCtx, telemetry: &Arc<Telemetry>) -> Result<Tensor> {
        let (path, accum) = (ctx.ops, ctx.accum);
        match (gain, self.post == 1.0) {
            (g, true) => norm_on(path, x, &self.spec, accum, g, None, Some(telemetry)),
            (Some(g), false) => norm_on(path, x, &self.spec, accum, Some(&g.affine(self.post, 0.0)?), None, Some(telemetry)),
            (None, false) => norm_on(path, x, &self.spec, accum, None, None, Some(telemetry))?.affine(self.post, 0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};
    use normlab_norms::{Accum, ConstMode};
    use crate::ops::{e4m3_round, e4m3_scale};

    fn amax(v: &[f64]) -> f64 {
        v.iter().fold(0f64, |m, x| m.max(x.abs()))
    }

    /// `v` stored as E4M3 with its per-tensor scale, in f64 (the reference of the store).
    fn q(v: &[f64]) -> Vec<f64> {
        let s = e4m3_scale(amax(v));
        v.iter().map(|x| e4m3_round(x * s) / s).collect()
    }

    /// Whether `v * s` is within `rel` of the midpoint of two E4M3 neighbours (where an f32 and
    /// an f64 computation may round to different sides).
    fn near_tie(v: f64, s: f64, rel: f64) -> bool {
        e4m3_round(v * s * (1.0 - rel)) != e4m3_round(v * s * (1.0 + rel))
    }

    /// With fp8 storage the site computes `Q(Norm(Q(x)))` (Q: E4M3 store with the per-tensor
    /// scale): checked against an f64 reference; skipping either store fails it.
    #[test]
    fn fp8_site_is_q_of_norm_of_q() {
        let (rows, n) = (24, 16);
        let x: Vec<f64> = (0..rows * n).map(|i| ((i as f64 * 0.618034).fract() - 0.5) * (1.0 + (i % 7) as f64).powi(2)).collect();
        let site = NormSite::new(NormChoice::L2, n, Target::Unit, &ModelConfig { norm_eps: 1e-6, ..ModelConfig::default() }).unwrap();
        let tel = Telemetry::new();
        let ctx = ForwardCtx { fp8_norm_io: true, ..ForwardCtx::new(DType::F32, Accum::F32) };
        let xt = Var::from_tensor(&Tensor::from_vec(x.iter().map(|&v| v as f32).collect::<Vec<_>>(), (rows, n), &Device::Cpu).unwrap()).unwrap();
        let y: Vec<f64> = site.apply(&xt, None, &ctx, &tel).unwrap().flatten_all().unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap();
        let x32: Vec<f64> = x.iter().map(|&v| v as f32 as f64).collect();
        let unit = |v: &[f64]| -> Vec<f64> {
            v.chunks(n).flat_map(|r| {
                let l = r.iter().map(|a| a * a).sum::<f64>().sqrt();
                r.iter().map(move |a| a / l).collect::<Vec<_>>()
            }).collect()
        };
        let want = q(&unit(&q(&x32)));
        let s_out = e4m3_scale(amax(&unit(&q(&x32))));
        let mut ties = 0;
        for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
            assert_eq!(e4m3_round(a * s_out), a * s_out, "[{i}] {a} is not an E4M3 value at scale {s_out}");
            if a != b {
                assert!(near_tie(unit(&q(&x32))[i], s_out, 1e-5), "[{i}]: {a} vs {b}");
                ties += 1;
            }
        }
        assert!(ties <= 2, "{ties} mismatches");
        // The stores matter: without the input store, or without the output store, the result differs.
        let no_in = q(&unit(&x32));
        assert!(no_in.iter().zip(&y).filter(|(a, b)| a != b).count() > rows * n / 20);
        let no_out = unit(&q(&x32));
        assert!(no_out.iter().zip(&y).filter(|(a, b)| a != b).count() > rows * n / 2);
        let c = tel.snapshot().fp8;
        assert_eq!(c.values, 2 * (rows * n) as u64);
        // Straight-through backward: the norm's gradient at the stored input, in x's dtype.
        let w = Tensor::from_vec((0..rows * n).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(), (rows, n), &Device::Cpu).unwrap();
        let g = (site.apply(&xt, None, &ctx, &tel).unwrap() * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let gx = g.get(&xt).unwrap();
        assert_eq!(gx.dtype(), DType::F32);
        let xq = Var::from_tensor(&Tensor::from_vec(q(&x32).iter().map(|&v| v as f32).collect::<Vec<_>>(), (rows, n), &Device::Cpu).unwrap()).unwrap();
        let plain = ForwardCtx::new(DType::F32, Accum::F32);
        let g2 = (site.apply(&xq, None, &plain, &tel).unwrap() * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let (a, b): (Vec<f32>, Vec<f32>) = (gx.flatten_all().unwrap().to_vec1().unwrap(), g2.get(&xq).unwrap().flatten_all().unwrap().to_vec1().unwrap());
        assert_eq!(a, b);
    }

    /// `model.norm_constant` reaches the site: L1 without its constant is `sqrt(pi/2)` times L1
    /// with it, at both targets; L2 ignores it.
    #[test]
    fn norm_constant_reaches_the_site() {
        let x = Tensor::new(&[[0.3f32, -1.2, 2.5, 0.7, -0.1, 1.9, -2.2, 0.4]], &Device::Cpu).unwrap();
        let tel = Telemetry::new();
        let out = |choice: NormChoice, target: Target, c: ConstMode| -> Vec<f32> {
            let cfg = ModelConfig { norm_constant: c, norm_eps: 0.0, ..ModelConfig::default() };
            let site = NormSite::new(choice, 8, target, &cfg).unwrap();
            site.apply(&x, None, &ForwardCtx::new(DType::F32, Accum::F32), &tel).unwrap().flatten_all().unwrap().to_vec1().unwrap()
        };
        for target in [Target::Rms, Target::Unit] {
            let (exact, one) = (out(NormChoice::L1, target, ConstMode::Exact), out(NormChoice::L1, target, ConstMode::One));
            for (e, o) in exact.iter().zip(&one) {
                let ratio = (*o as f64) / (*e as f64);
                assert!((ratio - (std::f64::consts::PI / 2.0).sqrt()).abs() < 1e-6, "{target:?}: {o} / {e} = {ratio}");
            }
            assert_eq!(out(NormChoice::L2, target, ConstMode::Exact), out(NormChoice::L2, target, ConstMode::One));
        }
    }
}
