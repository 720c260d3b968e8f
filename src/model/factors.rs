//! anGPT's constant normalisation factors for a model configuration (algorithms.md 2.2-2.5).
//!
//! Computed when the model is built, from the closed forms of the `normlab_norms::nu` engine (the
//! same values its `angpt_table` lists in the "closed" column, which its Monte Carlo rows are
//! checked against), not by sampling, so `build` costs microseconds:
//!
//! | factor | value | where |
//! |---|---|---|
//! | `nu_qkv` | `(linear_gain(d_h, d_m))^{-1/2} = sqrt(d_m/d_h)` | after `W_{q,k,v} h` |
//! | `nu_p` | `(H linear_gain(d_m, d_m))^{-1/2} = sqrt(d_h/d_m)` | after the output projection |
//! | `nu_uz` | `sqrt(d_m/r)`, `r = mlp_ratio d_m` | after `W_u h`, `W_z h` |
//! | `nu_acf` | `(r nu_uz^2 / d_m  E[SiLU(nu_uz g t)^2])^{-1/2}`, `t` a coordinate of a uniform unit vector of `R^{d_m}` (exact finite-`d` expectation by quadrature) | on `u * SiLU(z)` |
//! | `nu_d` | `sqrt(r/d_m)` | after the down projection |
//!
//! `g` is the gate scale: the pre-activation is `z = g nu_uz W_z h`. The default
//! `g = sqrt(d_model)` is the assumption under which the paper's "~3.74" is reproduced (gate
//! coordinates of std 0.5; algorithms.md 2.5); `ModelConfig::gate_scale` overrides it.
//! The residual factor `nu(alpha)` depends on the learnable alpha and is computed in the
//! forward pass (`layers::lerp_factor`).

use normlab_norms::nu::closed::{linear_gain, CoordDist};
use normlab_norms::nu::Activation;

use crate::model::{ModelConfig, ModelError};

/// The constant factors of one anGPT configuration.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct AngptFactors {
    pub nu_qkv: f64,
    pub nu_p: f64,
    pub nu_uz: f64,
    pub nu_acf: f64,
    pub nu_d: f64,
    /// The gate scale `g` the activation factor was computed for.
    pub gate_scale: f64,
}

impl AngptFactors {
    /// The factors for `cfg`'s dimensions (the config must be valid).
    pub fn for_config(cfg: &ModelConfig) -> Result<Self, ModelError> {
        let dm = cfg.d_model;
        let dh = cfg.head_dim();
        let r = cfg.mlp_hidden();
        let inv_sqrt = |ms: f64| 1.0 / ms.sqrt();
        let nu_qkv = inv_sqrt(linear_gain(dh, dm, 1.0));
        let nu_p = inv_sqrt(linear_gain(dm, dm, 1.0) * cfg.n_heads as f64);
        let nu_uz = inv_sqrt(linear_gain(r, dm, 1.0));
        let gate_scale = cfg.gate_scale.unwrap_or((dm as f64).sqrt());
        let u_ms = linear_gain(r, dm, 1.0) * nu_uz * nu_uz;
        let act_ms = CoordDist::SphereCoord { d: dm, scale: nu_uz * gate_scale }.activation_mean_sq(Activation::Silu).map_err(ModelError::Nu)?;
        let nu_acf = inv_sqrt(u_ms * act_ms);
        let nu_d = inv_sqrt(linear_gain(dm, r, 1.0));
        Ok(AngptFactors { nu_qkv, nu_p, nu_uz, nu_acf, nu_d, gate_scale })
    }
}
