//! nGPT against an independent f64 reference written with plain loops (algorithms.md 1.3), and
//! the init invariants of algorithms.md 1.10.

use crate::model_common;

use candle_core::{DType, Device};
use model_common::{cfg, line_norms, tokens, values};
use normlab::model::{build, Arch, ForwardCtx, LanguageModel, NormChoice, OpPath};
use normlab::norms::weight::unit_tolerance;
use normlab::norms::Accum;

const F64_CTX: ForwardCtx = ForwardCtx { compute: DType::F64, accum: Accum::F64, probes: true, fp8_norm_io: false, ops: OpPath::Auto };

fn unit(x: &[f64]) -> Vec<f64> {
    let n = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    x.iter().map(|v| v / n).collect()
}

/// `W x`, `W` `(out, in)` row-major.
fn matvec(w: &[f64], out: usize, x: &[f64]) -> Vec<f64> {
    let inp = x.len();
    (0..out).map(|i| (0..inp).map(|j| w[i * inp + j] * x[j]).sum()).collect()
}

fn silu(z: f64) -> f64 {
    z / (1.0 + (-z).exp())
}

/// The paper form of nGPT (standard RoPE, s_v sqrt(d) on the gate only), one sequence.
fn reference(model: &dyn LanguageModel, toks: &[u32]) -> Vec<Vec<f64>> {
    let c = model.config();
    let (d, nh, dh, r, v) = (c.d_model, c.n_heads, c.head_dim(), c.mlp_hidden(), c.vocab);
    let p = |name: &str| values(model.params().get(name).unwrap_or_else(|| panic!("no {name}")).var.as_tensor());
    let sqrt_d = (d as f64).sqrt();
    let alpha_factor = c.alpha_init / c.alpha_scale.unwrap_or(1.0 / sqrt_d);
    let wte = p("transformer.wte.weight");
    let mut h: Vec<Vec<f64>> = toks.iter().map(|&t| wte[t as usize * d..(t as usize + 1) * d].to_vec()).collect();
    let t_len = toks.len();
    for i in 0..c.n_layers {
        let q_w = p(&format!("transformer.h.{i}.query.weight"));
        let k_w = p(&format!("transformer.h.{i}.key.weight"));
        let v_w = p(&format!("transformer.h.{i}.value.weight"));
        let o_w = p(&format!("transformer.h.{i}.att_c_proj.weight"));
        let fc_w = p(&format!("transformer.h.{i}.c_fc.weight"));
        let pr_w = p(&format!("transformer.h.{i}.mlp_c_proj.weight"));
        let sqk: Vec<f64> = p(&format!("transformer.h.{i}.sqk")).iter().map(|x| x * sqrt_d).collect();
        let suv = p(&format!("transformer.h.{i}.suv"));
        let aa: Vec<f64> = p(&format!("transformer.h.{i}.attn_alpha")).iter().map(|x| (x * alpha_factor).abs()).collect();
        let am: Vec<f64> = p(&format!("transformer.h.{i}.mlp_alpha")).iter().map(|x| (x * alpha_factor).abs()).collect();
        let rope_norm = |x: Vec<f64>, pos: usize| -> Vec<f64> {
            let mut out = vec![0.0; d];
            for hd in 0..nh {
                let xs = &x[hd * dh..(hd + 1) * dh];
                let mut y = vec![0.0; dh];
                for j in 0..dh / 2 {
                    let th = pos as f64 * 10000f64.powf(-2.0 * j as f64 / dh as f64);
                    let (s, co) = th.sin_cos();
                    y[2 * j] = xs[2 * j] * co - xs[2 * j + 1] * s;
                    y[2 * j + 1] = xs[2 * j] * s + xs[2 * j + 1] * co;
                }
                let y = unit(&y);
                for j in 0..dh {
                    out[hd * dh + j] = y[j] * sqk[hd * dh + j];
                }
            }
            out
        };
        let q: Vec<Vec<f64>> = (0..t_len).map(|t| rope_norm(matvec(&q_w, d, &h[t]), t)).collect();
        let k: Vec<Vec<f64>> = (0..t_len).map(|t| rope_norm(matvec(&k_w, d, &h[t]), t)).collect();
        let vv: Vec<Vec<f64>> = (0..t_len).map(|t| matvec(&v_w, d, &h[t])).collect();
        for t in 0..t_len {
            let mut y = vec![0.0; d];
            for hd in 0..nh {
                let rng = hd * dh..(hd + 1) * dh;
                let sc: Vec<f64> = (0..=t).map(|s| (dh as f64).sqrt() * rng.clone().map(|j| q[t][j] * k[s][j]).sum::<f64>()).collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for j in rng.clone() {
                    y[j] = (0..=t).map(|s| e[s] / z * vv[s][j]).sum();
                }
            }
            let ha = unit(&matvec(&o_w, d, &y));
            let mix: Vec<f64> = (0..d).map(|j| h[t][j] + aa[j] * (ha[j] - h[t][j])).collect();
            h[t] = unit(&mix);
        }
        for ht in h.iter_mut().take(t_len) {
            let uv = matvec(&fc_w, 2 * r, ht);
            let x: Vec<f64> = (0..r).map(|j| uv[j] * suv[j] * silu(uv[r + j] * suv[r + j] * sqrt_d)).collect();
            let hm = unit(&matvec(&pr_w, d, &x));
            let mix: Vec<f64> = (0..d).map(|j| ht[j] + am[j] * (hm[j] - ht[j])).collect();
            *ht = unit(&mix);
        }
    }
    let head = p("lm_head.weight");
    let sz: Vec<f64> = p("sz").iter().map(|x| x * sqrt_d).collect();
    h.iter().map(|ht| matvec(&head, v, ht).iter().zip(&sz).map(|(l, s)| l * s).collect()).collect()
}

fn max_rel_diff(model: &dyn LanguageModel, toks_t: &candle_core::Tensor) -> f64 {
    let out = model.forward(toks_t, &F64_CTX).unwrap();
    let got = values(&out.logits);
    let (b, t) = toks_t.dims2().unwrap();
    let ids = toks_t.to_vec2::<u32>().unwrap();
    let v = model.config().vocab;
    let mut worst = 0f64;
    for bi in 0..b {
        let want = reference(model, &ids[bi]);
        for ti in 0..t {
            for j in 0..v {
                let g = got[(bi * t + ti) * v + j];
                let w = want[ti][j];
                worst = worst.max((g - w).abs() / w.abs().max(1e-3));
            }
        }
    }
    worst
}

#[test]
fn forward_matches_the_f64_reference_for_several_alphas() {
    for alpha in [0.05, 0.3, 1.0, 0.0] {
        let mut c = cfg(Arch::NGpt, NormChoice::L2, 16, 2, 2, 23);
        c.alpha_init = alpha;
        let model = build(&c, DType::F64, 7, &Device::Cpu).unwrap();
        let d = max_rel_diff(model.as_ref(), &tokens(2, 7, 23, 1));
        println!("alpha {alpha}: max relative logit difference vs reference {d:.3e}");
        assert!(d < 1e-9, "alpha {alpha}: {d}");
    }
}

#[test]
fn init_invariants() {
    let c = cfg(Arch::NGpt, NormChoice::L2, 64, 4, 2, 256);
    let model = build(&c, DType::F32, 3, &Device::Cpu).unwrap();
    // Unit lines along the d_model axis (algorithms.md 1.4).
    let tol = unit_tolerance::<f32>();
    for p in model.params().iter().filter(|p| p.var.rank() == 2) {
        let cols = p.name.ends_with("c_proj.weight");
        for n in line_norms(p.var.as_tensor(), cols) {
            assert!((n - 1.0).abs() <= tol, "{}: line norm {n}", p.name);
        }
    }
    let ctx = ForwardCtx { compute: DType::F32, accum: Accum::F32, probes: true, fp8_norm_io: false, ops: OpPath::Auto };
    let out = model.forward(&tokens(4, 32, 256, 2), &ctx).unwrap();
    // Hidden states on the unit sphere after every layer.
    assert_eq!(out.probes.len(), 2);
    for (i, p) in out.probes.iter().enumerate() {
        assert!((p.residual_norm - 1.0).abs() < 1e-5, "layer {i}: {p:?}");
    }
    // Logits are cosines times s_z = 1.
    let l = values(&out.logits);
    let max = l.iter().fold(0f64, |m, x| m.max(x.abs()));
    println!("max |logit| at init = {max}");
    assert!(max <= 1.0 + 1e-5 && max > 0.1, "{max}");
}

#[test]
fn alpha_zero_is_the_identity_and_logits_are_embedding_cosines() {
    let mut c = cfg(Arch::NGpt, NormChoice::L2, 32, 4, 2, 50);
    c.alpha_init = 0.0;
    let model = build(&c, DType::F64, 5, &Device::Cpu).unwrap();
    let toks = tokens(2, 9, 50, 3);
    let out = model.forward(&toks, &F64_CTX).unwrap();
    let wte = values(model.params().get("transformer.wte.weight").unwrap().var.as_tensor());
    let head = values(model.params().get("lm_head.weight").unwrap().var.as_tensor());
    let got = values(&out.logits);
    let ids: Vec<u32> = toks.flatten_all().unwrap().to_vec1().unwrap();
    let mut worst = 0f64;
    for (pos, &id) in ids.iter().enumerate() {
        let e = &wte[id as usize * 32..(id as usize + 1) * 32];
        for vv in 0..50 {
            let want: f64 = (0..32).map(|j| e[j] * head[vv * 32 + j]).sum();
            worst = worst.max((got[pos * 50 + vv] - want).abs());
        }
    }
    assert!(worst < 1e-12, "{worst}");
}

#[test]
fn interop_changes_rope_and_mlp_but_keeps_the_sphere() {
    let mut c = cfg(Arch::NGpt, NormChoice::L2, 32, 4, 1, 40);
    let toks = tokens(1, 8, 40, 4);
    let paper = build(&c, DType::F64, 9, &Device::Cpu).unwrap().forward(&toks, &F64_CTX).unwrap();
    c.ngpt_code_interop = true;
    let code = build(&c, DType::F64, 9, &Device::Cpu).unwrap().forward(&toks, &F64_CTX).unwrap();
    let (a, b) = (values(&paper.logits), values(&code.logits));
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f64, f64::max);
    assert!(diff > 1e-6, "interop made no difference");
    assert!((code.probes[0].residual_norm - 1.0).abs() < 1e-12);
}
