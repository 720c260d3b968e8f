//! The composed op path (what a non-CPU device runs: `OpPath::Auto` off the CPU) forced on the
//! CPU with `OpPath::Composed`, against the fused path (`OpPath::Fused`, the CPU custom ops):
//! logits and every parameter gradient of each architecture and norm choice, in f32, f64 and
//! bf16 mixed precision; a short training run of each architecture through the real training
//! step; and the typed refusals of what no path runs on a device (`model::check_device`).

use crate::model_common;

use candle_core::{DType, Device, DeviceLocation, Tensor};
use model_common::{cfg, norms_for, tokens, values};
use normlab::data::Batch;
use normlab::model::{build, check_device, Arch, ForwardCtx, LanguageModel, ModelConfig, ModelError, NormChoice, OpPath};
use normlab::norms::Accum;
use normlab::ops::OpsError;
use normlab::train::step::Trainer;
use normlab::train::{Precision, TrainConfig};

const CUDA: DeviceLocation = DeviceLocation::Cuda { gpu_id: 0 };

/// `max |a - b| / max |b|`.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let m = b.iter().fold(0f64, |m, v| m.max(v.abs()));
    let d = a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((x - y).abs()));
    if m == 0.0 {
        d
    } else {
        d / m
    }
}

/// A tiny config: d 16, 2 heads (d_h 8), 2 layers, r = 32, vocab 23, alpha 0.3 (so both LERP
/// inputs matter).
fn tiny(arch: Arch, norm: NormChoice) -> ModelConfig {
    let mut c = cfg(arch, norm, 16, 2, 2, 23);
    c.mlp_ratio = 2;
    c.alpha_init = 0.3;
    c
}

/// Logits and every parameter gradient of `L = sum(logits * C)` under `ctx`.
fn run(model: &dyn LanguageModel, toks: &Tensor, c: &Tensor, ctx: ForwardCtx) -> (Vec<f64>, Vec<(String, Vec<f64>)>) {
    let logits = model.forward(toks, &ctx).unwrap().logits;
    let grads = (logits.to_dtype(DType::F64).unwrap() * c).unwrap().sum_all().unwrap().backward().unwrap();
    let g = model
        .params()
        .iter()
        .map(|p| (p.name.clone(), values(grads.get(&p.var).unwrap_or_else(|| panic!("no gradient for {}", p.name)))))
        .collect();
    (values(&logits), g)
}

/// Both paths on one model: the worst relative difference (to each tensor's max) of the logits
/// and of the gradients, each asserted below `tol`.
fn compare(conf: &ModelConfig, storage: DType, ctx: ForwardCtx, tol: f64) -> (f64, f64) {
    let what = format!("{:?} {} storage {storage:?} compute {:?}", conf.arch, conf.norm.name(), ctx.compute);
    let (b, t) = (2, 7);
    let toks = tokens(b, t, conf.vocab, 5);
    let cw: Vec<f64> = (0..b * t * conf.vocab).map(|i| (1.3 * i as f64).sin()).collect();
    let c = Tensor::from_vec(cw, (b, t, conf.vocab), &Device::Cpu).unwrap();
    let model = build(conf, storage, 21, &Device::Cpu).unwrap();
    let (lf, gf) = run(model.as_ref(), &toks, &c, ctx.with_ops(OpPath::Fused));
    let (lc, gc) = run(model.as_ref(), &toks, &c, ctx.with_ops(OpPath::Composed));
    let dl = rel(&lc, &lf);
    assert!(dl <= tol, "{what}: logits differ by {dl:e} (relative to the max)");
    let mut dg = 0f64;
    for ((name, a), (_, b)) in gf.iter().zip(&gc) {
        let e = rel(b, a);
        assert!(e <= tol, "{what}: gradient of {name} differs by {e:e} (relative to its max)");
        dg = dg.max(e);
    }
    (dl, dg)
}

/// Every architecture and norm choice (top-k with k = 2, nu where the arch has it; nGPT also
/// with `ngpt_code_interop`, GPT+ also without QK-norm), f32 and f64.
///
/// Tolerances, relative to each tensor's max: the two paths compute the same expressions in
/// the same dtype and differ only in the order of sums and the form of the backward (a few
/// ulp per op), amplified through two layers of norms, softmaxes and the logits' matmul by a
/// modest factor: f32 1e-5 (2^-23 is 1.2e-7: about 80 ulp; observed below 2e-6), f64 1e-13
/// (observed below 1e-14).
#[test]
fn composed_path_matches_the_fused_path() {
    let mut cases = Vec::new();
    for arch in Arch::ALL {
        for norm in norms_for(arch) {
            cases.push(tiny(arch, norm));
        }
    }
    cases.push(ModelConfig { ngpt_code_interop: true, ..tiny(Arch::NGpt, NormChoice::L2) });
    cases.push(ModelConfig { qk_norm: false, ..tiny(Arch::GptPlus, NormChoice::L1) });
    for (dt, accum, tol) in [(DType::F32, Accum::F32, 1e-5), (DType::F64, Accum::F64, 1e-13)] {
        let mut worst = (0f64, 0f64);
        for conf in &cases {
            let (l, g) = compare(conf, dt, ForwardCtx::new(dt, accum), tol);
            println!("{dt:?} {:?} {}{}: logits {l:.1e}, gradients {g:.1e}", conf.arch, conf.norm.name(), if conf.ngpt_code_interop { " (interop)" } else if !conf.qk_norm { " (no qk-norm)" } else { "" });
            worst = (worst.0.max(l), worst.1.max(g));
        }
        println!("{dt:?}: worst relative difference, logits {:.2e}, gradients {:.2e} ({} models)", worst.0, worst.1, cases.len());
    }
}

/// bf16 mixed precision (f32 masters, bf16 compute, f32 norm statistics): the composed norms
/// and ops compute in f32 on the bf16 activations and round once, like the fused ones, so the
/// forward comes out bitwise equal here. In the backward an f32 difference of a few ulp flips a
/// bf16 rounding now and then, and that one-ulp difference (2^-8 relative) travels on through
/// the layers. Bound: 5e-2 of each tensor's max, and no more than bf16's own error here (the
/// fused path in bf16 against the same model computed in f32): the composed path is as close to
/// the fused one as bf16 arithmetic allows (observed: composed vs fused below 2e-2, bf16 vs f32
/// 1.5e-2 to 5e-1).
#[test]
fn composed_path_matches_the_fused_path_in_bf16_mixed() {
    for arch in Arch::ALL {
        for norm in [NormChoice::L2, NormChoice::LInf] {
            let conf = tiny(arch, norm);
            let (l, g) = compare(&conf, DType::F32, ForwardCtx::new(DType::BF16, Accum::F32), 5e-2);
            // The scale of bf16's own error here: the fused path in bf16 against f32 compute.
            let (b, t) = (2, 7);
            let toks = tokens(b, t, conf.vocab, 5);
            let c = Tensor::from_vec((0..b * t * conf.vocab).map(|i| (1.3 * i as f64).sin()).collect::<Vec<_>>(), (b, t, conf.vocab), &Device::Cpu).unwrap();
            let model = build(&conf, DType::F32, 21, &Device::Cpu).unwrap();
            let (lb, gb) = run(model.as_ref(), &toks, &c, ForwardCtx::new(DType::BF16, Accum::F32).with_ops(OpPath::Fused));
            let (lf, gf) = run(model.as_ref(), &toks, &c, ForwardCtx::new(DType::F32, Accum::F32).with_ops(OpPath::Fused));
            let noise_g = gb.iter().zip(&gf).map(|((_, a), (_, b))| rel(a, b)).fold(0f64, f64::max);
            println!("bf16 mixed {arch:?} {}: composed vs fused: logits {l:.1e}, gradients {g:.1e}; fused bf16 vs f32: logits {:.1e}, gradients {noise_g:.1e}", norm.name(), rel(&lb, &lf));
            assert!(l <= rel(&lb, &lf) && g <= noise_g, "{arch:?} {}: the paths differ by more than bf16's own error", norm.name());
        }
    }
}

/// 20 steps of the real training step (f32 gradients, clipping, AdamW, projection) of each
/// architecture, once fused and once composed, on the same batches: the losses track each other
/// (1e-4 relative: the f32 differences of one step, ~1e-6, grow slowly as the two runs' weights
/// drift apart by Adam's normalised updates; observed below 1e-5), and both learn.
#[test]
fn training_through_the_composed_path_tracks_the_fused_path() {
    let (b, t) = (4, 16);
    let train = TrainConfig { lr: 3e-3, grad_clip: 1.0, ..TrainConfig::default() };
    for arch in Arch::ALL {
        let mut conf = cfg(arch, NormChoice::L2, 32, 4, 2, 48);
        conf.mlp_ratio = 2;
        let mut losses = Vec::new();
        for ops in [OpPath::Fused, OpPath::Composed] {
            let model = build(&conf, DType::F32, 3, &Device::Cpu).unwrap();
            let mut trainer = Trainer::new(model.as_ref(), &train).unwrap().with_ops(ops);
            assert_eq!(trainer.ctx().ops, ops);
            let mut l = Vec::new();
            for s in 0..20u32 {
                let toks = tokens(b, t + 1, conf.vocab, s % 4);
                let batch = Batch { inputs: toks.narrow(1, 0, t).unwrap().contiguous().unwrap(), targets: toks.narrow(1, 1, t).unwrap().contiguous().unwrap() };
                let st = trainer.step(model.as_ref(), &batch, train.lr).unwrap();
                assert!(!st.skipped, "{arch:?} {ops:?} step {s}");
                l.push(st.loss);
            }
            losses.push(l);
        }
        let worst = losses[0].iter().zip(&losses[1]).map(|(a, b)| (a - b).abs() / a.abs()).fold(0f64, f64::max);
        let (first, last) = (losses[1][0], losses[1][16..].iter().sum::<f64>() / 4.0);
        println!("{arch:?}: loss {first:.4} -> {last:.4} composed; worst relative loss difference to fused over 20 steps {worst:.2e}");
        assert!(worst < 1e-4, "{arch:?}: fused {:?} vs composed {:?}", losses[0], losses[1]);
        assert!(last < first - 0.1, "{arch:?}: the composed run does not learn: {:?}", losses[1]);
    }
}

fn device_unsupported(r: Result<(), ModelError>) -> String {
    match r {
        Err(ModelError::Ops(e @ OpsError::DeviceUnsupported { .. })) => e.to_string(),
        other => panic!("expected ModelError::Ops(OpsError::DeviceUnsupported), got {other:?}"),
    }
}

/// What runs where, as `check_device` sees it: the precision modes' contexts on the CPU and on
/// CUDA (described, no GPU needed: the check takes a device location).
#[test]
fn check_device_refuses_what_no_path_runs() {
    let conf = tiny(Arch::NGpt, NormChoice::TopK { k: 2 });
    let ctx_of = |p: Precision, fp8: bool| Trainer::ctx_for(&TrainConfig { precision: p, fp8_norm_io: fp8, ..TrainConfig::default() });
    for p in [Precision::F32, Precision::Bf16Mixed, Precision::F16Mixed, Precision::PureBf16, Precision::PureF16] {
        // The CPU runs everything, on every path.
        check_device(&conf, &ctx_of(p, false), &DeviceLocation::Cpu).unwrap();
        check_device(&conf, &ctx_of(p, true), &DeviceLocation::Cpu).unwrap();
        let pure = matches!(p, Precision::PureBf16 | Precision::PureF16);
        let on_cuda = check_device(&conf, &ctx_of(p, false), &CUDA);
        if pure {
            let e = device_unsupported(on_cuda);
            assert!(e.contains(p.accum().name()) && e.contains("accumulator") && e.contains("cuda:0"), "{e}");
            // The forced composed path on the CPU is the same refusal.
            let e = device_unsupported(check_device(&conf, &ctx_of(p, false).with_ops(OpPath::Composed), &DeviceLocation::Cpu));
            assert!(e.contains(p.accum().name()) && e.contains("cpu"), "{e}");
        } else {
            on_cuda.unwrap();
            check_device(&conf, &ctx_of(p, false).with_ops(OpPath::Composed), &DeviceLocation::Cpu).unwrap();
        }
        // fp8 storage is a CPU op.
        let e = device_unsupported(check_device(&conf, &ctx_of(p, true), &CUDA));
        assert!(e.contains("fp8") && e.contains("cuda:0"), "{e}");
    }
    // The fused custom ops are CPU-only.
    let e = device_unsupported(check_device(&conf, &ForwardCtx::new(DType::F32, Accum::F32).with_ops(OpPath::Fused), &CUDA));
    assert!(e.contains("Fused") && e.contains("cuda:0"), "{e}");
    // A composed top-k wider than CUDA's arg-sort takes: only the d-wide sites (d_h = 4200).
    let wide = ModelConfig { d_model: 8400, n_heads: 2, ..tiny(Arch::GptPlus, NormChoice::TopK { k: 4 }) };
    let e = device_unsupported(check_device(&wide, &ForwardCtx::new(DType::F32, Accum::F32), &CUDA));
    assert!(e.contains("top-k") && e.contains("8400") && e.contains("F32") && e.contains("cuda:0"), "{e}");
    check_device(&wide, &ForwardCtx::new(DType::BF16, Accum::F32), &CUDA).unwrap();
    // An invalid config is reported as such, not as a device problem.
    let bad = ModelConfig { n_heads: 3, ..tiny(Arch::GptPlus, NormChoice::L2) };
    assert!(matches!(check_device(&bad, &ForwardCtx::new(DType::F32, Accum::F32), &CUDA), Err(ModelError::InvalidConfig { .. })));
}

/// The forward itself refuses a pure accumulator on the composed path (the same rule as the
/// check), with an error naming it, and runs the pure modes on the fused CPU path.
#[test]
fn composed_forward_refuses_pure_accumulators() {
    let conf = tiny(Arch::GptPlus, NormChoice::Rms);
    let model = build(&conf, DType::BF16, 1, &Device::Cpu).unwrap();
    let toks = tokens(1, 5, conf.vocab, 2);
    let ctx = ForwardCtx::new(DType::BF16, Accum::PureBf16);
    model.forward(&toks, &ctx).unwrap();
    let e = model.forward(&toks, &ctx.with_ops(OpPath::Composed)).unwrap_err().to_string();
    assert!(e.contains("pure-bf16") && e.contains("not supported on cpu"), "{e}");
}
