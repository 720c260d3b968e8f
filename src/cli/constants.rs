//! `normlab constants`: the scale constants of the L1, L-inf and Top-k norms.
//!
//! Convention (see `normlab_norms::constants`): a norm divides by `D = C * stat(|z|) + eps`;
//! `C` multiplies the statistic so that `C * stat` estimates sigma for Gaussian input, so
//! `C = 1 / E[stat(|Z|)]` with Z iid N(0, 1):
//!
//! - `c_l1 = 1/E|Z| = sqrt(pi/2)`;
//! - `c_inf(n) = 1/E[max_i |Z_i|]` (exact, by quadrature);
//! - `c_topk(n, k) = 1/E[mean of the k largest |Z_i|]` (exact, by quadrature);
//! - `c_code(n) = 0.5 (1 + sqrt(pi ln 4)) / sqrt(2 ln n)`: the "Norm matters" authors' code
//!   constant for L-inf and every Top-k (biased; undefined for n = 1).
//!
//! Monte Carlo columns (`--samples N`, default 10000; 0 turns them off): a direct simulation of
//! the statistics over rows of n iid N(0, 1) (`mean |Z_i|`, `max |Z_i|`, mean of the k largest
//! `|Z_i|`), giving each expectation with its interval (95% unless `--level`) (Student t over the per-row values),
//! each constant `C = 1/E` with its delta-method interval (`se_C = se_E / E^2`), and the z-score
//! `(C_mc - C_exact) / se_C` against the exact value. Rows are drawn in chunks of
//! [`MC_CHUNK`]; chunk `c` uses its own xoshiro256++ stream `(seed, c)` (normlab_norms::nu::rng)
//! and chunks are merged in order, so the result depends on `--seed` and `--samples` only, not
//! on the number of threads.

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use normlab_norms::constants;
use normlab_norms::nu::rng::StreamRng;
use normlab_norms::nu::sample::normal;
use normlab_norms::nu::stats::{quantile, Moments};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cli::output::{print, print_json};
use crate::cli::CliError;

#[derive(Debug, Args)]
#[command(after_help = "C multiplies the statistic so that C * stat estimates sigma for Gaussian input: \
C = 1 / E[stat], where E[max|Z|] and E[mean top-k |Z|] are the expectations over n iid N(0,1). \
c_l1, c_inf and c_topk are exact; c_code is the \"Norm matters\" authors' c(n), used for L-inf and every k.\n\n\
Example: normlab constants --n 1024 --k 8 --json")]
pub struct ConstantsArgs {
    /// Row length n (number of elements the norm reduces over), at least 1.
    #[arg(long)]
    pub n: usize,
    /// k of the Top-k norm (1 <= k <= n); without it, c_topk is not computed.
    #[arg(long)]
    pub k: Option<usize>,
    /// Monte Carlo rows of n iid N(0,1) for the MC columns (0: no Monte Carlo; otherwise >= 2).
    #[arg(long, default_value_t = DEFAULT_SAMPLES)]
    pub samples: u64,
    /// Seed of the Monte Carlo columns (the result does not depend on the number of threads).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Confidence level of the Monte Carlo intervals, in (0, 1).
    #[arg(long, default_value_t = MC_LEVEL)]
    pub level: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Default `--samples`.
pub const DEFAULT_SAMPLES: u64 = 10_000;
/// Rows per Monte Carlo chunk (one RNG stream each).
pub const MC_CHUNK: u64 = 256;
/// Default confidence level of the Monte Carlo intervals (`--level`).
pub const MC_LEVEL: f64 = 0.95;

/// One Monte Carlo column entry: an expectation `E[stat]` and its constant `C = 1/E`, each with
/// its interval, next to the exact values.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct McColumn {
    /// Monte Carlo mean of the per-row statistic.
    pub e_mc: f64,
    /// Its standard error and `level` interval.
    pub e_se: f64,
    pub e_lo: f64,
    pub e_hi: f64,
    /// `1 / e_mc`, its delta-method standard error `e_se / e_mc^2` and interval.
    pub c_mc: f64,
    pub c_se: f64,
    pub c_lo: f64,
    pub c_hi: f64,
    /// The exact constant it estimates.
    pub c_exact: f64,
    /// `(c_mc - c_exact) / c_se`.
    pub z: f64,
    /// Whether `c_exact` lies in `[c_lo, c_hi]`.
    pub within_ci: bool,
}

/// The Monte Carlo columns of the report.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct McColumns {
    pub samples: u64,
    pub seed: u64,
    pub level: f64,
    pub chunk: u64,
    /// `E[mean_i |Z_i|]` and `c_l1`.
    pub l1: McColumn,
    /// `E[max_i |Z_i|]` and `c_inf(n)`.
    pub inf: McColumn,
    /// `E[mean of the k largest |Z_i|]` and `c_topk(n, k)` (null without --k).
    pub topk: Option<McColumn>,
    pub method: String,
}

/// What `normlab constants --json` prints.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConstantsReport {
    pub n: usize,
    pub k: Option<usize>,
    /// `sqrt(pi/2) = 1/E|Z|`.
    pub c_l1: f64,
    /// `1/E[max_i |Z_i|]`, exact.
    pub c_inf: f64,
    /// `1/E[mean of the k largest |Z_i|]`, exact (null without --k).
    pub c_topk: Option<f64>,
    /// The authors' `c(n)` (null for n = 1, where ln n = 0).
    pub c_code: Option<f64>,
    /// `E|Z| = sqrt(2/pi)`.
    pub e_abs: f64,
    /// `E[max_i |Z_i|]` over n iid N(0, 1).
    pub e_max_abs: f64,
    /// `E[mean of the k largest |Z_i|]` (null without --k).
    pub e_topk_mean_abs: Option<f64>,
    pub convention: String,
    /// Monte Carlo columns (null with `--samples 0`).
    pub monte_carlo: Option<McColumns>,
}

const CONVENTION: &str = "C multiplies the statistic so that C * stat estimates sigma for Gaussian input: \
c_l1 = 1/E|Z|, c_inf = 1/E[max|Z|], c_topk = 1/E[mean top-k |Z|] (exact); c_code = authors' c(n) (biased)";

/// Compute the report, refusing bad n or k with a message naming the value.
pub fn compute(n: usize, k: Option<usize>) -> Result<ConstantsReport, CliError> {
    if n == 0 {
        return Err(CliError::InvalidArg { flag: "--n", value: n.to_string(), why: "a row has at least 1 element".into() });
    }
    if let Some(k) = k {
        if k == 0 || k > n {
            return Err(CliError::InvalidArg { flag: "--k", value: k.to_string(), why: format!("need 1 <= k <= n = {n}") });
        }
    }
    let e_max_abs = constants::e_max_abs(n)?;
    let e_topk_mean_abs = k.map(|k| constants::e_topk_mean_abs(n, k)).transpose()?;
    Ok(ConstantsReport {
        n,
        k,
        c_l1: constants::C_L1,
        c_inf: constants::c_inf(n)?,
        c_topk: k.map(|k| constants::c_topk(n, k)).transpose()?,
        c_code: (n >= 2).then(|| constants::c_code(n)).transpose()?,
        e_abs: 1.0 / constants::C_L1,
        e_max_abs,
        e_topk_mean_abs,
        convention: CONVENTION.into(),
        monte_carlo: None,
    })
}

/// Per-row statistics of one row of n iid N(0, 1): (mean |z|, max |z|, mean of the k largest).
fn row_stats(rng: &mut StreamRng, buf: &mut [f64], k: Option<usize>) -> (f64, f64, f64) {
    let mut sum = 0.0;
    let mut max = 0.0f64;
    for v in buf.iter_mut() {
        let a = normal(rng).abs();
        *v = a;
        sum += a;
        max = max.max(a);
    }
    let n = buf.len();
    let topk = match k {
        None => 0.0,
        Some(k) if k == n => sum / n as f64,
        Some(k) => {
            // The k largest end up in buf[n - k..] (order inside them is irrelevant for a sum).
            buf.select_nth_unstable_by(n - k, |a, b| a.total_cmp(b));
            buf[n - k..].iter().sum::<f64>() / k as f64
        }
    };
    (sum / n as f64, max, topk)
}

fn column(m: &Moments, q: f64, c_exact: f64) -> McColumn {
    let (e, se) = (m.mean, m.se());
    let (c, c_se) = (1.0 / e, se / (e * e));
    let (c_lo, c_hi) = (c - q * c_se, c + q * c_se);
    McColumn { e_mc: e, e_se: se, e_lo: e - q * se, e_hi: e + q * se, c_mc: c, c_se, c_lo, c_hi, c_exact, z: (c - c_exact) / c_se, within_ci: c_lo <= c_exact && c_exact <= c_hi }
}

/// The Monte Carlo columns for `samples` rows of n (>= 2 rows, or an error naming the value).
/// `progress(done, total)` is called after every chunk.
pub fn monte_carlo(n: usize, k: Option<usize>, samples: u64, seed: u64, level: f64, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<McColumns, CliError> {
    if samples < 2 {
        return Err(CliError::InvalidArg { flag: "--samples", value: samples.to_string(), why: "need at least 2 rows for an interval (or 0 for no Monte Carlo)".into() });
    }
    if !(level > 0.0 && level < 1.0) {
        return Err(CliError::InvalidArg { flag: "--level", value: level.to_string(), why: "a confidence level is in (0, 1)".into() });
    }
    let q = quantile(level, samples)?;
    let chunks = samples.div_ceil(MC_CHUNK);
    let done = AtomicU64::new(0);
    let parts: Vec<[Moments; 3]> = (0..chunks)
        .into_par_iter()
        .map_init(
            || vec![0.0f64; n],
            |buf, c| {
                let mut rng = StreamRng::new(seed, c);
                let mut m = [Moments::default(); 3];
                let rows = MC_CHUNK.min(samples - c * MC_CHUNK);
                for _ in 0..rows {
                    let (l1, inf, top) = row_stats(&mut rng, buf, k);
                    m[0].push(l1);
                    m[1].push(inf);
                    m[2].push(top);
                }
                progress(done.fetch_add(rows, Ordering::Relaxed) + rows, samples);
                m
            },
        )
        .collect();
    let mut m = [Moments::default(); 3];
    for p in &parts {
        for (a, b) in m.iter_mut().zip(p) {
            a.merge(b);
        }
    }
    Ok(McColumns {
        samples,
        seed,
        level,
        chunk: MC_CHUNK,
        l1: column(&m[0], q, constants::C_L1),
        inf: column(&m[1], q, constants::c_inf(n)?),
        topk: k.map(|k| constants::c_topk(n, k).map(|c| column(&m[2], q, c))).transpose()?,
        method: format!("direct simulation: {samples} rows of {n} iid N(0,1), per-row mean|z|, max|z|, top-k mean; Student t intervals, C = 1/E by the delta method"),
    })
}

/// [`compute`] plus the Monte Carlo columns (none for `samples == 0`).
pub fn compute_with_mc(n: usize, k: Option<usize>, samples: u64, seed: u64, level: f64, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<ConstantsReport, CliError> {
    let mut r = compute(n, k)?;
    if samples > 0 {
        r.monte_carlo = Some(monte_carlo(n, k, samples, seed, level, progress)?);
    }
    Ok(r)
}

fn render_text(r: &ConstantsReport) -> String {
    let k = r.k.map(|k| k.to_string()).unwrap_or_else(|| "k".into());
    let opt = |v: Option<f64>, none: &str| v.map(|v| format!("{v:.12}")).unwrap_or_else(|| none.to_string());
    let line = |label: String, value: String, note: &str| format!("  {label:<26} = {value}{note}\n");
    let mut s = format!("n = {}{}\n", r.n, r.k.map(|k| format!(", k = {k}")).unwrap_or_default());
    s += "expectations over n iid N(0,1):\n";
    s += &line("E|Z|".into(), format!("{:.12}", r.e_abs), "");
    s += &line("E[max_i |Z_i|]".into(), format!("{:.12}", r.e_max_abs), "");
    s += &line(format!("E[mean of top-{k} |Z_i|]"), opt(r.e_topk_mean_abs, "(give --k)"), "");
    s += "scale constants (C * stat estimates sigma):\n";
    s += &line("c_l1   = 1/E|Z|".into(), format!("{:.12}", r.c_l1), "");
    s += &line("c_inf  = 1/E[max|Z|]".into(), format!("{:.12}", r.c_inf), "   (exact)");
    s += &line(format!("c_topk = 1/E[top-{k} mean]"), opt(r.c_topk, "(give --k)"), "   (exact)");
    s += &line(
        "c_code = authors' c(n)".into(),
        opt(r.c_code, "undefined for n = 1"),
        "   (0.5(1+sqrt(pi ln 4))/sqrt(2 ln n), for L-inf and every k; biased)",
    );
    if let Some(mc) = &r.monte_carlo {
        s += &format!("Monte Carlo ({} rows, seed {}, {}% intervals):\n", mc.samples, mc.seed, mc.level * 100.0);
        s += &format!("  {:<8} {:>15} {:>33} {:>15} {:>8}  {}\n", "constant", "exact", "MC [interval]", "MC E[stat]", "z", "exact in CI");
        let mut row = |name: &str, c: &McColumn| {
            s += &format!(
                "  {:<8} {:>15.9} {:>11.9} [{:.9}, {:.9}] {:>15.9} {:>8.3}  {}\n",
                name,
                c.c_exact,
                c.c_mc,
                c.c_lo,
                c.c_hi,
                c.e_mc,
                c.z,
                if c.within_ci { "yes" } else { "NO" }
            );
        };
        row("c_l1", &mc.l1);
        row("c_inf", &mc.inf);
        if let Some(t) = &mc.topk {
            row("c_topk", t);
        }
    }
    s
}

pub fn run(args: ConstantsArgs) -> Result<(), CliError> {
    // Validate n and k before any Monte Carlo work.
    compute(args.n, args.k)?;
    let work = args.samples.saturating_mul(args.n as u64);
    let pb = if args.json || work < 50_000_000 { ProgressBar::hidden() } else { ProgressBar::new(args.samples) };
    if let Ok(style) = ProgressStyle::with_template("Monte Carlo [{bar:40}] {pos}/{len} rows ({eta})") {
        pb.set_style(style.progress_chars("=> "));
    }
    let progress = |done: u64, _total: u64| pb.set_position(done);
    let r = compute_with_mc(args.n, args.k, args.samples, args.seed, args.level, &progress);
    pb.finish_and_clear();
    let r = r?;
    if args.json {
        print_json(&r)
    } else {
        print(&render_text(&r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_the_library_values() {
        let r = compute(1024, Some(10)).unwrap();
        assert_eq!(r.c_inf, constants::c_inf(1024).unwrap());
        assert_eq!(r.c_topk, Some(constants::c_topk(1024, 10).unwrap()));
        assert_eq!(r.c_code, Some(constants::c_code(1024).unwrap()));
        // algorithms.md 4.2: E[max|Z|] at n = 1024 is 3.441870.
        assert!((r.e_max_abs - 3.441870).abs() < 1e-6);
        assert!((r.c_inf * r.e_max_abs - 1.0).abs() < 1e-15);
        let text = render_text(&r);
        assert!(text.contains("E[max_i |Z_i|]") && text.contains("c_code"), "{text}");
    }

    #[test]
    fn monte_carlo_does_not_depend_on_the_thread_count() {
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| monte_carlo(33, Some(4), 1000, 5, MC_LEVEL, &|_, _| {}).unwrap())
        };
        let one = run(1);
        assert_eq!(one, run(3));
        // 1000 rows in chunks of 256: the last chunk is cut, every row counted once.
        assert_eq!(one.samples, 1000);
        assert!(one.topk.is_some() && one.inf.within_ci == (one.inf.c_lo <= one.inf.c_exact && one.inf.c_exact <= one.inf.c_hi));
        let e = monte_carlo(33, None, 1, 5, MC_LEVEL, &|_, _| {}).unwrap_err().to_string();
        assert!(e.contains("--samples") && e.contains("'1'"), "{e}");
        let e = monte_carlo(33, None, 100, 5, 1.0, &|_, _| {}).unwrap_err().to_string();
        assert!(e.contains("--level") && e.contains("'1'"), "{e}");
    }

    #[test]
    fn refuses_bad_n_and_k_naming_the_value() {
        let e = compute(0, None).unwrap_err().to_string();
        assert!(e.contains("'0'") && e.contains("--n"), "{e}");
        let e = compute(16, Some(17)).unwrap_err().to_string();
        assert!(e.contains("'17'") && e.contains("--k") && e.contains("16"), "{e}");
        let e = compute(16, Some(0)).unwrap_err().to_string();
        assert!(e.contains("'0'") && e.contains("--k"), "{e}");
        // n = 1 is valid; only the authors' c(n) is undefined there.
        let r = compute(1, Some(1)).unwrap();
        assert_eq!(r.c_code, None);
        assert!((r.e_max_abs - r.e_abs).abs() < 1e-12);
    }
}
