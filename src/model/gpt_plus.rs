//! GPT+: the anGPT paper's baseline (its Table 1, first column).
//!
//! ```text
//! h = W_e[x]
//! per layer:  a = RMSNorm(h) * gamma_a
//!             q, k, v = W_q a, W_k a, W_v a            (per head, RoPE on q and k)
//!             q, k = RMSNorm(q) * g_q, RMSNorm(k) * g_k  (QK-norm over d_h, learnable gains)
//!             h = h + W_o softmax(q k^T / sqrt(d_h)) v
//!             m = RMSNorm(h) * gamma_m
//!             h = h + W_d (u * SiLU(z)),  [u; z] = W_fc m
//! logits = W_h (RMSNorm(h) * gamma_h)
//! ```
//!
//! QK-norm: the paper writes `norm(q)`, `norm(k)` (unit L2) and scores `q k^T g` with a learnable
//! `g`. RMSNorm over `d_h` with unit gains is `sqrt(d_h)` times the unit norm, so with the usual
//! `1/sqrt(d_h)` scale the scores are `sqrt(d_h) cos(q, k)`, the paper's form with `g = sqrt(d_h)`
//! at init; the learnable per-feature gains `g_q`, `g_k` (shape `d_h`, shared by the heads) take
//! the role of `g`. Every norm site is an RMS site ([`Target::Rms`]).
//! No bias anywhere; no weight tying. Init: N(0, init_std^2), the two output projections
//! N(0, (init_std / sqrt(2 L))^2) (GPT-2), gains 1.

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor, Var};

use crate::model::attention::{causal_attention, ScoreScale};
use crate::model::init::Builder;
use crate::model::layers::{cast, logits_out, embedding, linear, mean_norm, swiglu};
use crate::model::norm_site::{NormSite, Target};
use crate::model::rope::{RopeKind, RopeTables};
use crate::model::{check_tokens, ForwardCtx, ForwardOut, LanguageModel, LayerProbe, ModelConfig, ModelError, ParamGroup, ParamStore};
use crate::ops::Telemetry;

struct Layer {
    rms_att: Var,
    wq: Var,
    wk: Var,
    wv: Var,
    q_gain: Option<Var>,
    k_gain: Option<Var>,
    wo: Var,
    rms_mlp: Var,
    wfc: Var,
    wproj: Var,
}

pub(crate) struct GptPlus {
    cfg: ModelConfig,
    params: ParamStore,
    telemetry: Arc<Telemetry>,
    wte: Var,
    layers: Vec<Layer>,
    rms_f: Var,
    lm_head: Var,
    site_d: NormSite,
    site_qk: Option<NormSite>,
}

impl GptPlus {
    pub fn build(cfg: &ModelConfig, storage: DType, seed: u64, device: &Device) -> std::result::Result<Self, ModelError> {
        let (d, v, dh, r, nl) = (cfg.d_model, cfg.vocab, cfg.head_dim(), cfg.mlp_hidden(), cfg.n_layers);
        let site_d = NormSite::new(cfg.norm, d, Target::Rms, cfg)?;
        let site_qk = if cfg.qk_norm { Some(NormSite::new(cfg.norm, dh, Target::Rms, cfg)?) } else { None };
        let mut b = Builder::new(seed, storage, device)?;
        let std = cfg.init_std;
        let std_out = std / ((2 * nl) as f64).sqrt();
        let vals = b.normal(v * d, std);
        let wte = b.add("transformer.wte.weight", &[v, d], vals, ParamGroup::Embedding)?;
        let mut layers = Vec::with_capacity(nl);
        for i in 0..nl {
            let p = format!("transformer.h.{i}");
            let rms_att = b.constant(format!("{p}.rmsnorm_att.weight"), d, 1.0, ParamGroup::Scale)?;
            let mat = |b: &mut Builder, name: &str, out: usize, inp: usize, s: f64| {
                let vals = b.normal(out * inp, s);
                b.add(format!("{p}.{name}.weight"), &[out, inp], vals, ParamGroup::Matrix)
            };
            let wq = mat(&mut b, "query", d, d, std)?;
            let wk = mat(&mut b, "key", d, d, std)?;
            let wv = mat(&mut b, "value", d, d, std)?;
            let (q_gain, k_gain) = if cfg.qk_norm {
                (Some(b.constant(format!("{p}.q_norm.weight"), dh, 1.0, ParamGroup::Scale)?), Some(b.constant(format!("{p}.k_norm.weight"), dh, 1.0, ParamGroup::Scale)?))
            } else {
                (None, None)
            };
            let wo = mat(&mut b, "att_c_proj", d, d, std_out)?;
            let rms_mlp = b.constant(format!("{p}.rmsnorm_mlp.weight"), d, 1.0, ParamGroup::Scale)?;
            let wfc = mat(&mut b, "c_fc", 2 * r, d, std)?;
            let wproj = mat(&mut b, "mlp_c_proj", d, r, std_out)?;
            layers.push(Layer { rms_att, wq, wk, wv, q_gain, k_gain, wo, rms_mlp, wfc, wproj });
        }
        let rms_f = b.constant("rmsnorm_f.weight", d, 1.0, ParamGroup::Scale)?;
        let vals = b.normal(v * d, std);
        let lm_head = b.add("lm_head.weight", &[v, d], vals, ParamGroup::Embedding)?;
        Ok(GptPlus { cfg: cfg.clone(), params: b.store, telemetry: Telemetry::new(), wte, layers, rms_f, lm_head, site_d, site_qk })
    }
}

impl LanguageModel for GptPlus {
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
        Ok(())
    }

    fn forward(&self, tokens: &Tensor, ctx: &ForwardCtx) -> Result<ForwardOut> {
        let (bsz, t) = check_tokens(tokens, self.cfg.vocab)?;
        let dt = ctx.compute;
        let (nh, dh) = (self.cfg.n_heads, self.cfg.head_dim());
        let tel = &self.telemetry;
        let rope = RopeTables::new(RopeKind::Standard, t, dh, dt, tokens.device())?;
        let mut h = embedding(tokens, &cast(&self.wte, dt)?)?;
        let mut probes = Vec::new();
        for l in &self.layers {
            let a = self.site_d.apply(&h, Some(&cast(&l.rms_att, dt)?), ctx, tel)?;
            let heads = |w: &Var| -> Result<Tensor> { linear(&a, &cast(w, dt)?)?.reshape((bsz, t, nh, dh)) };
            let mut q = rope.apply(&heads(&l.wq)?)?;
            let mut k = rope.apply(&heads(&l.wk)?)?;
            let v = heads(&l.wv)?;
            if let (Some(site), Some(gq), Some(gk)) = (&self.site_qk, &l.q_gain, &l.k_gain) {
                q = site.apply(&q, Some(&cast(gq, dt)?), ctx, tel)?;
                k = site.apply(&k, Some(&cast(gk, dt)?), ctx, tel)?;
            }
            let y = causal_attention(&q, &k, &v, ScoreScale::Const(1.0 / (dh as f64).sqrt()), ctx.ops)?;
            let att = linear(&y, &cast(&l.wo, dt)?)?;
            h = (h + &att)?;
            let m = self.site_d.apply(&h, Some(&cast(&l.rms_mlp, dt)?), ctx, tel)?;
            let mlp = linear(&swiglu(&linear(&m, &cast(&l.wfc, dt)?)?, ctx.ops)?, &cast(&l.wproj, dt)?)?;
            h = (h + &mlp)?;
            if ctx.probes {
                probes.push(LayerProbe { residual_norm: mean_norm(&h)?, attn_out_norm: mean_norm(&att)?, mlp_out_norm: mean_norm(&mlp)? });
            }
        }
        let hf = self.site_d.apply(&h, Some(&cast(&self.rms_f, dt)?), ctx, tel)?;
        let logits = logits_out(linear(&hf, &cast(&self.lm_head, dt)?)?)?;
        Ok(ForwardOut { logits, probes })
    }
}
