//! `normlab nu`: anGPT's normalisation factors by Monte Carlo, with confidence intervals.
//!
//! - `normlab nu angpt --d-model D --heads H --mlp-ratio R [--gate-scale S] [--samples N]
//!   [--seed S] [--json]`: the whole factor table (nu_qkv, nu_p, nu_uz, nu_acf, nu_d, nu(alpha))
//!   with the Monte Carlo value and interval, the closed form, the `d -> inf` limit and the
//!   paper's value side by side, and the gate-scale assumption used for nu_acf.
//! - `normlab nu activation --fn silu|gelu|relu|swiglu --input-std S [--dim D] [--json]`: the
//!   factor `1/sqrt(E[f(z)^2])` of one activation for pre-activation coordinates of std `S`
//!   (swiglu: `u * SiLU(z)` with `u` an independent unit vector, i.e. unit RMS per coordinate).
//!
//! What is estimated (see `normlab_norms::nu`): expectations over uniform unit inputs *and* over
//! random weights (fresh random rows per sample), as in anGPT's derivation.

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use normlab_norms::nu::angpt::{angpt_table, AngptConfig, AngptTable, GateScale, SoftmaxRow};
use normlab_norms::nu::{estimate, estimate_to_precision, Activation, CoordDist, Estimate, McConfig, Pipeline};

use crate::cli::output::{print, print_json};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct NuArgs {
    #[command(subcommand)]
    pub command: NuCommand,
}

#[derive(Debug, Subcommand)]
pub enum NuCommand {
    /// The anGPT factor table for a model configuration.
    Angpt(AngptArgs),
    /// The normalisation factor of one activation (silu, gelu, relu, swiglu).
    Activation(ActivationArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "nu_rms = 1/sqrt(E||g||^2) is the factor anGPT uses; nu_mean = 1/E||g|| is shown beside it. \
Intervals are 95% (Student t, delta method). nu_acf assumes gate coordinates of std nu_uz * gate_scale / sqrt(d_model): \
the default gate scale sqrt(d_model) gives std 0.5 for ratio 4, which reproduces the paper's ~3.74.\n\n\
Example: normlab nu angpt --d-model 256 --heads 4 --mlp-ratio 4 --json")]
pub struct AngptArgs {
    /// Model width d_m (divisible by --heads).
    #[arg(long)]
    pub d_model: usize,
    /// Number of attention heads.
    #[arg(long)]
    pub heads: usize,
    /// MLP hidden width / d_model (hidden = ratio * d_model must be an integer).
    #[arg(long, default_value_t = 4.0)]
    pub mlp_ratio: f64,
    /// Multiplier on the SwiGLU gate pre-activation: `sqrt-d` (sqrt(d_model), the default) or a number.
    #[arg(long, default_value = "sqrt-d")]
    pub gate_scale: String,
    /// Monte Carlo samples per factor.
    #[arg(long, default_value_t = 200_000)]
    pub samples: u64,
    /// Seed (the result does not depend on the number of threads).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Residual LERP alphas, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![0.01, 0.05, 0.1, 0.2, 0.5])]
    pub alphas: Vec<f64>,
    /// Also estimate nu_p behind real dense softmax attention over this many positions.
    #[arg(long)]
    pub softmax_positions: Option<usize>,
    /// Score scale g of that attention (default sqrt(d_head)).
    #[arg(long)]
    pub score_scale: Option<f64>,
    /// Samples for the softmax row (it costs about positions * d_model draws per sample).
    #[arg(long, default_value_t = 20_000)]
    pub softmax_samples: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "The pipeline: x uniform on the unit sphere of R^dim, z = input_std * sqrt(dim) * x \
(coordinates ~ N(0, input_std^2) as dim grows), g = f(z)/sqrt(dim); swiglu: g = u * SiLU(z), u an independent unit vector. \
So nu = 1/sqrt(E[f(z_1)^2]). Closed forms: exact at this dim (quadrature over a sphere coordinate) and the Gaussian limit.\n\n\
Example: normlab nu activation --fn swiglu --input-std 0.5 --json")]
pub struct ActivationArgs {
    /// silu, gelu, relu or swiglu.
    #[arg(long = "fn")]
    pub function: String,
    /// Standard deviation of the pre-activation coordinates.
    #[arg(long)]
    pub input_std: f64,
    /// Dimension of the vectors.
    #[arg(long, default_value_t = 1024)]
    pub dim: usize,
    /// Monte Carlo samples (the first round when --target is given).
    #[arg(long, default_value_t = 20_000)]
    pub samples: u64,
    /// Run until the 95% half width of nu_rms is at most this.
    #[arg(long)]
    pub target: Option<f64>,
    /// Cap on samples with --target.
    #[arg(long, default_value_t = 10_000_000)]
    pub max_samples: u64,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: NuArgs) -> Result<(), CliError> {
    match args.command {
        NuCommand::Angpt(a) => run_angpt(a),
        NuCommand::Activation(a) => run_activation(a),
    }
}

fn bar(json: bool) -> ProgressBar {
    let pb = if json { ProgressBar::hidden() } else { ProgressBar::new(0) };
    if let Ok(style) = ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} samples ({eta})") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

fn parse_gate(s: &str) -> Result<GateScale, CliError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "sqrt-d" | "sqrt_d" | "sqrt(d)" | "sqrtd" => Ok(GateScale::SqrtDModel),
        v => v.parse::<f64>().ok().filter(|x| x.is_finite()).map(GateScale::Value).ok_or_else(|| CliError::InvalidArg {
            flag: "--gate-scale",
            value: s.to_string(),
            why: "expected 'sqrt-d' or a finite number".into(),
        }),
    }
}

fn run_angpt(a: AngptArgs) -> Result<(), CliError> {
    let mut cfg = AngptConfig::new(a.d_model, a.heads);
    cfg.mlp_ratio = a.mlp_ratio;
    cfg.gate_scale = parse_gate(&a.gate_scale)?;
    cfg.alphas = a.alphas.clone();
    let (dh, _) = cfg.dims()?;
    if let Some(s) = a.softmax_positions {
        let score_scale = a.score_scale.unwrap_or((dh as f64).sqrt());
        cfg.softmax = Some(SoftmaxRow { positions: s, score_scale, samples: a.softmax_samples });
    }
    let mc = McConfig { samples: a.samples, seed: a.seed, ..McConfig::default() };
    let pb = bar(a.json);
    let progress = |name: &str, done: u64, total: u64| {
        pb.set_length(total);
        pb.set_position(done);
        pb.set_message(name.to_string());
    };
    let table = angpt_table(&cfg, &mc, Some(&progress));
    pb.finish_and_clear();
    let table = table?;
    if a.json {
        print_json(&table)
    } else {
        print(&angpt_text(&table))
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.5}")).unwrap_or_else(|| "-".into())
}

fn angpt_text(t: &AngptTable) -> String {
    let c = &t.config;
    let mut s = format!(
        "anGPT factors: d_model {} heads {} (d_head {}) mlp_ratio {} (hidden {}), seed {}, {:.0}% intervals\n",
        c.d_model,
        c.heads,
        t.d_head,
        c.mlp_ratio,
        t.d_hidden,
        t.seed,
        t.rows.first().map(|r| r.mc.level * 100.0).unwrap_or(95.0)
    );
    s.push_str(&format!("assumption: {}\n\n", t.assumption));
    s.push_str(&format!(
        "{:<16} {:>28} {:>10} {:>10} {:>10} {:>10} {:>5}  {}\n",
        "factor", "MC 1/sqrt(E||g||^2) [CI]", "MC 1/E||g||", "closed", "d->inf", "paper", "in CI", "paper's formula"
    ));
    for r in &t.rows {
        let ci = format!("{:.5} [{:.5}, {:.5}]", r.mc.nu_rms.value, r.mc.nu_rms.lo, r.mc.nu_rms.hi);
        let within = r.comparison.map(|c| if c.within_ci { "yes" } else { "NO" }).unwrap_or("-");
        s.push_str(&format!(
            "{:<16} {:>28} {:>10.5} {:>10} {:>10} {:>10} {:>5}  {}\n",
            r.name,
            ci,
            r.mc.nu_mean.value,
            opt(r.closed),
            opt(r.asymptotic),
            opt(r.paper),
            within,
            r.paper_note
        ));
    }
    s.push_str("\npipelines:\n");
    for r in &t.rows {
        s.push_str(&format!("  {:<16} {} ({} samples)\n", r.name, r.pipeline, r.mc.samples));
    }
    s
}

/// What `normlab nu activation --json` prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ActivationReport {
    pub function: String,
    pub input_std: f64,
    pub dim: usize,
    pub seed: u64,
    pub estimate: Estimate,
    /// `1/sqrt(E[f(z)^2])` exact at this dim (z a scaled sphere coordinate).
    pub closed: f64,
    /// The Gaussian limit `1/sqrt(E[f(input_std Z)^2])`.
    pub asymptotic: f64,
    pub closed_within_ci: bool,
    pub pipeline: String,
}

fn run_activation(a: ActivationArgs) -> Result<(), CliError> {
    let name = a.function.to_ascii_lowercase();
    let (f, swiglu) = if name == "swiglu" { (Activation::Silu, true) } else { (Activation::parse(&a.function)?, false) };
    if !(a.input_std.is_finite() && a.input_std >= 0.0) {
        return Err(CliError::InvalidArg { flag: "--input-std", value: a.input_std.to_string(), why: "expected a finite value >= 0".into() });
    }
    let d = a.dim;
    let mut p = Pipeline::new();
    let x = p.sphere(d)?;
    let c = a.input_std * (d as f64).sqrt();
    let z = p.scale(x, c)?;
    let (out, pipeline) = if swiglu {
        let u = p.sphere(d)?;
        (p.swiglu(u, z, 1.0)?, format!("u * SiLU(z), u unit in R^{d}, z = {c:.4} x, x unit in R^{d}"))
    } else {
        let act = p.activation(z, f)?;
        (p.scale(act, 1.0 / (d as f64).sqrt())?, format!("{}(z) / sqrt({d}), z = {c:.4} x, x unit in R^{d}", f.name()))
    };
    let mc = McConfig { samples: a.samples, seed: a.seed, ..McConfig::default() };
    let pb = bar(a.json);
    pb.set_message(name.clone());
    let progress = |done: u64, total: u64| {
        pb.set_length(total);
        pb.set_position(done);
    };
    let est = match a.target {
        Some(t) => estimate_to_precision(&p, out, &mc, t, a.max_samples, Some(&progress)),
        None => estimate(&p, out, &mc, Some(&progress)),
    };
    pb.finish_and_clear();
    let est = est?;
    let exact = CoordDist::SphereCoord { d, scale: c }.activation_mean_sq(f)?;
    let limit = CoordDist::Gaussian { std: a.input_std }.activation_mean_sq(f)?;
    let cmp = est.compare(exact);
    let report = ActivationReport {
        function: name,
        input_std: a.input_std,
        dim: d,
        seed: a.seed,
        closed: 1.0 / exact.sqrt(),
        asymptotic: 1.0 / limit.sqrt(),
        closed_within_ci: cmp.within_ci,
        pipeline,
        estimate: est,
    };
    if a.json {
        return print_json(&report);
    }
    let e = &report.estimate;
    print(&format!(
        "{} at input std {} (dim {}, {} samples, seed {}):\n  {:<20}= {:.6} [{:.6}, {:.6}] ({:.0}%)\n  {:<20}= {:.6} [{:.6}, {:.6}]\n  {:<20}= {:.6} ({} the interval)\n  {:<20}= {:.6}\n  pipeline: {}",
        report.function,
        report.input_std,
        d,
        e.samples,
        a.seed,
        "MC 1/sqrt(E||g||^2)",
        e.nu_rms.value,
        e.nu_rms.lo,
        e.nu_rms.hi,
        e.level * 100.0,
        "MC 1/E||g||",
        e.nu_mean.value,
        e.nu_mean.lo,
        e.nu_mean.hi,
        format!("closed (dim {d})"),
        report.closed,
        if report.closed_within_ci { "inside" } else { "OUTSIDE" },
        "closed (dim -> inf)",
        report.asymptotic,
        report.pipeline
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_scale_parsing() {
        assert_eq!(parse_gate("sqrt-d").unwrap(), GateScale::SqrtDModel);
        assert_eq!(parse_gate("2.5").unwrap(), GateScale::Value(2.5));
        assert!(matches!(parse_gate("big"), Err(CliError::InvalidArg { flag: "--gate-scale", .. })));
        assert!(parse_gate("inf").is_err());
    }

    #[test]
    fn text_table_states_the_assumption_and_every_factor() {
        let cfg = AngptConfig::new(32, 2);
        let t = angpt_table(&cfg, &McConfig { samples: 500, ..McConfig::default() }, None).unwrap();
        let text = angpt_text(&t);
        assert!(text.contains("assumption: nu_acf assumes gate_scale = sqrt(d_model)"), "{text}");
        for name in ["nu_qkv", "nu_p", "nu_uz", "nu_acf", "nu_d", "nu(alpha=0.05)"] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
        assert!(text.contains("3.74000"));
    }
}
