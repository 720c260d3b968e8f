//! Finite-difference gradients of a small model of every architecture and norm choice (f64
//! storage, f64 compute, f64 accumulation), and a short training run per architecture.

use crate::model_common;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use model_common::{cfg, norms_for, tokens, values};
use normlab::model::{build, Arch, ForwardCtx, LanguageModel, OpPath};
use normlab::norms::Accum;

const CTX: ForwardCtx = ForwardCtx { compute: DType::F64, accum: Accum::F64, probes: false, fp8_norm_io: false, ops: OpPath::Auto };

/// `L = sum(logits * C)` with a fixed pseudo-random C.
fn loss(model: &dyn LanguageModel, toks: &Tensor, c: &Tensor) -> Tensor {
    let logits = model.forward(toks, &CTX).unwrap().logits.to_dtype(DType::F64).unwrap();
    (logits * c).unwrap().sum_all().unwrap()
}

fn set_entry(var: &Var, idx: usize, value: f64) {
    let mut v = values(var.as_tensor());
    v[idx] = value;
    var.set(&Tensor::from_vec(v, var.shape(), var.device()).unwrap()).unwrap();
}

#[test]
fn gradients_match_central_differences() {
    let (b, t, vocab) = (2, 5, 11);
    let toks = tokens(b, t, vocab, 9);
    let cw: Vec<f64> = (0..b * t * vocab).map(|i| (1.3 * i as f64).sin()).collect();
    let c = Tensor::from_vec(cw, (b, t, vocab), &Device::Cpu).unwrap();
    let mut checked = 0usize;
    for arch in Arch::ALL {
        for norm in norms_for(arch) {
            let mut conf = cfg(arch, norm, 8, 2, 1, vocab);
            conf.mlp_ratio = 2;
            conf.alpha_init = 0.3;
            let model = build(&conf, DType::F64, 21, &Device::Cpu).unwrap();
            let grads = loss(model.as_ref(), &toks, &c).backward().unwrap();
            let mut worst = 0f64;
            for (pi, p) in model.params().iter().enumerate() {
                let g = values(grads.get(&p.var).unwrap_or_else(|| panic!("{arch:?} {norm:?}: no gradient for {}", p.name)));
                let n = g.len();
                for s in 0..3 {
                    let idx = (s * 7919 + pi * 31) % n;
                    let x0 = values(p.var.as_tensor())[idx];
                    let h = 1e-5 * x0.abs().max(0.1);
                    set_entry(&p.var, idx, x0 + h);
                    let lp = loss(model.as_ref(), &toks, &c).to_scalar::<f64>().unwrap();
                    set_entry(&p.var, idx, x0 - h);
                    let lm = loss(model.as_ref(), &toks, &c).to_scalar::<f64>().unwrap();
                    set_entry(&p.var, idx, x0);
                    let fd = (lp - lm) / (2.0 * h);
                    let err = (fd - g[idx]).abs() / g[idx].abs().max(1e-3);
                    assert!(err < 1e-5, "{arch:?} {norm:?} {}[{idx}]: autograd {} vs finite difference {fd}", p.name, g[idx]);
                    worst = worst.max(err);
                    checked += 1;
                }
            }
            println!("{arch:?} {norm:?}: worst relative gradient error {worst:.2e}");
        }
    }
    println!("{checked} gradient entries checked");
}

#[test]
fn a_short_training_run_lowers_the_loss_of_every_arch() {
    let (b, t, vocab) = (8, 32, 64);
    let toks = tokens(b, t + 1, vocab, 3);
    let x = toks.narrow(1, 0, t).unwrap().contiguous().unwrap();
    let y = toks.narrow(1, 1, t).unwrap().flatten_all().unwrap();
    for arch in Arch::ALL {
        let model = build(&cfg(arch, normlab::model::NormChoice::L2, 64, 4, 2, vocab), DType::F32, 5, &Device::Cpu).unwrap();
        let vars: Vec<Var> = model.params().iter().map(|p| p.var.clone()).collect();
        let mut opt = AdamW::new(vars, ParamsAdamW { lr: 3e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0 }).unwrap();
        let ctx = ForwardCtx { compute: DType::F32, accum: Accum::F32, probes: false, fp8_norm_io: false, ops: OpPath::Auto };
        let start = std::time::Instant::now();
        let mut first = None;
        let mut last = 0.0;
        for _ in 0..40 {
            let logits = model.forward(&x, &ctx).unwrap().logits.reshape((b * t, vocab)).unwrap();
            let l = candle_nn::loss::cross_entropy(&logits, &y).unwrap();
            opt.backward_step(&l).unwrap();
            model.project().unwrap();
            last = l.to_scalar::<f32>().unwrap();
            first.get_or_insert(last);
        }
        let first = first.unwrap();
        println!("{arch:?}: loss {first:.3} -> {last:.3} in 40 steps, {:.1} ms/step (d 64, 2 layers, B 8, T 32)", start.elapsed().as_secs_f64() * 25.0);
        assert!(last < 0.8 * first, "{arch:?}: {first} -> {last}");
    }
}
