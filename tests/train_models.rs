//! The real models through `normlab::train::run` on the bundled corpus: issue 5's 300-step test
//! (every architecture beats the corpus's unigram entropy), and the fp8 storage option.
//!
//! The tiny config keeps every tensor below candle's threshold for its own thread pool
//! (64K elements: 8 x 24 tokens x 256 logits = 49K), so these runs stay fast and do not spin
//! on a busy 2-core machine. Single-threaded on a quiet core a step takes about 5-10 ms.

use std::path::PathBuf;

use candle_core::Device;
use normlab::data::Corpus;
use normlab::model::{Arch, ModelConfig};
use normlab::train::metrics::read_records;
use normlab::train::{metrics_path, run, ExperimentConfig, Precision, Record, RunOptions, RunSummary, TrainConfig};

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-train-models-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// d 32, 2 heads, 1 layer, batch 8 x 24, 300 steps, peak lr 1e-2 with cosine decay to 0, the
/// papers' Adam (0.9, 0.95, no weight decay, no warmup), clip 1.
///
/// Why 1e-2 (and not tiny.toml's 3e-3): nGPT's scalars (s_z, s_qk, alpha) learn at
/// `lr * init/scale = lr * sqrt(d)`: 32x the base lr at the paper's d = 1024, only 5.7x at
/// d = 32. At 3e-3 its logit scale s_z can grow by at most ~5 in 300 steps and nGPT ends near
/// 3.2 nats, barely under the entropy (GPT+ 2.45, anGPT 2.53); at 1e-2 all three are at
/// 2.4-2.5 (measured on this config). A small model at a larger learning rate is the usual
/// setting; the same lr is used for all three.
fn tiny(arch: Arch, steps: u64) -> ExperimentConfig {
    ExperimentConfig {
        model: ModelConfig { arch, d_model: 32, n_heads: 2, n_layers: 1, mlp_ratio: 4, ..Default::default() },
        train: TrainConfig {
            steps,
            batch_size: 8,
            seq_len: 24,
            lr: 1e-2,
            min_lr: 0.0,
            warmup_steps: 0,
            grad_clip: 1.0,
            eval_every: 100,
            eval_batches: 8,
            log_every: 10,
            checkpoint_every: 0,
            seed: 1234,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn opts() -> RunOptions {
    RunOptions { device: Device::Cpu, resume: false, progress: false }
}

fn val_losses(out: &std::path::Path) -> Vec<f64> {
    read_records(&metrics_path(out)).unwrap().into_iter().filter_map(|r| if let Record::Eval(e) = r { Some(e.val_loss) } else { None }).collect()
}

/// Issue 5: "a 300-step run of a tiny config of each model lowers validation loss below the
/// unigram entropy of the corpus". Both in nats per byte: the loss is candle's cross-entropy
/// (natural log, mean over tokens), `UnigramEntropy::nats` the entropy of the byte frequencies
/// of the whole corpus (about 3.33 nats = 4.8 bits). A model below it predicts the next byte
/// better than the byte frequencies alone, i.e. it uses the context.
#[test]
fn each_model_beats_the_unigram_entropy_in_300_steps() {
    let entropy = Corpus::load_default().unwrap().unigram_entropy().nats;
    assert!((3.2..3.5).contains(&entropy), "{entropy}");
    for arch in Arch::ALL {
        let cfg = tiny(arch, 300);
        let out = fresh_dir(&format!("entropy-{}", arch.name()));
        let t0 = std::time::Instant::now();
        let s: RunSummary = run(&cfg, arch.name(), &out, &opts()).unwrap();
        let vals = val_losses(&out);
        println!(
            "{}: validation loss {:?} (unigram entropy {entropy:.4} nats), {:.1} s, median step {:.1} ms",
            arch.name(),
            vals.iter().map(|v| (v * 1e4).round() / 1e4).collect::<Vec<_>>(),
            t0.elapsed().as_secs_f64(),
            s.median_step_time_s * 1e3
        );
        assert_eq!((s.steps, s.diverged_at, s.skipped_steps), (300, None, 0), "{}", arch.name());
        let last = s.final_val_loss.unwrap();
        assert_eq!(vals.len(), 3);
        assert!(last < entropy, "{}: final validation loss {last} is not below the unigram entropy {entropy}", arch.name());
        // Margin: a model that merely learned the unigram distribution would sit at the entropy.
        assert!(last < entropy - 0.3, "{}: {last} vs {entropy}", arch.name());
        assert!(vals[2] < vals[0], "{}: {vals:?}", arch.name());
        std::fs::remove_dir_all(&out).ok();
    }
}

/// `train.fp8_norm_io`: every norm site's input and output stored as E4M3. The run trains, its
/// step records and summary carry the fp8 counters (every stored value counted, with the
/// subnormals the per-tensor scale leaves at the bottom of the range), and the losses differ
/// from the same run without fp8 (the stores are really there); without the option the counters
/// are absent (zero).
#[test]
fn fp8_norm_io_trains_and_reports_its_stores() {
    let steps = 60;
    let mut losses = Vec::new();
    for (fp8, arch) in [(true, Arch::GptPlus), (false, Arch::GptPlus), (true, Arch::NGpt)] {
        let mut cfg = tiny(arch, steps);
        cfg.train.fp8_norm_io = fp8;
        cfg.train.log_every = 1;
        cfg.train.eval_every = 0;
        let out = fresh_dir(&format!("fp8-{fp8}-{}", arch.name()));
        let s = run(&cfg, "fp8", &out, &opts()).unwrap();
        let steps_recs: Vec<_> = read_records(&metrics_path(&out)).unwrap().into_iter().filter_map(|r| if let Record::Step(s) = r { Some(s) } else { None }).collect();
        let first = steps_recs[0].loss;
        let last: f64 = steps_recs[steps as usize - 5..].iter().map(|r| r.loss).sum::<f64>() / 5.0;
        println!("{} fp8 {fp8}: loss {first:.3} -> {last:.3}, counters {:?}", arch.name(), s.counters);
        assert!(last < first - 1.0, "{} fp8 {fp8}: {first} -> {last}", arch.name());
        let c = s.counters.fp8;
        if fp8 {
            // Per step: in + out of every site. GPT+ (1 layer): 2 d-wide sites, q and k (d
            // values each per token) and the final norm, 5 x d values per token, stored twice.
            // nGPT: q, k, h_A, h_M and the two LERPs: 6 x d.
            let per_token = match arch {
                Arch::GptPlus => 5,
                _ => 6,
            };
            let want = steps * 2 * per_token * 32 * (8 * 24);
            assert_eq!(c.values, want, "{} fp8 values", arch.name());
            assert!(c.subnormal > 0 && c.nonfinite == 0, "{c:?}");
            assert!(steps_recs.iter().all(|r| r.counters.fp8.values == want / steps), "every step record carries its stores");
            let line = std::fs::read_to_string(metrics_path(&out)).unwrap();
            assert!(line.lines().next().unwrap().contains("\"fp8\""), "{}", line.lines().next().unwrap());
        } else {
            assert!(c.is_zero(), "{c:?}");
            let line = std::fs::read_to_string(metrics_path(&out)).unwrap();
            assert!(!line.contains("fp8"), "runs without fp8 keep their metrics lines unchanged");
        }
        losses.push(steps_recs.iter().map(|r| r.loss).collect::<Vec<_>>());
        std::fs::remove_dir_all(&out).ok();
    }
    // Same config and seed: the first step's forward already differs through the stores.
    assert_ne!(losses[0][0], losses[1][0]);
    assert!((losses[0][0] - losses[1][0]).abs() < 0.05, "{} vs {}", losses[0][0], losses[1][0]);
}

/// The option is accepted from a config file and the CLI's overrides, with every precision.
#[test]
fn fp8_norm_io_parses_with_every_precision() {
    for p in Precision::ALL {
        let cfg = normlab::train::parse_experiment("", "t.toml", &["train.fp8_norm_io=true".into(), format!("train.precision={}", p.name())]).unwrap();
        assert!(cfg.train.fp8_norm_io && cfg.train.precision == p);
        assert_eq!(normlab::train::default_run_name(&cfg), format!("gpt_plus-l2-{}-fp8-s1234", p.name()));
    }
}

/// Issue 5: "a pure-f16 run of an L2 model records accumulation overflows where the f32 run
/// records none", with a real model: GPT+ (norm l2) of `experiments/tiny-f16-overflow.toml`,
/// whose large init (std 0.5) makes the MLP output, and so the residual stream, reach
/// `||h|| > 256` in the first forward: the f16 sum of squares of its RMSNorm exceeds 65504.
#[test]
fn pure_f16_l2_model_overflows_where_f32_does_not() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/tiny-f16-overflow.toml");
    let mut counts = Vec::new();
    for p in ["pure_f16", "f32"] {
        let cfg = normlab::train::load_experiment(&path, &["train.steps=3".into(), "train.eval_every=0".into(), format!("train.precision={p}")]).unwrap();
        assert_eq!((cfg.model.arch, cfg.model.norm), (Arch::GptPlus, normlab::model::NormChoice::L2));
        let out = fresh_dir(&format!("overflow-{p}"));
        let s = run(&cfg, p, &out, &opts()).unwrap();
        println!("{p}: {:?}", s.counters);
        counts.push(s.counters.acc_overflow);
        std::fs::remove_dir_all(&out).ok();
    }
    assert!(counts[0] > 0 && counts[1] == 0, "pure f16 {} overflows, f32 {}", counts[0], counts[1]);
}

/// Resume with the real models (fused ops, the attention op, in-place projections, anGPT's
/// factors): a run paused after 7 steps and continued from its checkpoint by a freshly built
/// model ends with the same parameter and optimizer bytes as an uninterrupted run.
#[test]
fn real_models_resume_bit_identically() {
    use normlab::train::{run_segment, Segment};
    for arch in [Arch::NGpt, Arch::AnGpt] {
        let mut cfg = tiny(arch, 16);
        cfg.train.eval_every = 8;
        cfg.train.checkpoint_every = 4;
        let a = fresh_dir(&format!("resume-a-{}", arch.name()));
        run(&cfg, "r", &a, &opts()).unwrap();
        let b = fresh_dir(&format!("resume-b-{}", arch.name()));
        let build = || normlab::model::build(&cfg.model, cfg.train.precision.storage_dtype(), cfg.train.seed, &Device::Cpu).unwrap();
        assert_eq!(run_segment(build().as_ref(), &cfg, "r", &b, &opts(), Some(7)).unwrap(), Segment::Paused { step: 7 });
        run(&cfg, "r", &b, &RunOptions { resume: true, ..opts() }).unwrap();
        for f in ["params.safetensors", "optimizer.safetensors"] {
            let (fa, fb) = (std::fs::read(a.join("checkpoint").join(f)).unwrap(), std::fs::read(b.join("checkpoint").join(f)).unwrap());
            assert!(fa == fb, "{}: {f} differs after resume", arch.name());
        }
        std::fs::remove_dir_all(&a).ok();
        std::fs::remove_dir_all(&b).ok();
    }
}
