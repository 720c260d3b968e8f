//! The training loop on a small test-only model (tests/train_common): records, evaluation,
//! projection, exact resume, corrupt checkpoints, dynamic loss scaling under real f16
//! overflow, divergence, accumulation-overflow telemetry.

use crate::train_common;

use std::path::Path;

use candle_core::Device;
use normlab::train::loss_scale::LossScaler;
use normlab::train::metrics::read_records;
use normlab::train::schedule::Schedule;
use normlab::train::{metrics_path, run_model, run_segment, summary_path, Precision, Record, RunOptions, RunSummary, Segment, TrainError};
use train_common::{fresh_dir, tiny_config, TinyModel};

const D: usize = 16;

fn opts(resume: bool) -> RunOptions {
    RunOptions { device: Device::Cpu, resume, progress: false }
}

fn records(out: &Path) -> Vec<Record> {
    read_records(&metrics_path(out)).unwrap()
}

/// `summary.json` is exactly the returned summary, as pretty JSON (compared as text: serde_json's
/// default float parsing may be 1 ulp off).
fn assert_summary_file(out: &Path, s: &RunSummary) {
    let file = std::fs::read_to_string(summary_path(out)).unwrap();
    assert_eq!(file, serde_json::to_string_pretty(s).unwrap());
}

/// The metrics lines with the timing fields (the only ones that may differ between two runs of
/// the same config) removed.
fn untimed_metrics(out: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(metrics_path(out)).unwrap();
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            for k in ["step_time_s", "tokens_per_s", "wall_s"] {
                o.remove(k);
            }
            v
        })
        .collect()
}

#[test]
fn f32_run_learns_logs_every_step_and_projects() {
    let cfg = tiny_config(Precision::F32, 40);
    let out = fresh_dir("train_f32_learns");
    let model = TinyModel::for_config(&cfg, D);
    let s = run_model(&model, &cfg, "tiny-f32", &out, &opts(false)).unwrap();
    let recs = records(&out);
    let steps: Vec<_> = recs.iter().filter_map(|r| if let Record::Step(s) = r { Some(s.clone()) } else { None }).collect();
    let evals: Vec<_> = recs.iter().filter_map(|r| if let Record::Eval(e) = r { Some(e.clone()) } else { None }).collect();
    assert_eq!(steps.len(), 40);
    let sched = Schedule { lr: 1e-2, min_lr: 0.0, warmup_steps: 0, total_steps: 40 };
    for (i, st) in steps.iter().enumerate() {
        assert_eq!(st.step, i as u64 + 1);
        // serde_json's default float parsing may be 1 ulp off.
        assert!((st.lr - sched.lr_at(i as u64)).abs() <= 1e-15 * st.lr, "{} vs {}", st.lr, sched.lr_at(i as u64));
        assert!(st.loss.is_finite() && st.grad_norm.is_finite() && !st.skipped && st.loss_scale.is_none());
        assert_eq!(st.counters, Default::default(), "f32 accumulation overflows nothing here");
    }
    assert_eq!(evals.iter().map(|e| e.step).collect::<Vec<_>>(), vec![8, 16, 24, 32, 40]);
    for e in &evals {
        assert_eq!(e.layers.len(), 1);
        assert!(e.layers[0].attn_out_norm > 0.0);
        assert_eq!(e.adam_m_var.keys().cloned().collect::<Vec<_>>(), vec!["embedding", "matrix", "scale"]);
    }
    // Learning: the batch loss falls from ln(256) ~ 5.55 and the validation loss with it.
    let first = steps[0].loss;
    let last: f64 = steps[35..].iter().map(|s| s.loss).sum::<f64>() / 5.0;
    assert!(first > 5.0 && last < first - 1.0, "first {first}, last {last}");
    assert!(evals[4].val_loss < evals[0].val_loss, "{:?}", evals.iter().map(|e| e.val_loss).collect::<Vec<_>>());
    // The loop projected after the steps: embedding rows are back on the unit sphere.
    assert!(model.emb_row_norm_error() < 1e-6, "{}", model.emb_row_norm_error());
    assert_summary_file(&out, &s);
    assert_eq!((s.steps, s.tokens, s.skipped_steps, s.diverged_at), (40, 40 * 64, 0, None));
    assert_eq!(s.final_val_loss, Some(evals[4].val_loss));
    assert_eq!(s.name, "tiny-f32");
    assert!(s.median_step_time_s > 0.0 && s.tokens_per_s > 0.0);
    // The same directory again without --resume is refused, naming it.
    let e = run_model(&TinyModel::for_config(&cfg, D), &cfg, "x", &out, &opts(false)).unwrap_err();
    assert!(matches!(e, TrainError::OutDirInUse { .. }), "{e}");
    assert!(e.to_string().contains("train_f32_learns"), "{e}");
}

/// A run paused after 10 steps and resumed (with a stale line appended after the checkpoint, as
/// an interrupted process would leave) ends with the same parameter and optimizer bytes, the
/// same metrics (timing fields aside) and the same summary as an uninterrupted run.
fn check_resume(precision: Precision, tag: &str) {
    let mut cfg = tiny_config(precision, 24);
    cfg.train.log_every = 3;
    cfg.train.checkpoint_every = 4;
    let a = fresh_dir(&format!("train_resume_a_{tag}"));
    let sa = run_model(&TinyModel::for_config(&cfg, D), &cfg, "r", &a, &opts(false)).unwrap();

    let b = fresh_dir(&format!("train_resume_b_{tag}"));
    let seg = run_segment(&TinyModel::for_config(&cfg, D), &cfg, "r", &b, &opts(false), Some(10)).unwrap();
    assert_eq!(seg, Segment::Paused { step: 10 });
    assert!(!summary_path(&b).exists());
    std::fs::write(
        metrics_path(&b),
        [std::fs::read(metrics_path(&b)).unwrap(), b"{\"kind\":\"diverged\",\"step\":99,\"loss\":1.0}\n".to_vec()].concat(),
    )
    .unwrap();
    // A fresh model (initialised from the seed, as after a restart) picks up the checkpoint.
    let sb = run_model(&TinyModel::for_config(&cfg, D), &cfg, "r", &b, &opts(true)).unwrap();

    for f in ["params.safetensors", "optimizer.safetensors"] {
        let fa = std::fs::read(a.join("checkpoint").join(f)).unwrap();
        let fb = std::fs::read(b.join("checkpoint").join(f)).unwrap();
        assert!(fa == fb, "{tag}: {f} differs after resume");
    }
    assert_eq!(untimed_metrics(&a), untimed_metrics(&b), "{tag}: metrics differ");
    let strip = |s: &RunSummary| RunSummary { median_step_time_s: 0.0, tokens_per_s: 0.0, wall_s: 0.0, ..s.clone() };
    assert_eq!(strip(&sa), strip(&sb));
    assert_eq!(sa.steps, 24);
}

#[test]
fn resume_is_bit_identical_f32() {
    check_resume(Precision::F32, "f32");
}

#[test]
fn resume_is_bit_identical_f16_mixed_and_pure_f16() {
    check_resume(Precision::F16Mixed, "f16m");
    check_resume(Precision::PureF16, "pf16");
}

#[test]
fn corrupt_checkpoint_is_refused_naming_the_file() {
    let cfg = tiny_config(Precision::F32, 12);
    let out = fresh_dir("train_corrupt");
    let m = TinyModel::for_config(&cfg, D);
    assert_eq!(run_segment(&m, &cfg, "c", &out, &opts(false), Some(5)).unwrap(), Segment::Paused { step: 5 });
    let ck = out.join("checkpoint");
    let resume = || run_model(&TinyModel::for_config(&cfg, D), &cfg, "c", &out, &opts(true)).unwrap_err().to_string();

    // One flipped bit in the parameters.
    let p = ck.join("params.safetensors");
    let good = std::fs::read(&p).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&p, &bad).unwrap();
    let e = resume();
    assert!(e.contains("params.safetensors") && e.contains("sha256"), "{e}");
    std::fs::write(&p, &good).unwrap();

    // A truncated optimizer file.
    let o = ck.join("optimizer.safetensors");
    let good_o = std::fs::read(&o).unwrap();
    std::fs::write(&o, &good_o[..good_o.len() / 2]).unwrap();
    let e = resume();
    assert!(e.contains("optimizer.safetensors"), "{e}");
    std::fs::write(&o, &good_o).unwrap();

    // A damaged state file.
    let st = ck.join("state.json");
    let good_s = std::fs::read(&st).unwrap();
    std::fs::write(&st, &good_s[..good_s.len() / 3]).unwrap();
    let e = resume();
    assert!(e.contains("state.json") && e.contains("unusable"), "{e}");
    std::fs::write(&st, &good_s).unwrap();

    // Another config's checkpoint.
    let mut other = cfg.clone();
    other.train.lr = 5e-3;
    let e = run_model(&TinyModel::for_config(&other, D), &other, "c", &out, &opts(true)).unwrap_err().to_string();
    assert!(e.contains("config hash"), "{e}");

    // Restored files: the resume works.
    let s = run_model(&TinyModel::for_config(&cfg, D), &cfg, "c", &out, &opts(true)).unwrap();
    assert_eq!(s.steps, 12);
}

/// f16 mixed with an initial loss scale of 2^28: the scaled loss gradient (up to 2^28 / 64 per
/// logit) overflows f16 for real in the backward, so the first steps are skipped with the scale
/// halving, until it fits; then it doubles after every 5 clean steps (and halves again when
/// that overflows). The recorded scales must follow exactly that rule.
#[test]
fn f16_loss_scaling_skips_overflow_steps_and_grows() {
    let mut cfg = tiny_config(Precision::F16Mixed, 60);
    cfg.train.loss_scale_init = 2f64.powi(28);
    cfg.train.loss_scale_growth_interval = 5;
    let out = fresh_dir("train_loss_scale");
    let s = run_model(&TinyModel::for_config(&cfg, D), &cfg, "ls", &out, &opts(false)).unwrap();
    let steps: Vec<_> = records(&out).into_iter().filter_map(|r| if let Record::Step(s) = r { Some(s) } else { None }).collect();
    assert_eq!(steps.len(), 60);
    assert!(steps[0].skipped && !steps[0].grad_norm.is_finite(), "{:?}", steps[0]);
    assert_eq!(steps[0].loss_scale, Some(2f64.powi(28)));
    let mut replay = LossScaler::new(2f64.powi(28), 5);
    let (mut grew, mut skipped) = (0, 0);
    for st in &steps {
        assert_eq!(st.loss_scale, Some(replay.scale), "step {}", st.step);
        assert!(st.loss.is_finite());
        assert_eq!(st.skipped, !st.grad_norm.is_finite(), "step {}", st.step);
        if replay.update(!st.skipped) == normlab::train::loss_scale::ScaleEvent::Grew {
            grew += 1;
        }
        skipped += u64::from(st.skipped);
    }
    assert!((3..40).contains(&skipped), "skipped {skipped}");
    assert!(grew >= 1, "no growth event");
    assert_eq!(s.skipped_steps, skipped);
    // Adam only counted the applied steps.
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["adam_steps"].as_u64().unwrap(), 60 - skipped);
    assert!(steps.last().unwrap().loss < steps[0].loss - 0.5);
}

#[test]
fn first_nonfinite_loss_stops_the_run_as_diverged() {
    let mut cfg = tiny_config(Precision::F32, 30);
    cfg.train.eval_every = 0;
    let out = fresh_dir("train_diverged");
    let mut m = TinyModel::for_config(&cfg, D);
    m.poison_forward = Some(7);
    let s = run_model(&m, &cfg, "d", &out, &opts(false)).unwrap();
    let recs = records(&out);
    assert_eq!(recs.len(), 7, "six steps and the diverged record");
    match recs.last().unwrap() {
        Record::Diverged(d) => assert!(d.step == 7 && d.loss.is_nan(), "{d:?}"),
        r => panic!("{r:?}"),
    }
    assert_eq!((s.diverged_at, s.steps, s.tokens), (Some(7), 7, 6 * 64));
    assert_summary_file(&out, &s);
}

/// Inputs of norm 300 into a unit-L2 norm of 16 elements: the sum of squares, 9e4, exceeds
/// f16's 65504, so the pure-f16 accumulator overflows on every row, where f32 never does.
#[test]
fn pure_f16_accumulation_overflow_is_counted() {
    let mut counts = Vec::new();
    for (p, tag) in [(Precision::F32, "f32"), (Precision::PureF16, "pf16")] {
        let mut cfg = tiny_config(p, 3);
        cfg.train.eval_every = 0;
        let out = fresh_dir(&format!("train_overflow_{tag}"));
        let mut m = TinyModel::for_config(&cfg, D);
        m.input_gain = 300.0;
        let s = run_model(&m, &cfg, tag, &out, &opts(false)).unwrap();
        counts.push(s.counters.acc_overflow);
    }
    assert_eq!(counts[0], 0);
    // At least every row of the first forward (4 x 16 tokens).
    assert!(counts[1] >= 64, "{counts:?}");
}
