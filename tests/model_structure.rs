//! Model structure: forward shape/dtype for every arch x norm x dtype, projections, safetensors
//! round trips, parameter names, anGPT factors, bad configurations.

use crate::model_common;

use candle_core::{DType, Device, Tensor};
use model_common::{cfg, line_norms, norms_for, tokens, values};
use normlab::model::{build, AngptFactors, Arch, ForwardCtx, LanguageModel, ModelError, NormChoice, OpPath};
use normlab::norms::nu::angpt::{angpt_table, AngptConfig};
use normlab::norms::nu::McConfig;
use normlab::norms::weight::unit_tolerance;
use normlab::norms::{bf16, f16, Accum, Element};

#[test]
fn forward_shape_and_dtype_for_every_arch_norm_and_dtype() {
    for arch in Arch::ALL {
        for norm in norms_for(arch) {
            for dt in [DType::F32, DType::BF16, DType::F16] {
                let c = cfg(arch, norm, 32, 4, 2, 64);
                let model = build(&c, dt, 1, &Device::Cpu).unwrap_or_else(|e| panic!("{arch:?} {norm:?} {dt:?}: {e}"));
                let ctx = ForwardCtx { compute: dt, accum: Accum::F32, probes: true, fp8_norm_io: false, ops: OpPath::Auto };
                let out = model.forward(&tokens(2, 16, 64, 0), &ctx).unwrap_or_else(|e| panic!("{arch:?} {norm:?} {dt:?}: {e}"));
                assert_eq!(out.logits.dims(), &[2, 16, 64]);
                assert_eq!(out.logits.dtype(), DType::F32);
                assert!(values(&out.logits).iter().all(|x| x.is_finite()), "{arch:?} {norm:?} {dt:?}");
                assert_eq!(out.probes.len(), 2);
                assert!(out.probes.iter().all(|p| p.residual_norm.is_finite() && p.attn_out_norm > 0.0 && p.mlp_out_norm > 0.0));
                let snap = model.telemetry().snapshot();
                assert!(snap.forward_calls > 0, "{arch:?} {norm:?}: the norms reported nothing");
                assert!(snap.is_clean(), "{arch:?} {norm:?} {dt:?}: {snap:?}");
            }
        }
    }
}

#[test]
fn mixed_precision_gives_f32_gradients_on_f32_masters() {
    for arch in Arch::ALL {
        let model = build(&cfg(arch, NormChoice::L2, 32, 4, 1, 64), DType::F32, 2, &Device::Cpu).unwrap();
        let ctx = ForwardCtx { compute: DType::BF16, accum: Accum::F32, probes: false, fp8_norm_io: false, ops: OpPath::Auto };
        let out = model.forward(&tokens(2, 8, 64, 1), &ctx).unwrap();
        assert!(out.probes.is_empty());
        let grads = out.logits.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        for p in model.params().iter() {
            let g = grads.get(&p.var).unwrap_or_else(|| panic!("{arch:?}: no gradient for {}", p.name));
            assert_eq!(g.dtype(), DType::F32, "{}", p.name);
        }
    }
}

fn scramble(model: &dyn LanguageModel) {
    for (i, p) in model.params().iter().enumerate() {
        if p.var.rank() == 2 {
            let t = p.var.as_tensor();
            // Deterministic "noise": 0.5 sin(0.7 j + i).
            let n = t.elem_count();
            let noise: Vec<f64> = (0..n).map(|j| 0.5 * (0.7 * j as f64 + i as f64).sin()).collect();
            let noise = Tensor::from_vec(noise, t.shape(), t.device()).unwrap().to_dtype(t.dtype()).unwrap();
            let s = (t.affine(1.0 + 0.7 * (i % 3) as f64, 0.0).unwrap() + noise).unwrap();
            p.var.set(&s).unwrap();
        }
    }
}

fn check_projection<T: Element>(dt: DType) {
    // nGPT: unit lines along d_model.
    let model = build(&cfg(Arch::NGpt, NormChoice::L2, 32, 4, 2, 64), dt, 4, &Device::Cpu).unwrap();
    scramble(model.as_ref());
    model.project().unwrap();
    for p in model.params().iter().filter(|p| p.var.rank() == 2) {
        for n in line_norms(p.var.as_tensor(), p.name.ends_with("c_proj.weight")) {
            assert!((n - 1.0).abs() <= unit_tolerance::<T>(), "{dt:?} {}: {n}", p.name);
        }
    }
    let before: Vec<Tensor> = model.params().iter().map(|p| p.var.as_tensor().copy().unwrap()).collect();
    model.project().unwrap();
    for (p, b) in model.params().iter().zip(&before) {
        assert_eq!(values(p.var.as_tensor()), values(b), "nGPT projection not idempotent: {}", p.name);
    }
    // anGPT: rows in the unit ball (exactly), or the whole block matrix in the Frobenius ball.
    for frob in [false, true] {
        let mut c = cfg(Arch::AnGpt, NormChoice::L2, 32, 4, 2, 64);
        c.angpt_frobenius_bound = frob;
        let model = build(&c, dt, 5, &Device::Cpu).unwrap();
        scramble(model.as_ref());
        model.project().unwrap();
        for p in model.params().iter().filter(|p| p.var.rank() == 2) {
            let table = p.name.contains("wte") || p.name.contains("lm_head");
            if frob && !table {
                let f = values(p.var.as_tensor()).iter().map(|x| x * x).sum::<f64>();
                assert!(f <= 1.0, "{dt:?} {}: ||W||_F^2 = {f}", p.name);
            } else {
                let norms = line_norms(p.var.as_tensor(), false);
                assert!(norms.iter().all(|&n| n <= 1.0), "{dt:?} {}: max row norm {:?}", p.name, norms.iter().cloned().fold(0f64, f64::max));
                assert!(norms.iter().any(|&n| n > 1.0 - 4.0 * unit_tolerance::<T>()), "{dt:?} {}: scrambled rows should sit on the bound", p.name);
            }
        }
        let before: Vec<Tensor> = model.params().iter().map(|p| p.var.as_tensor().copy().unwrap()).collect();
        model.project().unwrap();
        for (p, b) in model.params().iter().zip(&before) {
            assert_eq!(values(p.var.as_tensor()), values(b), "anGPT projection not idempotent: {}", p.name);
        }
    }
}

#[test]
fn projections_are_exact_and_idempotent_in_every_storage_dtype() {
    check_projection::<f32>(DType::F32);
    check_projection::<f16>(DType::F16);
    check_projection::<bf16>(DType::BF16);
}

#[test]
fn gpt_plus_project_is_a_no_op() {
    let model = build(&cfg(Arch::GptPlus, NormChoice::L2, 32, 4, 1, 64), DType::F32, 6, &Device::Cpu).unwrap();
    let before: Vec<Vec<f64>> = model.params().iter().map(|p| values(p.var.as_tensor())).collect();
    model.project().unwrap();
    for (p, b) in model.params().iter().zip(&before) {
        assert_eq!(&values(p.var.as_tensor()), b);
    }
}

#[test]
fn safetensors_round_trip_is_exact() {
    let dir = std::env::temp_dir().join(format!("normlab-model-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for arch in Arch::ALL {
        for dt in [DType::F32, DType::BF16] {
            let c = cfg(arch, NormChoice::L2, 32, 4, 2, 64);
            let a = build(&c, dt, 11, &Device::Cpu).unwrap();
            let b = build(&c, dt, 12, &Device::Cpu).unwrap();
            let path = dir.join(format!("{}-{dt:?}.safetensors", arch.name()));
            a.params().save_safetensors(&path).unwrap();
            assert_ne!(values(a.params().iter().next().unwrap().var.as_tensor()), values(b.params().iter().next().unwrap().var.as_tensor()));
            b.params().load_safetensors(&path, &Device::Cpu).unwrap();
            for (pa, pb) in a.params().iter().zip(b.params().iter()) {
                assert_eq!(pa.name, pb.name);
                assert_eq!(values(pa.var.as_tensor()), values(pb.var.as_tensor()), "{arch:?} {}", pa.name);
            }
            // The layers hold the same Vars: the forward passes agree bit for bit.
            let ctx = ForwardCtx { compute: dt, accum: Accum::F32, probes: false, fp8_norm_io: false, ops: OpPath::Auto };
            let t = tokens(2, 8, 64, 5);
            assert_eq!(values(&a.forward(&t, &ctx).unwrap().logits), values(&b.forward(&t, &ctx).unwrap().logits));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn parameter_names_and_shapes_mirror_nvidia_ngpt() {
    let (d, v) = (32, 64);
    let model = build(&cfg(Arch::NGpt, NormChoice::L2, d, 4, 2, v), DType::F32, 1, &Device::Cpu).unwrap();
    let shape = |n: &str| model.params().get(n).unwrap_or_else(|| panic!("missing {n}")).var.dims().to_vec();
    assert_eq!(shape("transformer.wte.weight"), [v, d]);
    assert_eq!(shape("lm_head.weight"), [v, d]);
    assert_eq!(shape("sz"), [v]);
    for i in 0..2 {
        for m in ["query", "key", "value", "att_c_proj"] {
            assert_eq!(shape(&format!("transformer.h.{i}.{m}.weight")), [d, d]);
        }
        assert_eq!(shape(&format!("transformer.h.{i}.c_fc.weight")), [8 * d, d]);
        assert_eq!(shape(&format!("transformer.h.{i}.mlp_c_proj.weight")), [d, 4 * d]);
        for s in ["attn_alpha", "mlp_alpha", "sqk"] {
            assert_eq!(shape(&format!("transformer.h.{i}.{s}")), [d]);
        }
        assert_eq!(shape(&format!("transformer.h.{i}.suv")), [8 * d]);
    }
    assert_eq!(model.params().len(), 3 + 2 * 10);
    // Effective scalars at init (reparametrisation): stored = scale.
    let st = |n: &str| values(model.params().get(n).unwrap().var.as_tensor())[0];
    assert!((st("sz") - 1.0 / (d as f64).sqrt()).abs() < 1e-7);
    assert!((st("transformer.h.0.attn_alpha") - 1.0 / (d as f64).sqrt()).abs() < 1e-7);
    assert_eq!(st("transformer.h.0.suv"), 1.0);
}

#[test]
fn angpt_factors_match_the_nu_engine() {
    let c = cfg(Arch::AnGpt, NormChoice::L2, 64, 4, 2, 256);
    let f = AngptFactors::for_config(&c).unwrap();
    assert!((f.nu_qkv - 2.0).abs() < 1e-12 && (f.nu_p - 0.5).abs() < 1e-12);
    assert!((f.nu_uz - 0.5).abs() < 1e-12 && (f.nu_d - 2.0).abs() < 1e-12);
    let table = angpt_table(&AngptConfig::new(64, 4), &McConfig { samples: 20_000, seed: 3, ..McConfig::default() }, None).unwrap();
    let row = |n: &str| table.rows.iter().find(|r| r.name == n).unwrap();
    for (name, ours) in [("nu_qkv", f.nu_qkv), ("nu_p", f.nu_p), ("nu_uz", f.nu_uz), ("nu_acf", f.nu_acf), ("nu_d", f.nu_d)] {
        let r = row(name);
        assert!((r.closed.unwrap() - ours).abs() < 1e-12, "{name}: {} vs {ours}", r.closed.unwrap());
        let z = (r.mc.nu_rms.value - ours) / r.mc.nu_rms.se;
        println!("{name}: {ours:.5} (Monte Carlo {:.5} +- {:.5}, z = {z:.2})", r.mc.nu_rms.value, r.mc.nu_rms.se);
        assert!(z.abs() < 5.0, "{name}: z = {z}");
    }
    // The paper's ~3.74 at its dimensions (gate scale sqrt(d_model)).
    let big = AngptFactors::for_config(&cfg(Arch::AnGpt, NormChoice::L2, 1024, 16, 1, 256)).unwrap();
    println!("nu_acf: d=64 {:.4}, d=1024 {:.4}", f.nu_acf, big.nu_acf);
    assert!((big.nu_acf - 3.72).abs() < 0.01 && (f.nu_acf - 3.72).abs() < 0.02);
}

#[test]
fn angpt_keeps_the_residual_stream_near_unit_norm_at_init() {
    for norm in [NormChoice::L2, NormChoice::Nu] {
        let model = build(&cfg(Arch::AnGpt, norm, 64, 4, 4, 256), DType::F32, 8, &Device::Cpu).unwrap();
        let ctx = ForwardCtx { compute: DType::F32, accum: Accum::F32, probes: true, fp8_norm_io: false, ops: OpPath::Auto };
        let out = model.forward(&tokens(4, 32, 256, 6), &ctx).unwrap();
        for (i, p) in out.probes.iter().enumerate() {
            println!("anGPT {norm:?} layer {i}: ||h|| {:.4}, attn {:.4}, mlp {:.4}", p.residual_norm, p.attn_out_norm, p.mlp_out_norm);
            assert!((0.75..1.25).contains(&p.residual_norm), "{norm:?} layer {i}: {p:?}");
        }
    }
}

#[test]
fn bad_configs_give_typed_errors() {
    let dev = Device::Cpu;
    let base = cfg(Arch::GptPlus, NormChoice::L2, 64, 4, 2, 256);
    let err = |c: &normlab::model::ModelConfig| build(c, DType::F32, 0, &dev).err().expect("should fail");
    let mut c = base.clone();
    c.n_heads = 3;
    assert!(matches!(err(&c), ModelError::InvalidConfig { field: "n_heads", .. }), "{}", err(&c));
    println!("{}", err(&c));
    for f in ["vocab", "d_model", "n_heads", "n_layers", "mlp_ratio"] {
        let mut c = base.clone();
        match f {
            "vocab" => c.vocab = 0,
            "d_model" => c.d_model = 0,
            "n_heads" => c.n_heads = 0,
            "n_layers" => c.n_layers = 0,
            _ => c.mlp_ratio = 0,
        }
        assert!(matches!(err(&c), ModelError::InvalidConfig { field, .. } if field == f), "{f}: {}", err(&c));
    }
    let mut c = base.clone();
    c.norm = NormChoice::Nu;
    assert!(matches!(err(&c), ModelError::Unsupported { arch: "gpt_plus", .. }));
    for k in [0, 17] {
        let mut c = base.clone();
        c.norm = NormChoice::TopK { k };
        assert!(matches!(err(&c), ModelError::Unsupported { .. }), "k = {k}");
    }
    let mut c = base.clone();
    c.arch = Arch::AnGpt;
    c.ngpt_code_interop = true;
    assert!(matches!(err(&c), ModelError::Unsupported { arch: "angpt", .. }));
    let mut c = base.clone();
    c.norm_eps = f64::NAN;
    assert!(matches!(err(&c), ModelError::InvalidConfig { field: "norm_eps", .. }));
    assert!(matches!(build(&base, DType::U8, 0, &dev).err().unwrap(), ModelError::StorageDType(DType::U8)));
    assert!(matches!(NormChoice::parse("l3"), Err(ModelError::UnknownNorm(s)) if s == "l3"));
    assert_eq!(NormChoice::parse("topk8").unwrap(), NormChoice::TopK { k: 8 });
    assert_eq!(NormChoice::parse("LInf").unwrap(), NormChoice::LInf);
    assert!(matches!(Arch::parse("gpt5"), Err(ModelError::UnknownArch(_))));
    // Token ids outside the vocabulary are an error, not a panic.
    let model = build(&base, DType::F32, 0, &dev).unwrap();
    let bad = Tensor::new(&[[1u32, 256]], &dev).unwrap();
    let e = model.forward(&bad, &ForwardCtx { compute: DType::F32, accum: Accum::F32, probes: false, fp8_norm_io: false, ops: OpPath::Auto }).err().unwrap();
    assert!(e.to_string().contains("256"), "{e}");
}
