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

use std::sync::Arc;

use candle_core::{Result, Tensor};
use normlab_norms::{Accum, NormKind, NormSpec};

use crate::model::ModelConfig;

use crate::model::{ModelError, NormChoice};
use crate::ops::{norm, Telemetry};

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

    /// Normalise `x` over its last dimension, times `gain` if given (in `x`'s dtype).
    pub fn apply(&self, x: &Tensor, gain: Option<&Tensor>, accum: Accum, telemetry: &Arc<Telemetry>) -> Result<Tensor> {
        match (gain, self.post == 1.0) {
            (g, true) => norm(x, &self.spec, accum, g, None, Some(telemetry)),
            (Some(g), false) => norm(x, &self.spec, accum, Some(&g.affine(self.post, 0.0)?), None, Some(telemetry)),
            (None, false) => norm(x, &self.spec, accum, None, None, Some(telemetry))?.affine(self.post, 0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use normlab_norms::ConstMode;

    /// `model.norm_constant` reaches the site: L1 without its constant is `sqrt(pi/2)` times L1
    /// with it, at both targets; L2 ignores it.
    #[test]
    fn norm_constant_reaches_the_site() {
        let x = Tensor::new(&[[0.3f32, -1.2, 2.5, 0.7, -0.1, 1.9, -2.2, 0.4]], &Device::Cpu).unwrap();
        let tel = Telemetry::new();
        let out = |choice: NormChoice, target: Target, c: ConstMode| -> Vec<f32> {
            let cfg = ModelConfig { norm_constant: c, norm_eps: 0.0, ..ModelConfig::default() };
            let site = NormSite::new(choice, 8, target, &cfg).unwrap();
            site.apply(&x, None, Accum::F32, &tel).unwrap().flatten_all().unwrap().to_vec1().unwrap()
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
