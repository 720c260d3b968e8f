//! The training loop: data, resume or fresh start, steps, records, evaluations, checkpoints,
//! the summary.
//!
//! Determinism: batch `s` is `BatchSampler::batch(s)` (a pure function of seed and step), the
//! evaluation windows are fixed, and everything the loop carries from step to step (parameters,
//! Adam's moments and count, the loss scaler, the running totals, the length of
//! `metrics.jsonl`) is in the checkpoint, so a resumed CPU run computes exactly what an
//! uninterrupted one does. Only the timing fields (`step_time_s`, `tokens_per_s`, `wall_s`)
//! differ between two runs of the same config, resumed or not.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::checkpoint::{self, CheckpointState};
use super::config::ExperimentConfig;
use super::error::TrainError;
use super::eval::Evaluator;
use super::files::write_atomic;
use super::metrics::MetricsLog;
use super::progress;
use super::record::{DivergedRecord, EvalRecord, Record, RunSummary, StepRecord};
use super::schedule::Schedule;
use super::step::Trainer;
use super::totals::{add_counters, config_hash, RunTotals};
use super::RunOptions;
use crate::data::{BatchSampler, Corpus, Part, Split};
use crate::model::LanguageModel;

/// `metrics.jsonl` of a run directory.
pub fn metrics_path(out: &Path) -> PathBuf {
    out.join("metrics.jsonl")
}

/// `summary.json` of a run directory.
pub fn summary_path(out: &Path) -> PathBuf {
    out.join("summary.json")
}

/// How a segment of a run ended.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // returned once per run segment: boxing buys nothing
pub enum Segment {
    /// The run finished (or diverged); `summary.json` is written.
    Finished(RunSummary),
    /// Stopped after `step` steps as asked, with a checkpoint to resume from.
    Paused { step: u64 },
}

/// Train `model` (built for `cfg`, parameters in `cfg.train.precision`'s storage dtype) to the
/// end of the run. See [`run_segment`].
pub fn run_model(
    model: &dyn LanguageModel,
    cfg: &ExperimentConfig,
    name: &str,
    out: &Path,
    opts: &RunOptions,
) -> Result<RunSummary, TrainError> {
    match run_segment(model, cfg, name, out, opts, None)? {
        Segment::Finished(s) => Ok(s),
        Segment::Paused { step } => Err(TrainError::BadValue {
            key: "stop_after",
            value: step.to_string(),
            why: "a run without a stop point paused (internal error)",
        }),
    }
}

/// Load the configured corpus (the bundled one when none is named).
fn load_corpus(cfg: &ExperimentConfig) -> Result<Corpus, TrainError> {
    Ok(match &cfg.data.corpus {
        Some(p) => Corpus::load(p)?,
        None => Corpus::load_default()?,
    })
}

/// Train `model` from a fresh start or, with `opts.resume`, from the checkpoint in `out`,
/// stopping early after `stop_after` completed steps (with a checkpoint) when given.
pub fn run_segment(
    model: &dyn LanguageModel,
    cfg: &ExperimentConfig,
    name: &str,
    out: &Path,
    opts: &RunOptions,
    stop_after: Option<u64>,
) -> Result<Segment, TrainError> {
    super::load::validate(cfg)?;
    let t = &cfg.train;
    let device = &opts.device;
    super::check_device(model.config(), t, device)?;
    let corpus = load_corpus(cfg)?;
    let split = Split::new(&corpus, cfg.data.val_fraction)?;
    let sampler = BatchSampler::new(&split, Part::Train, t.batch_size, t.seq_len, t.seed)?;
    let evaluator = Evaluator::new(&split, t.batch_size, t.seq_len, t.eval_batches)?;
    std::fs::create_dir_all(out).map_err(TrainError::io(out))?;
    let hash = config_hash(cfg);
    let mut trainer = Trainer::new(model, t)?;
    let schedule = Schedule { lr: t.lr, min_lr: t.min_lr, warmup_steps: t.warmup_steps, total_steps: t.steps };
    let (mpath, spath) = (metrics_path(out), summary_path(out));

    let resumed = if opts.resume {
        checkpoint::load(out, model.params(), trainer.optimizer_mut(), device)?
    } else if mpath.exists() || checkpoint::exists(out) {
        return Err(TrainError::OutDirInUse { path: out.to_path_buf() });
    } else {
        None
    };
    let (start, mut totals, mut log) = match resumed {
        Some(state) => {
            if state.config_hash != hash {
                return Err(TrainError::Checkpoint {
                    path: checkpoint::dir(out),
                    why: format!("it was written by a run with config hash {}, this config hashes to {hash}", state.config_hash),
                });
            }
            trainer.set_scaler(state.loss_scaler);
            (state.step, state.totals, MetricsLog::resume(&mpath, state.metrics_len)?)
        }
        None => {
            if spath.exists() {
                std::fs::remove_file(&spath).map_err(TrainError::io(&spath))?;
            }
            (0, RunTotals::default(), MetricsLog::create(&mpath)?)
        }
    };

    let segment_start = Instant::now();
    let wall = |totals: &RunTotals| totals.wall_s + segment_start.elapsed().as_secs_f64();
    let save = |trainer: &Trainer, totals: &RunTotals, log: &MetricsLog, step: u64| -> Result<(), TrainError> {
        log.sync()?;
        let mut totals = totals.clone();
        totals.wall_s = wall(&totals);
        let state = CheckpointState {
            format: checkpoint::FORMAT.into(),
            config_hash: hash.clone(),
            step,
            adam_steps: trainer.optimizer().steps(),
            loss_scaler: trainer.scaler(),
            metrics_len: log.len(),
            totals,
            params_sha256: String::new(),
            optimizer_sha256: String::new(),
        };
        checkpoint::save(out, model.params(), trainer.optimizer(), state)
    };

    model.telemetry().take();
    let pb = progress::bar(opts.progress, t.steps, start);
    let tokens_per_step = (t.batch_size * t.seq_len) as u64;
    let mut last_val = totals.final_val_loss;
    for s in start..t.steps {
        if stop_after == Some(s) {
            save(&trainer, &totals, &log, s)?;
            pb.abandon();
            return Ok(Segment::Paused { step: s });
        }
        let batch = sampler.batch(s, device)?;
        let lr = schedule.lr_at(s);
        let t0 = Instant::now();
        let stats = trainer.step(model, &batch, lr)?;
        let dt = t0.elapsed().as_secs_f64();
        let step_no = s + 1;
        totals.steps = step_no;
        totals.counters = add_counters(totals.counters, stats.counters);
        totals.pending = add_counters(totals.pending, stats.counters);
        if !stats.loss.is_finite() {
            totals.diverged_at = Some(step_no);
            log.append(&Record::Diverged(DivergedRecord { step: step_no, loss: stats.loss }))?;
            break;
        }
        totals.tokens += tokens_per_step;
        totals.step_times_s.push(dt);
        totals.skipped_steps += u64::from(stats.skipped);
        let tps = if dt > 0.0 { tokens_per_step as f64 / dt } else { 0.0 };
        if t.log_every <= 1 || step_no % t.log_every == 0 || step_no == t.steps {
            let counters = std::mem::take(&mut totals.pending);
            log.append(&Record::Step(StepRecord {
                step: step_no,
                loss: stats.loss,
                lr,
                grad_norm: stats.grad_norm,
                step_time_s: dt,
                tokens_per_s: tps,
                wall_s: wall(&totals),
                counters,
                loss_scale: stats.loss_scale,
                skipped: stats.skipped,
            }))?;
        }
        if (t.eval_every > 0 && step_no % t.eval_every == 0) || step_no == t.steps {
            let r = evaluator.evaluate(model, trainer.ctx(), device)?;
            let adam_m_var = trainer.optimizer().first_moment_variance(model.params())?;
            totals.eval(step_no, r.val_loss);
            last_val = Some(r.val_loss);
            log.append(&Record::Eval(EvalRecord {
                step: step_no,
                val_loss: r.val_loss,
                wall_s: wall(&totals),
                layers: r.layers,
                adam_m_var,
            }))?;
        }
        if step_no == t.steps || (t.checkpoint_every > 0 && step_no % t.checkpoint_every == 0) {
            save(&trainer, &totals, &log, step_no)?;
        }
        pb.set_message(progress::message(stats.loss, tps, last_val));
        pb.inc(1);
    }
    pb.finish();
    log.sync()?;
    let summary = totals.summary(cfg, name, &hash, wall(&totals));
    let json = serde_json::to_vec_pretty(&summary).map_err(|e| TrainError::Io { path: spath.clone(), source: std::io::Error::other(e) })?;
    write_atomic(&spath, &json)?;
    Ok(Segment::Finished(summary))
}
