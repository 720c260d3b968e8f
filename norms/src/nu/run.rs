//! The Monte Carlo driver: chunked, parallel, deterministic for a seed.
//!
//! Samples are cut into chunks of `chunk` samples; chunk `c` draws from its own stream
//! (`rng::StreamRng::new(seed, c)`), chunks run on all cores (rayon) and their moments are
//! merged in chunk order, so the result depends on the seed and the chunk size but not on the
//! number of threads or on scheduling.

use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{NormError, Result};
use crate::nu::eval::{sample, Plan, Workspace};
use crate::nu::pipeline::{NodeId, Pipeline};
use crate::nu::rng::StreamRng;
use crate::nu::stats::{nu_mean, nu_rms, quantile, Interval, Moments};

/// Settings of one Monte Carlo run.
#[derive(Debug, Clone, PartialEq)]
pub struct McConfig {
    /// Number of samples (> 0).
    pub samples: u64,
    pub seed: u64,
    /// Samples per RNG stream (> 0). Part of what the result depends on.
    pub chunk: u64,
    /// Confidence level of the intervals, in (0, 1).
    pub level: f64,
}

impl Default for McConfig {
    fn default() -> Self {
        McConfig { samples: 100_000, seed: 0, chunk: 1024, level: 0.95 }
    }
}

/// Progress callback: `(samples done, samples planned)`.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// The estimates of one run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub samples: u64,
    pub level: f64,
    /// `E||g||^2`.
    pub mean_sq: Interval,
    /// `E||g||`.
    pub mean_norm: Interval,
    /// `1/sqrt(E||g||^2)`, the factor that makes the expected squared norm 1.
    pub nu_rms: Interval,
    /// `1/E||g||`.
    pub nu_mean: Interval,
    /// `sd(||g||)/E||g||`: how well `||g||` concentrates.
    pub rel_std_norm: f64,
}

/// An estimate against a closed form of `E||g||^2`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Comparison {
    pub closed_mean_sq: f64,
    pub closed_nu: f64,
    /// `(mc - closed) / se` for `nu_rms`.
    pub z: f64,
    /// Whether the closed-form `nu` lies in the interval of `nu_rms`.
    pub within_ci: bool,
}

impl Estimate {
    /// Compares `nu_rms` with the closed form `closed_mean_sq = E||g||^2`.
    pub fn compare(&self, closed_mean_sq: f64) -> Comparison {
        let closed_nu = 1.0 / closed_mean_sq.sqrt();
        Comparison {
            closed_mean_sq,
            closed_nu,
            z: (self.nu_rms.value - closed_nu) / self.nu_rms.se,
            within_ci: self.nu_rms.contains(closed_nu),
        }
    }
}

fn validate(p: &Pipeline, output: NodeId, cfg: &McConfig) -> Result<()> {
    p.check_output(output)?;
    if cfg.samples == 0 {
        return Err(NormError::Empty { what: "Monte Carlo samples", value: 0 });
    }
    if cfg.chunk == 0 {
        return Err(NormError::Empty { what: "Monte Carlo chunk size", value: 0 });
    }
    quantile(cfg.level, cfg.samples)?;
    Ok(())
}

/// Moments of `||g||^2` and `||g||` over chunks `c0..c1` (the last chunk may be cut at `total`).
#[allow(clippy::too_many_arguments)] // one private driver shared by both entry points
fn run_chunks(p: &Pipeline, plan: &Plan, cfg: &McConfig, c0: u64, c1: u64, total: u64, planned: u64, done: &AtomicU64, progress: Option<Progress>) -> Result<(Moments, Moments)> {
    let parts: Vec<(Moments, Moments, u64)> = (c0..c1)
        .into_par_iter()
        .map_init(
            || Workspace::new(p, plan),
            |ws, c| {
                let mut rng = StreamRng::new(cfg.seed, c);
                let start = c * cfg.chunk;
                let end = (start + cfg.chunk).min(total);
                let (mut sq, mut nm, mut bad) = (Moments::default(), Moments::default(), 0u64);
                for _ in start..end {
                    let y = sample(p, plan, ws, &mut rng);
                    if y.is_finite() {
                        sq.push(y);
                        nm.push(y.sqrt());
                    } else {
                        bad += 1;
                    }
                }
                let now = done.fetch_add(end - start, Ordering::Relaxed) + (end - start);
                if let Some(f) = progress {
                    f(now, planned);
                }
                (sq, nm, bad)
            },
        )
        .collect();
    let (mut sq, mut nm, mut bad) = (Moments::default(), Moments::default(), 0u64);
    for (a, b, k) in &parts {
        sq.merge(a);
        nm.merge(b);
        bad += k;
    }
    if bad > 0 {
        return Err(NormError::OutOfRange { what: "non-finite Monte Carlo samples (overflowing pipeline)", range: "0", value: bad as f64 });
    }
    Ok((sq, nm))
}

fn finish(sq: &Moments, nm: &Moments, level: f64) -> Result<Estimate> {
    let q = quantile(level, sq.n)?;
    Ok(Estimate {
        samples: sq.n,
        level,
        mean_sq: Interval::new(sq.mean, sq.se(), q),
        mean_norm: Interval::new(nm.mean, nm.se(), q),
        nu_rms: nu_rms(sq, q),
        nu_mean: nu_mean(nm, q),
        rel_std_norm: nm.variance().sqrt() / nm.mean,
    })
}

/// Estimates the norm statistics of `output` with `cfg.samples` samples (at least 2, or a typed error).
pub fn estimate(p: &Pipeline, output: NodeId, cfg: &McConfig, progress: Option<Progress>) -> Result<Estimate> {
    validate(p, output, cfg)?;
    let plan = Plan::new(p, output);
    let total = cfg.samples;
    let chunks = total.div_ceil(cfg.chunk);
    let done = AtomicU64::new(0);
    let (sq, nm) = run_chunks(p, &plan, cfg, 0, chunks, total, total, &done, progress)?;
    finish(&sq, &nm, cfg.level)
}

/// Runs until the `nu_rms` interval is at most `target_half_width` wide on each side, or
/// `max_samples` are used. Starts with `cfg.samples`, then extends with whole chunks to the
/// sample count the observed variance asks for (plus 10%). The stopping points depend only on
/// the data, so the result is as deterministic as `estimate`.
pub fn estimate_to_precision(p: &Pipeline, output: NodeId, cfg: &McConfig, target_half_width: f64, max_samples: u64, progress: Option<Progress>) -> Result<Estimate> {
    validate(p, output, cfg)?;
    if !(target_half_width.is_finite() && target_half_width > 0.0) {
        return Err(NormError::OutOfRange { what: "target half width", range: "finite values > 0", value: target_half_width });
    }
    let plan = Plan::new(p, output);
    let cap_chunks = max_samples.max(2).div_ceil(cfg.chunk).max(1);
    let mut c_done = cfg.samples.max(2).div_ceil(cfg.chunk).min(cap_chunks);
    let done = AtomicU64::new(0);
    let total = u64::MAX;
    let (mut sq, mut nm) = run_chunks(p, &plan, cfg, 0, c_done, total, c_done * cfg.chunk, &done, progress)?;
    loop {
        let est = finish(&sq, &nm, cfg.level)?;
        let hw = est.nu_rms.half_width();
        if hw <= target_half_width || c_done >= cap_chunks {
            return Ok(est);
        }
        let need = (sq.n as f64 * (hw / target_half_width).powi(2) * 1.1).ceil() as u64;
        let c_next = need.div_ceil(cfg.chunk).clamp(c_done + 1, cap_chunks);
        let (a, b) = run_chunks(p, &plan, cfg, c_done, c_next, total, c_next * cfg.chunk, &done, progress)?;
        sq.merge(&a);
        nm.merge(&b);
        c_done = c_next;
    }
}
