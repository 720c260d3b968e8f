//! The comparison report: reads the finished runs of `DIR`, computes the group statistics and
//! the claims, draws the plots and writes `DIR/report.md`, `DIR/report.html` and
//! `DIR/summary.json` (all atomically). Every number in them comes from the run files.

use std::path::Path;

use super::analysis::{analyse, reference_precision, CellRun, GroupStats, Stat, BASELINE_VARIANT};
use super::claims::{evaluate, nu_acf, Claim};
use super::doc::{to_html, to_markdown, Block, Figure};
use super::error::{io_err, CompareError, Result};
use super::fsio::{write_atomic, write_json_atomic};
use super::load::{load_run, read_summary};
use super::manifest::{read_manifest, run_dir};
use super::plot::{bar_chart, line_chart, BarChart, LineChart, Series};
use super::preset::Preset;
use super::summary::{ComparisonSummary, PresetInfo, ReportProvenance, RunRow, SUMMARY_SCHEMA};
use crate::bench::machine::Provenance;
use crate::model::Arch;

/// Seed of the nu_acf Monte Carlo (fixed, so the report is reproducible).
const NU_SEED: u64 = 374;

/// Load every finished run of the preset in `dir`; also the names of the unfinished cells.
pub fn load_runs(preset: &Preset, dir: &Path) -> Result<(Vec<CellRun>, Vec<String>)> {
    let mut runs = Vec::new();
    let mut missing = Vec::new();
    for cell in &preset.cells {
        let rd = run_dir(dir, &cell.name);
        if read_summary(&rd)?.is_some() {
            runs.push(CellRun { cell: cell.clone(), data: load_run(&cell.name, &rd)? });
        } else {
            missing.push(cell.name.clone());
        }
    }
    Ok((runs, missing))
}

/// One bar chart of the counters/speed figures: file stem, title, y label, and per group
/// (label, precision, value; None draws no bar).
type ChartSpec<'a> = (&'a str, &'a str, &'a str, Vec<(String, String, Option<f64>)>);

fn stat_text(s: Option<Stat>, digits: usize) -> String {
    match s {
        Some(Stat { mean, std: Some(sd), .. }) => format!("{mean:.digits$} ± {sd:.digits$}"),
        Some(Stat { mean, std: None, .. }) => format!("{mean:.digits$}"),
        None => "n/a".into(),
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "n/a".into())
}

/// Mean over seeds of `(x, y)` at each evaluation step where every seed has a finite value.
fn mean_curve(runs: &[&CellRun], xy: impl Fn(&crate::train::EvalRecord) -> (f64, f64)) -> Vec<(f64, f64)> {
    let Some(first) = runs.first() else { return Vec::new() };
    let mut out = Vec::new();
    for e in &first.data.evals {
        let pts: Vec<(f64, f64)> = runs.iter().filter_map(|r| r.data.evals.iter().find(|x| x.step == e.step).map(&xy)).filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        if pts.len() == runs.len() {
            let n = pts.len() as f64;
            out.push((pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n));
        }
    }
    out
}

fn summary_table(stats: &[GroupStats]) -> Block {
    let header = [
        "group (arch/variant/precision)", "runs", "final val loss (mean ± std)", "diverged (steps)", "steps to GPT+'s loss", "speedup vs GPT+", "acc. overflows/run", "non-finite in/out per run", "skipped steps/run", "step time ms", "tokens/s", "step overhead vs GPT+",
    ];
    let rows = stats
        .iter()
        .map(|g| {
            vec![
                g.label(),
                g.runs().to_string(),
                stat_text(g.final_val_loss, 4),
                if g.diverged_runs == 0 { format!("0/{}", g.runs()) } else { format!("{}/{} ({:?})", g.diverged_runs, g.runs(), g.diverged_at) },
                match (g.target_loss, g.steps_to_target) {
                    (None, _) => format!("n/a ({})", g.target_note.as_deref().unwrap_or("no GPT+ baseline")),
                    (Some(_), Some(s)) => stat_text(Some(s), 0),
                    (Some(_), None) => format!("not reached ({}/{} runs)", g.reached_target, g.runs()),
                },
                opt(g.speedup, |v| format!("{v:.2}x")),
                format!("{:.1}", g.counters.acc_overflow),
                format!("{:.1} / {:.1}", g.counters.nonfinite_in, g.counters.nonfinite_out),
                format!("{:.1}", g.counters.skipped_steps),
                stat_text(g.step_time_s.map(|s| Stat { mean: s.mean * 1e3, std: s.std.map(|d| d * 1e3), n: s.n }), 2),
                stat_text(g.tokens_per_s, 0),
                opt(g.overhead, |v| format!("{:+.1}%", v * 100.0)),
            ]
        })
        .collect();
    Block::Table { header: header.iter().map(|s| s.to_string()).collect(), rows }
}

fn claims_table(claims: &[Claim]) -> Block {
    Block::Table {
        header: ["source", "claim", "paper", "this run", "verdict", "rule"].iter().map(|s| s.to_string()).collect(),
        rows: claims.iter().map(|c| vec![c.source.clone(), c.claim.clone(), c.paper.clone(), c.measured.clone(), c.verdict.text().to_string(), c.rule.clone()]).collect(),
    }
}

fn runs_table(runs: &[CellRun]) -> Block {
    Block::Table {
        header: ["run", "final val loss", "best val loss", "diverged at", "acc. overflows", "non-finite in/out", "skipped steps", "median step ms", "tokens/s", "wall s"].iter().map(|s| s.to_string()).collect(),
        rows: runs
            .iter()
            .map(|r| {
                let s = &r.data.summary;
                vec![
                    r.cell.name.clone(),
                    opt(s.final_val_loss, |v| format!("{v:.4}")),
                    opt(s.best_val_loss, |v| format!("{v:.4}")),
                    r.diverged_at().map(|d| d.to_string()).unwrap_or_else(|| "-".into()),
                    s.counters.acc_overflow.to_string(),
                    format!("{} / {}", s.counters.nonfinite_in, s.counters.nonfinite_out),
                    s.skipped_steps.to_string(),
                    format!("{:.2}", s.median_step_time_s * 1e3),
                    format!("{:.0}", s.tokens_per_s),
                    format!("{:.1}", s.wall_s),
                ]
            })
            .collect(),
    }
}

/// Draw every plot into `DIR/plots/`; returns the figures (paths relative to DIR).
fn plots(dir: &Path, runs: &[CellRun], stats: &[GroupStats], reference: Option<crate::train::Precision>) -> Result<Vec<Figure>> {
    let pdir = dir.join("plots");
    std::fs::create_dir_all(&pdir).map_err(io_err(&pdir))?;
    let mut figs = Vec::new();
    let mut add = |stem: &str, caption: String| figs.push(Figure { caption, svg: format!("plots/{stem}.svg"), png: format!("plots/{stem}.png") });
    let groups = super::analysis::group_runs(runs);
    let mut precisions: Vec<crate::train::Precision> = Vec::new();
    for r in runs {
        if !precisions.contains(&r.cell.precision) {
            precisions.push(r.cell.precision);
        }
    }
    // Validation loss against steps and wall time, one chart per precision.
    for &p in &precisions {
        let in_p: Vec<&Vec<&CellRun>> = groups.iter().filter(|g| g[0].cell.precision == p).collect();
        for (stem, x_label, pick) in [("val_loss_vs_step", "step", 0usize), ("val_loss_vs_wall", "wall time (s)", 1)] {
            let series = in_p
                .iter()
                .map(|g| Series { name: format!("{}/{}", g[0].cell.arch.name(), g[0].cell.variant), points: mean_curve(g, |e| (if pick == 0 { e.step as f64 } else { e.wall_s }, e.val_loss)) })
                .collect();
            let stem = format!("{stem}_{}", p.name());
            line_chart(&pdir.join(&stem), &LineChart { title: format!("validation loss vs {x_label}, {} (mean over seeds)", p.name()), x_label: x_label.into(), y_label: "validation loss".into(), series })?;
            add(&stem, format!("Validation loss against {x_label} per model and variant, {} (mean over seeds).", p.name()));
        }
    }
    // Per-layer residual-stream norm over training (anGPT Fig. 1), reference precision, l2.
    if let Some(rp) = reference {
        let mut profile = Vec::new();
        for arch in Arch::ALL {
            let Some(g) = groups.iter().find(|g| g[0].cell.arch == arch && g[0].cell.precision == rp && g[0].cell.variant == BASELINE_VARIANT) else { continue };
            let r = g[0];
            let n_layers = r.data.evals.iter().map(|e| e.layers.len()).max().unwrap_or(0);
            if n_layers == 0 {
                continue;
            }
            let series = (0..n_layers)
                .map(|l| Series { name: format!("layer {l}"), points: r.data.evals.iter().filter_map(|e| e.layers.iter().find(|x| x.layer == l).map(|x| (e.step as f64, x.residual_norm))).collect() })
                .collect();
            let stem = format!("residual_norm_{}_{}_{}", arch.name(), BASELINE_VARIANT, rp.name());
            line_chart(&pdir.join(&stem), &LineChart { title: format!("residual-stream norm per layer, {} ({})", r.cell.name, rp.name()), x_label: "step".into(), y_label: "mean ||h||".into(), series })?;
            add(&stem, format!("Per-layer residual-stream norm over training, run {} (anGPT Fig. 1).", r.cell.name));
            if let Some(last) = r.data.evals.last() {
                profile.push(Series { name: arch.name().into(), points: last.layers.iter().map(|x| (x.layer as f64, x.residual_norm)).collect() });
            }
        }
        if !profile.is_empty() {
            line_chart(&pdir.join("residual_norm_by_layer"), &LineChart { title: format!("residual-stream norm by layer at the last evaluation ({}, {BASELINE_VARIANT})", rp.name()), x_label: "layer".into(), y_label: "mean ||h||".into(), series: profile })?;
            add("residual_norm_by_layer", "Residual-stream norm against depth at the end of training, per architecture.".into());
        }
    }
    // Counters and speed per group, coloured by precision.
    let row = |g: &GroupStats, v: Option<f64>| (format!("{}/{}", g.arch, g.variant), g.precision.clone(), v);
    let log1p = |v: f64| (1.0 + v).log10();
    let charts: [ChartSpec; 5] = [
        ("acc_overflow", "accumulation overflows per run (mean over seeds)", "log10(1 + overflows per run)", stats.iter().map(|g| row(g, Some(log1p(g.counters.acc_overflow)))).collect()),
        ("nonfinite", "non-finite norm inputs + outputs per run", "log10(1 + count per run)", stats.iter().map(|g| row(g, Some(log1p(g.counters.nonfinite_in + g.counters.nonfinite_out)))).collect()),
        ("divergence_step", "step of divergence (mean over diverged runs; no bar = none diverged)", "step", stats.iter().map(|g| row(g, (!g.diverged_at.is_empty()).then(|| g.diverged_at.iter().sum::<u64>() as f64 / g.diverged_at.len() as f64))).collect()),
        ("step_time", "median step time (mean over seeds)", "ms", stats.iter().map(|g| row(g, g.step_time_s.map(|s| s.mean * 1e3))).collect()),
        ("tokens_per_s", "training throughput (mean over seeds)", "tokens/s", stats.iter().map(|g| row(g, g.tokens_per_s.map(|s| s.mean))).collect()),
    ];
    for (stem, title, x_label, rows) in charts {
        bar_chart(&pdir.join(stem), &BarChart { title: title.into(), x_label: x_label.into(), rows })?;
        add(stem, format!("{title}, per variant (colour: precision)."));
    }
    Ok(figs)
}

/// Build the report of `dir` (which must hold `preset`'s manifest); `command` is recorded.
pub fn write_report(preset: &Preset, dir: &Path, command: &str) -> Result<ComparisonSummary> {
    let m = read_manifest(dir)?;
    if m.preset_hash != preset.hash {
        return Err(CompareError::ForeignPreset { path: dir.to_path_buf(), found_name: m.preset_name, found_hash: m.preset_hash, expected_name: preset.name.clone(), expected_hash: preset.hash.clone() });
    }
    let (runs, missing) = load_runs(preset, dir)?;
    let stats = analyse(&runs);
    let reference = reference_precision(&runs);
    let model = preset.cells.iter().find(|c| c.arch == Arch::AnGpt).map(|c| &c.config.model).unwrap_or(preset.base_model());
    let nu = nu_acf(model.d_model, model.mlp_ratio, model.gate_scale, preset.nu_samples, NU_SEED)?;
    let claims = match reference {
        Some(p) => evaluate(&runs, &stats, p, &nu),
        None => evaluate(&runs, &stats, crate::train::Precision::F32, &nu),
    };
    let prov = Provenance::detect();
    let provenance = ReportProvenance {
        command: command.to_string(),
        git_commit: prov.git_commit.clone().unwrap_or_else(|| "unknown".into()),
        git_dirty: prov.git_dirty,
        machine: prov.machine.clone(),
        versions: prov.versions.clone(),
        unix_time: prov.unix_time,
    };
    let figs = plots(dir, &runs, &stats, reference)?;

    let mut b = vec![Block::Heading(1, format!("normlab comparison: preset {}", preset.name))];
    if !preset.description.is_empty() {
        b.push(Block::Para(preset.description.clone()));
    }
    b.push(Block::Para(format!(
        "{} of {} runs finished; claims judged in {}. Baseline of every relative number: GPT+ with its own norm (`gpt_plus/{BASELINE_VARIANT}`) in the same precision.",
        runs.len(),
        preset.cells.len(),
        reference.map(|p| p.name()).unwrap_or("n/a")
    )));
    if !missing.is_empty() {
        b.push(Block::Para(format!("Not finished (left out of every number below): {}.", missing.join(", "))));
    }
    b.push(Block::Heading(2, "Summary".into()));
    b.push(Block::Para("Final validation loss: mean ± sample std over the seeds whose run did not diverge. Steps to GPT+'s loss: first step (interpolated between evaluations) at which the validation loss reaches GPT+'s mean final loss, mean over seeds, only when every seed gets there. Speedup: GPT+'s steps over those steps. Counters: the norms' counters, mean per run.".into()));
    b.push(summary_table(&stats));
    b.push(Block::Heading(2, "Claims".into()));
    b.push(Block::Para("Each verdict is computed from the numbers of this comparison by the rule in its row; \"not measured in this preset\" means the preset has no runs that test it.".into()));
    b.push(claims_table(&claims));
    b.push(Block::Heading(2, "Plots".into()));
    b.extend(figs.iter().cloned().map(Block::Figure));
    b.push(Block::Heading(2, "Runs".into()));
    b.push(runs_table(&runs));
    b.push(Block::Heading(2, "Provenance".into()));
    b.push(Block::Table {
        header: vec!["what".into(), "value".into()],
        rows: vec![
            vec!["command".into(), format!("`{command}`")],
            vec!["preset".into(), format!("{} (sha256 of its cells {})", preset.name, preset.hash)],
            vec!["git commit".into(), format!("{}{}", provenance.git_commit, if provenance.git_dirty == Some(true) { " (with uncommitted changes)" } else { "" })],
            vec!["machine".into(), format!("{}, {} logical cores, {} {}", provenance.machine.cpu_model.as_deref().unwrap_or("unknown CPU"), provenance.machine.logical_cores, provenance.machine.os, provenance.machine.arch)],
            vec!["versions".into(), format!("normlab {}, rustc {}, candle-core {}, {} build", provenance.versions.normlab, provenance.versions.rustc.as_deref().unwrap_or("unknown"), provenance.versions.candle_core.as_deref().unwrap_or("unknown"), provenance.versions.profile)],
        ],
    });
    b.push(Block::Para("The preset:".into()));
    b.push(Block::Code(preset.source_text.trim_end().to_string()));

    let title = format!("normlab comparison: {}", preset.name);
    write_atomic(&dir.join("report.md"), to_markdown(&b).as_bytes())?;
    write_atomic(&dir.join("report.html"), to_html(&b, &title, dir).as_bytes())?;
    let summary = ComparisonSummary {
        schema: SUMMARY_SCHEMA.to_string(),
        preset: PresetInfo { name: preset.name.clone(), description: preset.description.clone(), hash: preset.hash.clone(), cells: preset.cells.len(), source: preset.source_text.clone() },
        provenance,
        reference_precision: reference.map(|p| p.name().to_string()),
        missing_cells: missing,
        groups: stats,
        runs: runs.iter().map(|r| RunRow { cell: r.cell.name.clone(), arch: r.cell.arch.name().into(), variant: r.cell.variant.clone(), precision: r.cell.precision.name().into(), seed: r.cell.seed, summary: r.data.summary.clone() }).collect(),
        claims,
        nu_acf: nu,
        plots: figs.iter().flat_map(|f| [f.svg.clone(), f.png.clone()]).collect(),
    };
    write_json_atomic(&dir.join("summary.json"), &summary)?;
    Ok(summary)
}
