//! nGPT (Loshchilov et al.), faithful to algorithms.md 1.2-1.4 and 1.10.
//!
//! ```text
//! h = W_e[x]                                          (rows unit-norm by projection)
//! per layer:  q, k, v = W_q h, W_k h, W_v h              (per head; RoPE on q and k)
//!             q, k = s_qk * Norm(q), s_qk * Norm(k)      (over d_h; s_qk per head and feature)
//!             h_A = W_o softmax(sqrt(d_h) q k^T) v
//!             h = Norm(h + |alpha_A| (Norm(h_A) - h))
//!             [u; v] = W_fc h;  u = s_u u;  v = s_v v sqrt(d_model)
//!             h_M = W_d (u * SiLU(v))
//!             h = Norm(h + |alpha_M| (Norm(h_M) - h))
//! logits = s_z * (W_h h)
//! ```
//!
//! Parameters mirror NVIDIA/ngpt `model.py`'s state_dict (names, `(out, in)` layouts, `c_fc`
//! holding u then the gate v, `suv` holding s_u then s_v). The scalars use its
//! reparametrisation `effective = stored * init / scale`: alpha (init `alpha_init`, scale
//! `alpha_scale` or `1/sqrt(d)`), s_qk (1, `1/sqrt(d)`), s_uv (1, 1), s_z (1, `1/sqrt(d)`).
//! Matrices are drawn N(0, 1/d) and projected to unit lines along the d_model axis (rows of
//! wte, lm_head, q/k/v, c_fc; columns of the two output projections) at build and by
//! [`LanguageModel::project`] after every optimizer step (algorithms.md 1.4).
//!
//! `ngpt_code_interop` reproduces the public code: its RoPE variant (algorithms.md 1.3.1), the
//! `sqrt(d)` factor on both u and v (1.7 item 2) and the redundant `Norm(h)` before each LERP
//! (1.7 item 3). Without it the paper's form is used.
//!
//! Norm choice: every `Norm` above is a unit site ([`Target::Unit`]); `Nu` keeps the exact norms
//! on q, k, h_A and h_M and replaces the two post-LERP norms by anGPT's factor
//! `nu(|alpha|) = ((1 - a)^2 + a^2)^{-1/2}` (elementwise), the "nu-corrected LERP" ablation.
//! Implementation details (same functions, fewer passes over the activations): the per-feature
//! scales s_uv and s_z are folded into the rows of `c_fc` and `lm_head` at use
//! (`diag(s) W x = s * (W x)`); s_qk, which multiplies both q and k, is applied as s_qk^2 to q
//! alone (the same scores `sum_i s_i^2 q_i k_i`); s_qk^2, the row scales and the LERP
//! `h + a (x - h) = (1 - a) h + a x` are fused ops with a one-pass backward (`fused.rs`).

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor, Var};
use normlab_norms::weight::Axis;

use crate::model::attention::{causal_attention, ScoreScale};
use crate::model::fused::{lerp, scale, Axis as ScaleAxis};
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
    alpha_a: Scaled,
    alpha_m: Scaled,
    sqk: Scaled,
    suv: Var,
}

pub(crate) struct NGpt {
    cfg: ModelConfig,
    params: ParamStore,
    telemetry: Arc<Telemetry>,
    wte: Var,
    layers: Vec<Layer>,
    lm_head: Var,
    sz: Scaled,
    /// `(var, constraint)` for every matrix, in parameter order.
    constraints: Vec<(Var, Constraint)>,
    site_d: NormSite,
    site_h: NormSite,
    /// Multiplier of `suv` per entry: `[1 (u) | sqrt(d) (v)]`, or `sqrt(d)` everywhere under
    /// interop; `(2r)` in the storage dtype.
    suv_mult: Tensor,
}

impl NGpt {
    pub fn build(cfg: &ModelConfig, storage: DType, seed: u64, device: &Device) -> std::result::Result<Self, ModelError> {
        let (d, v, dh, r, nl) = (cfg.d_model, cfg.vocab, cfg.head_dim(), cfg.mlp_hidden(), cfg.n_layers);
        // The d-wide unit sites (h_A, h_M, LERP) use the chosen norm; under Nu the exact one.
        let exact_or = |c: NormChoice| if c == NormChoice::Nu { NormChoice::L2 } else { c };
        let site_d = NormSite::new(exact_or(cfg.norm), d, Target::Unit, cfg)?;
        let site_h = NormSite::new(exact_or(cfg.norm), dh, Target::Unit, cfg)?;
        let base = 1.0 / (d as f64).sqrt();
        let alpha_scale = cfg.alpha_scale_or_default();
        let mut b = Builder::new(seed, storage, device)?;
        let mut constraints = Vec::new();
        let mut mat = |b: &mut Builder, name: String, out: usize, inp: usize, axis: Axis, group: ParamGroup| -> std::result::Result<Var, ModelError> {
            // N(0, base^2) then unit lines: only the direction matters (algorithms.md 1.2).
            let vals = match axis {
                Axis::Rows => b.unit_rows(out, inp),
                Axis::Cols => b.unit_cols(out, inp),
            };
            let var = b.add(name, &[out, inp], vals, group)?;
            constraints.push((var.clone(), Constraint::Unit(axis)));
            Ok(var)
        };
        let wte = mat(&mut b, "transformer.wte.weight".into(), v, d, Axis::Rows, ParamGroup::Embedding)?;
        let mut layers = Vec::with_capacity(nl);
        for i in 0..nl {
            let p = format!("transformer.h.{i}");
            let wk = mat(&mut b, format!("{p}.key.weight"), d, d, Axis::Rows, ParamGroup::Matrix)?;
            let wq = mat(&mut b, format!("{p}.query.weight"), d, d, Axis::Rows, ParamGroup::Matrix)?;
            let wv = mat(&mut b, format!("{p}.value.weight"), d, d, Axis::Rows, ParamGroup::Matrix)?;
            let wo = mat(&mut b, format!("{p}.att_c_proj.weight"), d, d, Axis::Cols, ParamGroup::Matrix)?;
            let wfc = mat(&mut b, format!("{p}.c_fc.weight"), 2 * r, d, Axis::Rows, ParamGroup::Matrix)?;
            let wproj = mat(&mut b, format!("{p}.mlp_c_proj.weight"), d, r, Axis::Cols, ParamGroup::Matrix)?;
            let alpha_a = Scaled::new(b.constant(format!("{p}.attn_alpha"), d, alpha_scale, ParamGroup::Scale)?, cfg.alpha_init, alpha_scale);
            let alpha_m = Scaled::new(b.constant(format!("{p}.mlp_alpha"), d, alpha_scale, ParamGroup::Scale)?, cfg.alpha_init, alpha_scale);
            let sqk = Scaled::new(b.constant(format!("{p}.sqk"), d, base, ParamGroup::Scale)?, 1.0, base);
            let suv = b.constant(format!("{p}.suv"), 2 * r, 1.0, ParamGroup::Scale)?;
            layers.push(Layer { wq, wk, wv, wo, wfc, wproj, alpha_a, alpha_m, sqk, suv });
        }
        let lm_head = mat(&mut b, "lm_head.weight".into(), v, d, Axis::Rows, ParamGroup::Embedding)?;
        let sz = Scaled::new(b.constant("sz", v, base, ParamGroup::Scale)?, 1.0, base);
        let sqrt_d = (d as f64).sqrt();
        let mult: Vec<f64> = (0..2 * r).map(|j| if cfg.ngpt_code_interop || j >= r { sqrt_d } else { 1.0 }).collect();
        let suv_mult = Tensor::from_vec(mult, 2 * r, device)?.to_dtype(storage)?;
        let model = NGpt { cfg: cfg.clone(), params: b.store, telemetry: Telemetry::new(), wte, layers, lm_head, sz, constraints, site_d, site_h, suv_mult };
        // Round-off of the storage dtype: re-project so the stored lines are unit to its precision.
        model.project()?;
        Ok(model)
    }

    /// `Norm(h + a (x_n - h))` with `a = |alpha|` (or, under `Nu`, `nu(a) (h + a (x_n - h))`),
    /// as the fused `c_h h + c_x x_n` with `c_h = 1 - a`, `c_x = a` (times `nu(a)` under `Nu`).
    fn lerp(&self, h: &Tensor, x_n: &Tensor, alpha: &Scaled, ctx: &ForwardCtx) -> Result<Tensor> {
        let a = alpha.effective(ctx.compute)?.abs()?;
        let site = &self.site_d;
        let h = if self.cfg.ngpt_code_interop { site.apply(h, None, ctx, &self.telemetry)? } else { h.clone() };
        let c_h = a.affine(-1.0, 1.0)?;
        if self.cfg.norm == NormChoice::Nu {
            let nu = lerp_factor(&a)?;
            lerp(&h, x_n, &(c_h * &nu)?, &(a * nu)?, ctx.ops)
        } else {
            site.apply(&lerp(&h, x_n, &c_h, &a, ctx.ops)?, None, ctx, &self.telemetry)
        }
    }
}

impl LanguageModel for NGpt {
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
        let tel = &self.telemetry;
        let site_d = &self.site_d;
        let kind = if self.cfg.ngpt_code_interop { RopeKind::NgptCode } else { RopeKind::Standard };
        let rope = RopeTables::new(kind, t, dh, dt, tokens.device())?;
        let mut h = embedding(tokens, &cast(&self.wte, dt)?)?;
        let mut probes = Vec::new();
        for l in &self.layers {
            let heads = |w: &Var| -> Result<Tensor> { linear(&h, &cast(w, dt)?)?.reshape((bsz, t, nh, dh)) };
            // s_qk multiplies q and k, so the scores carry s_qk^2: applied once, to q (over the
            // d = H d_h features of every token), the same scores with one pass less.
            let sqk2 = l.sqk.effective(dt)?.sqr()?;
            let q = self.site_h.apply(&rope.apply(&heads(&l.wq)?)?, None, ctx, tel)?;
            let q = scale(&q.reshape((bsz, t, nh * dh))?, &sqk2, ScaleAxis::Last, ctx.ops)?.reshape((bsz, t, nh, dh))?;
            let k = self.site_h.apply(&rope.apply(&heads(&l.wk)?)?, None, ctx, tel)?;
            let v = heads(&l.wv)?;
            let y = causal_attention(&q, &k, &v, ScoreScale::Const((dh as f64).sqrt()), ctx.ops)?;
            let h_a = linear(&y, &cast(&l.wo, dt)?)?;
            h = self.lerp(&h, &site_d.apply(&h_a, None, ctx, tel)?, &l.alpha_a, ctx)?;
            let att_norm = if ctx.probes { Some(mean_norm(&h_a)?) } else { None };

            // diag(s_uv * mult) W_fc, then u * SiLU(v).
            let suv = l.suv.as_tensor().mul(&self.suv_mult)?;
            let wfc = scale(l.wfc.as_tensor(), &suv, ScaleAxis::First, ctx.ops)?.to_dtype(dt)?;
            let h_m = linear(&swiglu(&linear(&h, &wfc)?, ctx.ops)?, &cast(&l.wproj, dt)?)?;
            h = self.lerp(&h, &site_d.apply(&h_m, None, ctx, tel)?, &l.alpha_m, ctx)?;
            if let Some(att_out_norm) = att_norm {
                probes.push(LayerProbe { residual_norm: mean_norm(&h)?, attn_out_norm: att_out_norm, mlp_out_norm: mean_norm(&h_m)? });
            }
        }
        // diag(s_z) W_h h.
        let sz = self.sz.var.as_tensor().affine(self.sz.factor, 0.0)?;
        let head = scale(self.lm_head.as_tensor(), &sz, ScaleAxis::First, ctx.ops)?.to_dtype(dt)?;
        let logits = logits_out(linear(&h, &head)?)?;
        Ok(ForwardOut { logits, probes })
    }
}
