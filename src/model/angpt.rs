//! anGPT (Franke et al. 2025), per the paper's Table 1 (algorithms.md 2.0-2.7).
//!
//! ```text
//! h = W_e[x]
//! per layer:  q, k, v = nu_qkv W_{q,k,v} h                  (per head; RoPE on q and k)
//!             q, k = norm(q), norm(k)                        (exact, over d_h)
//!             h_a = norm(nu_p W_p softmax(g_h q k^T) v)     (g_h learnable, one per head)
//!             h = nu(a_A) * (h + a_A (h_a - h))              (elementwise nu, algorithms.md 2.4)
//!             u, z = nu_uz W_u h, g nu_uz W_z h
//!             h_m = norm(nu_d W_d (nu_acf u * SiLU(z)))
//!             h = nu(a_M) * (h + a_M (h_m - h))
//! logits = s_Z * (W_h h)
//! ```
//!
//! Four exact norms per layer (q, k, h_a, h_m), as many as GPT+ (the paper: "no more
//! normalization layers than the GPT model"); every other normalisation is a constant factor
//! ([`AngptFactors`]). Because `norm` is scale-invariant (up to eps), `nu_qkv` on q and k and
//! `nu_p`, `nu_d` before an exact norm do not change the output; they are skipped there (not
//! multiplied and divided out again). `nu_qkv` on v reaches the attention block's output
//! linearly (`W_p (A (nu v)) = nu W_p A v`), so it is applied there together with `nu_p`: under
//! an exact block-output norm it cancels as well. All of them matter under `NormChoice::Nu`,
//! which drops the two exact block-output norms and relies on `nu_qkv nu_p`, `nu_d` alone (q and
//! k stay exactly normalised: the scores need them). Probes report the block outputs with their
//! factors applied, before the exact norm.
//!
//! Parameters: the NVIDIA/ngpt names for the matrices (`(out, in)`), `attn_alpha`,
//! `mlp_alpha`, `sz` (vocab) with the reparametrisation `stored * init / scale`, scale
//! `alpha_scale` or 0.01 (anGPT Table F.2), and `qk_gain` (`[n_heads]`, effective value
//! stored, init `sqrt(d_h)` so the scores start as nGPT's `sqrt(d_h) cos(q, k)`; the paper
//! does not give g's init or shape). Alpha is used as it is (no abs; the paper's nu(alpha)
//! receives gradients like any other op).
//! Weights are drawn with unit rows (normalised along the input dimension) and held in the
//! unit ball: every row (`||w_i|| <= 1`, over the input dimension, embeddings and head over
//! d_model), or with `angpt_frobenius_bound` every block matrix as a whole
//! (`||W||_F <= 1`; wte and lm_head keep the per-row bound, since a Frobenius bound on a lookup
//! table would shrink every token vector to `~1/sqrt(V)`).

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor, Var};

use crate::model::attention::{causal_attention, ScoreScale};
use crate::model::fused::{lerp, scale, Axis as ScaleAxis};
use crate::model::factors::AngptFactors;
use crate::model::init::Builder;
use crate::model::layers::{cast, logits_out, embedding, lerp_factor, linear, mean_norm, swiglu, Scaled};
use crate::model::norm_site::{NormSite, Target};
use crate::model::project::{project_all, Constraint};
use crate::model::rope::{RopeKind, RopeTables};
use crate::model::{check_tokens, ForwardCtx, ForwardOut, LanguageModel, LayerProbe, ModelConfig, ModelError, NormChoice, ParamGroup, ParamStore};
use crate::ops::Telemetry;

struct Layer {
    wq: Var,
    wk: Var,
    wv: Var,
    wo: Var,
    wfc: Var,
    wproj: Var,
    qk_gain: Var,
    alpha_a: Scaled,
    alpha_m: Scaled,
}

pub(crate) struct AnGpt {
    cfg: ModelConfig,
    params: ParamStore,
    telemetry: Arc<Telemetry>,
    factors: AngptFactors,
    wte: Var,
    layers: Vec<Layer>,
    lm_head: Var,
    sz: Scaled,
    constraints: Vec<(Var, Constraint)>,
    /// q, k (width d_h): exact unless the choice replaces it.
    site_h: NormSite,
    /// h_a, h_m (width d): `None` under `Nu`.
    site_d: Option<NormSite>,
    /// `(2r)` row multipliers of `c_fc`: `nu_uz nu_acf` on u, `g nu_uz` on z (storage dtype).
    fc_mult: Tensor,
}

impl AnGpt {
    pub fn build(cfg: &ModelConfig, storage: DType, seed: u64, device: &Device) -> std::result::Result<Self, ModelError> {
        let (d, v, dh, r, nl) = (cfg.d_model, cfg.vocab, cfg.head_dim(), cfg.mlp_hidden(), cfg.n_layers);
        let factors = AngptFactors::for_config(cfg)?;
        let site_choice = if cfg.norm == NormChoice::Nu { NormChoice::L2 } else { cfg.norm };
        let site_h = NormSite::new(site_choice, dh, Target::Unit, cfg)?;
        let site_d = if cfg.norm == NormChoice::Nu { None } else { Some(NormSite::new(cfg.norm, d, Target::Unit, cfg)?) };
        let scale = cfg.alpha_scale_or_default();
        let block_bound = if cfg.angpt_frobenius_bound { Constraint::BallFrobenius } else { Constraint::BallRows };
        let mut b = Builder::new(seed, storage, device)?;
        let mut constraints = Vec::new();
        let mut mat = |b: &mut Builder, name: String, out: usize, inp: usize, c: Constraint, group: ParamGroup| -> std::result::Result<Var, ModelError> {
            let vals = b.unit_rows(out, inp);
            let var = b.add(name, &[out, inp], vals, group)?;
            constraints.push((var.clone(), c));
            Ok(var)
        };
        let wte = mat(&mut b, "transformer.wte.weight".into(), v, d, Constraint::BallRows, ParamGroup::Embedding)?;
        let mut layers = Vec::with_capacity(nl);
        for i in 0..nl {
            let p = format!("transformer.h.{i}");
            let wk = mat(&mut b, format!("{p}.key.weight"), d, d, block_bound, ParamGroup::Matrix)?;
            let wq = mat(&mut b, format!("{p}.query.weight"), d, d, block_bound, ParamGroup::Matrix)?;
            let wv = mat(&mut b, format!("{p}.value.weight"), d, d, block_bound, ParamGroup::Matrix)?;
            let wo = mat(&mut b, format!("{p}.att_c_proj.weight"), d, d, block_bound, ParamGroup::Matrix)?;
            let wfc = mat(&mut b, format!("{p}.c_fc.weight"), 2 * r, d, block_bound, ParamGroup::Matrix)?;
            let wproj = mat(&mut b, format!("{p}.mlp_c_proj.weight"), d, r, block_bound, ParamGroup::Matrix)?;
            let qk_gain = b.constant(format!("{p}.qk_gain"), cfg.n_heads, (dh as f64).sqrt(), ParamGroup::Scale)?;
            let alpha_a = Scaled::new(b.constant(format!("{p}.attn_alpha"), d, scale, ParamGroup::Scale)?, cfg.alpha_init, scale);
            let alpha_m = Scaled::new(b.constant(format!("{p}.mlp_alpha"), d, scale, ParamGroup::Scale)?, cfg.alpha_init, scale);
            layers.push(Layer { wq, wk, wv, wo, wfc, wproj, qk_gain, alpha_a, alpha_m });
        }
        let lm_head = mat(&mut b, "lm_head.weight".into(), v, d, Constraint::BallRows, ParamGroup::Embedding)?;
        let sz = Scaled::new(b.constant("sz", v, scale, ParamGroup::Scale)?, 1.0, scale);
        let f = &factors;
        let mult: Vec<f64> = (0..2 * r).map(|j| if j < r { f.nu_uz * f.nu_acf } else { f.gate_scale * f.nu_uz }).collect();
        let fc_mult = Tensor::from_vec(mult, 2 * r, device)?.to_dtype(storage)?;
        let model = AnGpt { cfg: cfg.clone(), params: b.store, telemetry: Telemetry::new(), factors, wte, layers, lm_head, sz, constraints, site_h, site_d, fc_mult };
        model.project()?;
        Ok(model)
    }

    /// `nu(a) (h + a (x - h)) = (nu(a) (1 - a)) h + (nu(a) a) x`, coefficients formed on the
    /// d-vectors first (in f32, f64 on the f64 path), then one fused op.
    fn lerp(&self, h: &Tensor, x: &Tensor, alpha: &Scaled, ctx: &ForwardCtx) -> Result<Tensor> {
        let dt = ctx.compute;
        let a = alpha.effective(if dt == DType::F64 { DType::F64 } else { DType::F32 })?;
        let nu = lerp_factor(&a)?;
        let c_h = (a.affine(-1.0, 1.0)? * &nu)?.to_dtype(dt)?;
        let c_x = (a * nu)?.to_dtype(dt)?;
        lerp(h, x, &c_h, &c_x, ctx.ops)
    }

    /// The block output `x` (without its factor `nu`, nor the `extra` factor that was not
    /// applied upstream) normalised, or times `nu * extra` under `Nu`; also its probe norm (with
    /// both factors).
    fn block_out(&self, x: &Tensor, nu: f64, extra: f64, ctx: &ForwardCtx) -> Result<(Tensor, Option<f64>)> {
        let probe = if ctx.probes { Some(nu * extra * mean_norm(x)?) } else { None };
        let y = match &self.site_d {
            Some(site) => site.apply(x, None, ctx, &self.telemetry)?,
            None => x.affine(nu * extra, 0.0)?,
        };
        Ok((y, probe))
    }
}

impl LanguageModel for AnGpt {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    fn params(&self) -> &ParamStore {
        &self.params
    }
    fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    fn project(&self) -> Result<()> {
        project_all(&self.constraints)
    }

    fn forward(&self, tokens: &Tensor, ctx: &ForwardCtx) -> Result<ForwardOut> {
        let (bsz, t) = check_tokens(tokens, self.cfg.vocab)?;
        let dt = ctx.compute;
        let (nh, dh) = (self.cfg.n_heads, self.cfg.head_dim());
        let f = self.factors;
        let tel = &self.telemetry;
        let rope = RopeTables::new(RopeKind::Standard, t, dh, dt, tokens.device())?;
        let mut h = embedding(tokens, &cast(&self.wte, dt)?)?;
        let mut probes = Vec::new();
        for l in &self.layers {
            let heads = |w: &Var| -> Result<Tensor> { linear(&h, &cast(w, dt)?)?.reshape((bsz, t, nh, dh)) };
            // nu_qkv on q and k is cancelled by the exact norm that follows; on v it passes
            // linearly through the attention and W_p into h_a, so it is applied with nu_p (at
            // the block output: cancelled too by an exact norm there).
            let q = self.site_h.apply(&rope.apply(&heads(&l.wq)?)?, None, ctx, tel)?;
            let k = self.site_h.apply(&rope.apply(&heads(&l.wk)?)?, None, ctx, tel)?;
            let v = heads(&l.wv)?;
            let g = cast(&l.qk_gain, dt)?;
            let y = causal_attention(&q, &k, &v, ScoreScale::PerHead(&g), ctx.ops)?;
            let (h_a, att_norm) = self.block_out(&linear(&y, &cast(&l.wo, dt)?)?, f.nu_p, f.nu_qkv, ctx)?;
            h = self.lerp(&h, &h_a, &l.alpha_a, ctx)?;

            // diag(mult) W_fc: u gets nu_uz nu_acf (linear in u), z gets g nu_uz.
            let wfc = scale(l.wfc.as_tensor(), &self.fc_mult, ScaleAxis::First, ctx.ops)?.to_dtype(dt)?;
            let (h_m, mlp_norm) = self.block_out(&linear(&swiglu(&linear(&h, &wfc)?, ctx.ops)?, &cast(&l.wproj, dt)?)?, f.nu_d, 1.0, ctx)?;
            h = self.lerp(&h, &h_m, &l.alpha_m, ctx)?;
            if let (Some(attn_out_norm), Some(mlp_out_norm)) = (att_norm, mlp_norm) {
                probes.push(LayerProbe { residual_norm: mean_norm(&h)?, attn_out_norm, mlp_out_norm });
            }
        }
        let sz = self.sz.var.as_tensor().affine(self.sz.factor, 0.0)?;
        let head = scale(self.lm_head.as_tensor(), &sz, ScaleAxis::First, ctx.ops)?.to_dtype(dt)?;
        let logits = logits_out(linear(&h, &head)?)?;
        Ok(ForwardOut { logits, probes })
    }
}
