//! The anGPT factor table for a model configuration (algorithms.md 2.2-2.5, 4.4, 4.5).
//!
//! Every factor is estimated by Monte Carlo on the pipeline it is applied to, shown next to its
//! closed form (where one exists), its `d -> inf` limit and the value the paper gives:
//!
//! | factor | pipeline (unit `h in R^{d_m}`, random unit rows) | closed form |
//! |---|---|---|
//! | `nu_qkv` | `W_q h`, `W_q in R^{d_h x d_m}` | `sqrt(d_m/d_h)` |
//! | `nu_p` | `W_p [o_1; ..; o_H]`, `o_k` independent unit vectors of `R^{d_h}` | `1/sqrt(H) = sqrt(d_h/d_m)` |
//! | `nu_p` (softmax) | `W_p` after real dense softmax attention over `s` positions | none (optional row) |
//! | `nu_uz` | `W_u h`, `W_u in R^{r x d_m}`, `r = ratio d_m` | `sqrt(d_m/r)` |
//! | `nu_acf` | `u * SiLU(z)`, `u = nu_uz W_u h`, `z = gate_scale nu_uz W_z h` | `(r nu_uz^2/d_m E[SiLU(nu_uz gate_scale t)^2])^{-1/2}`, `t` a sphere coordinate of `R^{d_m}` |
//! | `nu_d` | `W_d a`, `a` a unit vector of `R^r` | `sqrt(r/d_m)` |
//! | `nu(alpha)` | `(1 - alpha) h + alpha x`, `h, x` independent unit | `(1 - 2 alpha + 2 alpha^2)^{-1/2}` |
//!
//! **Assumption used for the activation factor** (algorithms.md 2.5): the paper's Table 1 shows no
//! gate scale for anGPT, but without one the factor grows like `sqrt(d_m)`. The paper's "~3.74" is
//! reproduced when the gate pre-activation has per-coordinate std 0.5, i.e. `gate_scale = sqrt(d_m)`
//! with `nu_uz = 0.5` (nGPT's `sqrt(d_model)` convention on the gate only); that is the default
//! here. Then `nu_acf -> 1/sqrt(E[SiLU(Z/2)^2]) = 3.7203` as `d_m -> inf`; 3.74 matches a
//! finite-`d` Monte Carlo of `1/E||a||` (or sampling noise).

use crate::error::{NormError, Result};
use crate::nu::activation::Activation;
use crate::nu::closed::{lerp_mean_sq, linear_gain, CoordDist};
use crate::nu::pipeline::{Alpha, AttentionSpec, Pipeline, RowDist};
use crate::nu::run::{estimate, Comparison, Estimate, McConfig};

/// The multiplier on the gate pre-activation `z` of SwiGLU.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum GateScale {
    /// `sqrt(d_model)`: the assumption that reproduces ~3.74 (gate coordinates of std `nu_uz`).
    SqrtDModel,
    /// A given constant (1.0 = Table 1 read literally).
    Value(f64),
}

impl GateScale {
    pub fn value(self, d_model: usize) -> f64 {
        match self {
            GateScale::SqrtDModel => (d_model as f64).sqrt(),
            GateScale::Value(v) => v,
        }
    }
}

/// The optional row for `nu_p` behind real softmax attention.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SoftmaxRow {
    pub positions: usize,
    pub score_scale: f64,
    pub samples: u64,
}

/// A model configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AngptConfig {
    pub d_model: usize,
    pub heads: usize,
    pub mlp_ratio: f64,
    pub gate_scale: GateScale,
    pub alphas: Vec<f64>,
    pub softmax: Option<SoftmaxRow>,
}

impl AngptConfig {
    /// The defaults around `(d_model, heads)`: ratio 4, gate scale `sqrt(d_model)`, alphas
    /// 0.01, 0.05, 0.1, 0.2, 0.5, no softmax row.
    pub fn new(d_model: usize, heads: usize) -> Self {
        AngptConfig { d_model, heads, mlp_ratio: 4.0, gate_scale: GateScale::SqrtDModel, alphas: vec![0.01, 0.05, 0.1, 0.2, 0.5], softmax: None }
    }

    /// Head dimension and MLP hidden width, or a typed error naming the bad value.
    pub fn dims(&self) -> Result<(usize, usize)> {
        if self.d_model == 0 {
            return Err(NormError::Empty { what: "d_model", value: 0 });
        }
        if self.heads == 0 {
            return Err(NormError::Empty { what: "heads", value: 0 });
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return Err(NormError::Shape(format!("d_model = {} is not divisible by heads = {}", self.d_model, self.heads)));
        }
        let r = self.mlp_ratio * self.d_model as f64;
        if !(self.mlp_ratio.is_finite() && self.mlp_ratio > 0.0 && r.fract() == 0.0 && r >= 1.0) {
            return Err(NormError::OutOfRange { what: "mlp_ratio (mlp_ratio * d_model must be a positive integer)", range: "> 0", value: self.mlp_ratio });
        }
        let g = self.gate_scale.value(self.d_model);
        if !g.is_finite() {
            return Err(NormError::OutOfRange { what: "gate scale", range: "finite values", value: g });
        }
        for &a in &self.alphas {
            if !(0.0..=1.0).contains(&a) {
                return Err(NormError::OutOfRange { what: "lerp alpha", range: "[0, 1]", value: a });
            }
        }
        Ok((self.d_model / self.heads, r as usize))
    }

    /// The sentence the output states about the activation-factor assumption.
    pub fn assumption(&self) -> String {
        let (_, r) = self.dims().unwrap_or((1, 1));
        let nu_uz = (self.d_model as f64 / r as f64).sqrt();
        let g = self.gate_scale.value(self.d_model);
        let std = nu_uz * g / (self.d_model as f64).sqrt();
        let which = match self.gate_scale {
            GateScale::SqrtDModel => "gate_scale = sqrt(d_model) (algorithms.md 2.5: nGPT's sqrt(d) convention on the gate z only)".to_string(),
            GateScale::Value(v) => format!("gate_scale = {v}"),
        };
        format!("nu_acf assumes {which}: u = nu_uz W_u h, z = gate_scale nu_uz W_z h, so gate coordinates have std {std:.4} (0.5 reproduces the paper's ~3.74)")
    }
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FactorRow {
    pub name: String,
    pub pipeline: String,
    pub mc: Estimate,
    /// Exact `nu` at this configuration's dimensions (where a closed form exists).
    pub closed: Option<f64>,
    /// `d -> inf` limit of the closed form (where it differs).
    pub asymptotic: Option<f64>,
    pub paper: Option<f64>,
    pub paper_note: String,
    pub comparison: Option<Comparison>,
}

/// The whole table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AngptTable {
    pub config: AngptConfig,
    pub d_head: usize,
    pub d_hidden: usize,
    pub assumption: String,
    pub seed: u64,
    pub rows: Vec<FactorRow>,
}

/// Progress of the table: `(row name, samples done, samples planned)`.
pub type TableProgress<'a> = &'a (dyn Fn(&str, u64, u64) + Sync);

fn row_seed(seed: u64, i: u64) -> u64 {
    seed ^ (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Computes the table with `mc.samples` samples per factor (the softmax row uses its own count).
pub fn angpt_table(cfg: &AngptConfig, mc: &McConfig, progress: Option<TableProgress>) -> Result<AngptTable> {
    let (dh, r) = cfg.dims()?;
    let dm = cfg.d_model;
    let nu_qkv = (dm as f64 / dh as f64).sqrt();
    let nu_uz = (dm as f64 / r as f64).sqrt();
    let gate = cfg.gate_scale.value(dm);
    let mut rows = Vec::new();
    let mut idx = 0u64;
    let mut run = |name: &str, p: &Pipeline, out, samples: u64| -> Result<Estimate> {
        idx += 1;
        let c = McConfig { seed: row_seed(mc.seed, idx), samples, ..mc.clone() };
        match progress {
            Some(f) => estimate(p, out, &c, Some(&|d, t| f(name, d, t))),
            None => estimate(p, out, &c, None),
        }
    };

    // nu_qkv
    let mut p = Pipeline::new();
    let h = p.sphere(dm)?;
    let q = p.linear(h, dh, RowDist::UNIT)?;
    let e = run("nu_qkv", &p, q, mc.samples)?;
    let ms = linear_gain(dh, dm, 1.0);
    rows.push(FactorRow { name: "nu_qkv".into(), pipeline: format!("W_q h, W_q in R^({dh} x {dm})"), comparison: Some(e.compare(ms)), mc: e, closed: Some(1.0 / ms.sqrt()), asymptotic: None, paper: Some(nu_qkv), paper_note: "sqrt(d_m/d_h)".into() });

    // nu_p under the paper's assumption: unit head outputs.
    let mut p = Pipeline::new();
    let parts: Vec<_> = (0..cfg.heads).map(|_| p.sphere(dh)).collect::<Result<_>>()?;
    let o = p.concat(&parts)?;
    let y = p.linear(o, dm, RowDist::UNIT)?;
    let e = run("nu_p", &p, y, mc.samples)?;
    let ms = linear_gain(dm, dm, 1.0) * cfg.heads as f64;
    rows.push(FactorRow { name: "nu_p".into(), pipeline: format!("W_p [o_1..o_{}], o_k unit in R^{dh}, W_p in R^({dm} x {dm})", cfg.heads), comparison: Some(e.compare(ms)), mc: e, closed: Some(1.0 / ms.sqrt()), asymptotic: None, paper: Some((dh as f64 / dm as f64).sqrt()), paper_note: "sqrt(d_h/d_m)".into() });

    // nu_p behind real softmax attention (no closed form).
    if let Some(sm) = cfg.softmax {
        let mut p = Pipeline::new();
        let a = p.attention(AttentionSpec { d_model: dm, heads: cfg.heads, d_head: dh, positions: sm.positions, score_scale: sm.score_scale, qkv_scale: nu_qkv, normalize_qk: true })?;
        let y = p.linear(a, dm, RowDist::UNIT)?;
        let e = run("nu_p_softmax", &p, y, sm.samples)?;
        rows.push(FactorRow { name: "nu_p (softmax)".into(), pipeline: format!("W_p softmax-attention, s = {} positions, score scale {}, norm(q), norm(k), v = nu_qkv W_v x", sm.positions, sm.score_scale), mc: e, closed: None, asymptotic: None, paper: Some((dh as f64 / dm as f64).sqrt()), paper_note: "paper assumes unit head outputs".into(), comparison: None });
    }

    // nu_uz
    let mut p = Pipeline::new();
    let h = p.sphere(dm)?;
    let u = p.linear(h, r, RowDist::UNIT)?;
    let e = run("nu_uz", &p, u, mc.samples)?;
    let ms = linear_gain(r, dm, 1.0);
    rows.push(FactorRow { name: "nu_uz".into(), pipeline: format!("W_u h, W_u in R^({r} x {dm})"), comparison: Some(e.compare(ms)), mc: e, closed: Some(1.0 / ms.sqrt()), asymptotic: None, paper: Some(0.5), paper_note: "sqrt(d_m/(4 d_m)) (paper: ratio 4)".into() });

    // nu_acf
    let mut p = Pipeline::new();
    let h = p.sphere(dm)?;
    let wu = p.linear(h, r, RowDist::UNIT)?;
    let wz = p.linear(h, r, RowDist::UNIT)?;
    let u = p.scale(wu, nu_uz)?;
    let z = p.scale(wz, nu_uz)?;
    let a = p.swiglu(u, z, gate)?;
    let e = run("nu_acf", &p, a, mc.samples)?;
    let u_ms = linear_gain(r, dm, 1.0) * nu_uz * nu_uz;
    let ms = u_ms * CoordDist::SphereCoord { d: dm, scale: nu_uz * gate }.activation_mean_sq(Activation::Silu)?;
    let ms_inf = u_ms * CoordDist::Gaussian { std: nu_uz * gate / (dm as f64).sqrt() }.activation_mean_sq(Activation::Silu)?;
    rows.push(FactorRow { name: "nu_acf".into(), pipeline: format!("u * SiLU(z), u = {nu_uz:.4} W_u h, z = {gate:.4} * {nu_uz:.4} W_z h"), comparison: Some(e.compare(ms)), mc: e, closed: Some(1.0 / ms.sqrt()), asymptotic: Some(1.0 / ms_inf.sqrt()), paper: Some(3.74), paper_note: "~3.74 (Monte Carlo, paper)".into() });

    // nu_d
    let mut p = Pipeline::new();
    let a = p.sphere(r)?;
    let y = p.linear(a, dm, RowDist::UNIT)?;
    let e = run("nu_d", &p, y, mc.samples)?;
    let ms = linear_gain(dm, r, 1.0);
    rows.push(FactorRow { name: "nu_d".into(), pipeline: format!("W_d a, a unit in R^{r}, W_d in R^({dm} x {r})"), comparison: Some(e.compare(ms)), mc: e, closed: Some(1.0 / ms.sqrt()), asymptotic: None, paper: Some(2.0), paper_note: "sqrt(4 d_m/d_m) (paper: ratio 4)".into() });

    // nu(alpha)
    for &al in &cfg.alphas {
        let mut p = Pipeline::new();
        let h = p.sphere(dm)?;
        let x = p.sphere(dm)?;
        let y = p.lerp(h, x, Alpha::Scalar(al))?;
        let name = format!("nu(alpha={al})");
        let e = run(&name, &p, y, mc.samples)?;
        let ms = lerp_mean_sq(al);
        rows.push(FactorRow { name, pipeline: format!("(1 - {al}) h + {al} x, h, x independent unit in R^{dm}"), comparison: Some(e.compare(ms)), mc: e, closed: Some(1.0 / ms.sqrt()), asymptotic: None, paper: Some(ms), paper_note: "paper text: nu = 1 - 2a + 2a^2 (that is E||.||^2; the factor is its ^-1/2)".into() });
    }

    Ok(AngptTable { config: cfg.clone(), d_head: dh, d_hidden: r, assumption: cfg.assumption(), seed: mc.seed, rows })
}
