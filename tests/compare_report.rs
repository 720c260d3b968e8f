//! The comparison report from synthetic run directories: its numbers come from the runs
//! (change an input, the report changes), the claims' verdicts follow the numbers, and the
//! report files and plots are all written.

use crate::compare_common;

use compare_common::*;
use normlab::compare::manifest::prepare_dir;
use normlab::compare::{write_report, Preset};
use serde_json::Value;

fn final_loss(s: &Synth) -> f64 {
    loss_at(s, STEPS - 1) + 0.05
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (m, (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt())
}

/// Steps for `s` to reach `target` on its evaluations (linear interpolation), independently.
fn crossing(s: &Synth, target: f64) -> f64 {
    let mut evals: Vec<u64> = (0..STEPS).step_by(EVAL_EVERY as usize).collect();
    evals.push(STEPS - 1);
    let val = |t: u64| loss_at(s, t) + 0.05;
    for w in evals.windows(2) {
        let (a, b) = (w[0], w[1]);
        if val(b) <= target {
            return a as f64 + (val(a) - target) / (val(a) - val(b)) * (b - a) as f64;
        }
    }
    panic!("never reached {target}");
}

fn claim<'a>(summary: &'a Value, id: &str) -> &'a Value {
    summary["claims"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("claim {id} missing"))
}

fn read(dir: &std::path::Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"))
}

#[test]
fn report_numbers_and_verdicts_come_from_the_runs() {
    let dir = temp_dir("report");
    let preset = Preset::parse(&preset_text("1, 2"), "synthetic").unwrap();
    prepare_dir(&dir, &preset).unwrap();
    for cell in &preset.cells {
        write_run(&dir, cell, &default_synth(cell));
    }
    let summary = write_report(&preset, &dir, "normlab compare --preset synthetic").unwrap();
    let json: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
    assert_eq!(json["schema"], "normlab.compare-summary/1");
    assert_eq!(json["runs"].as_array().unwrap().len(), 24);
    assert_eq!(summary.missing_cells.len(), 0);
    let md = read(&dir, "report.md");
    let html = read(&dir, "report.html");

    // Final validation loss mean +- std of GPT+ l2 f32, computed here from the synthetic inputs.
    let cell = |name: &str| preset.cells.iter().find(|c| c.name == name).unwrap().clone();
    let base: Vec<Synth> = [1, 2].iter().map(|s| default_synth(&cell(&format!("gpt_plus-l2-f32-s{s}")))).collect();
    let (m, sd) = mean_std(&base.iter().map(final_loss).collect::<Vec<_>>());
    let text = format!("{m:.4} ± {sd:.4}");
    assert!(md.contains(&format!("| gpt_plus/l2/f32 | 2 | {text} |")), "report.md lacks {text}:\n{md}");
    assert!(html.contains(&text), "report.html lacks {text}");

    // anGPT's speedup: GPT+'s 100 steps over the mean steps to GPT+'s mean final loss.
    let an: Vec<f64> = [1, 2].iter().map(|s| crossing(&default_synth(&cell(&format!("angpt-l2-f32-s{s}"))), m)).collect();
    let speedup = STEPS as f64 / (an.iter().sum::<f64>() / 2.0);
    let c = claim(&json, "angpt_speedup");
    assert!(c["measured"].as_str().unwrap().starts_with(&format!("{speedup:.2}x")), "{c}");
    assert_eq!(c["verdict"], if speedup >= 1.26 { "supported" } else { "not_supported" });
    assert!(md.contains(&format!("{speedup:.2}x")));

    // Verdicts of the other claims for these inputs.
    assert_eq!(claim(&json, "norm_matters_4_3_fp16")["verdict"], "supported");
    assert!(claim(&json, "norm_matters_4_3_fp16")["measured"].as_str().unwrap().contains("diverged at step 37, 37"));
    assert_eq!(claim(&json, "norm_matters_4_1_same_accuracy")["verdict"], "supported");
    assert_eq!(claim(&json, "norm_matters_4_1_constant")["verdict"], "not_measured");
    assert_eq!(claim(&json, "angpt_overhead")["verdict"], "supported"); // +2.0%
    assert!(claim(&json, "angpt_overhead")["measured"].as_str().unwrap().starts_with("+2.0%"));
    assert_eq!(claim(&json, "ngpt_speedup")["verdict"], "supported");
    let nu = json["nu_acf"]["value"].as_f64().unwrap();
    assert!((nu - 3.7264).abs() < 0.03, "nu_acf {nu}");
    assert_eq!(claim(&json, "angpt_nu_acf")["verdict"], "supported");

    // Counters: 30 overflows per step for 100 steps in the diverged L2 pure f16 runs.
    let g = json["groups"].as_array().unwrap().iter().find(|g| g["arch"] == "ngpt" && g["variant"] == "l2" && g["precision"] == "pure_f16").unwrap();
    assert_eq!(g["counters"]["acc_overflow"].as_f64(), Some(3000.0));
    assert_eq!(g["diverged_runs"].as_u64(), Some(2));

    // Report files: self-contained HTML with inline SVG, PNG and SVG plots.
    assert!(html.contains("<svg") && !html.contains("src=\""), "HTML must inline its figures");
    for p in json["plots"].as_array().unwrap() {
        let p = p.as_str().unwrap();
        let bytes = std::fs::read(dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(bytes.len() > 1000, "{p} is {} bytes", bytes.len());
        if p.ends_with(".png") {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{p}");
        }
    }
    for stem in ["val_loss_vs_step_f32", "val_loss_vs_wall_pure_f16", "residual_norm_gpt_plus_l2_f32", "residual_norm_by_layer", "acc_overflow", "step_time", "tokens_per_s"] {
        assert!(dir.join(format!("plots/{stem}.svg")).exists() && dir.join(format!("plots/{stem}.png")).exists(), "{stem}");
    }
    assert!(md.contains("normlab compare --preset synthetic") && md.contains(&preset.hash), "provenance");

    // Change the inputs: L2 no longer breaks in pure f16, one GPT+ run ends higher.
    for cell in preset.cells.iter().filter(|c| c.variant == "l2" && c.precision.name() == "pure_f16") {
        let mut s = default_synth(cell);
        s.diverge_at = None;
        s.acc_overflow_per_step = 0;
        write_run(&dir, cell, &s);
    }
    let c1 = cell("gpt_plus-l2-f32-s1");
    let mut s1 = default_synth(&c1);
    s1.floor = 2.5;
    write_run(&dir, &c1, &s1);
    write_report(&preset, &dir, "normlab compare --preset synthetic").unwrap();
    let json2: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
    let md2 = read(&dir, "report.md");
    assert_eq!(claim(&json2, "norm_matters_4_3_fp16")["verdict"], "not_supported");
    let (m2, sd2) = mean_std(&[final_loss(&s1), final_loss(&base[1])]);
    // The f32 row changed; (the pure_f16 L2 row now has the old f32 numbers, legitimately).
    assert!(md2.contains(&format!("| gpt_plus/l2/f32 | 2 | {m2:.4} ± {sd2:.4} |")), "new mean not in the report");
    assert!(!md2.contains(&format!("| gpt_plus/l2/f32 | 2 | {text} |")), "old mean still in the report");
    assert_ne!(claim(&json, "angpt_speedup")["measured"], claim(&json2, "angpt_speedup")["measured"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_runs_are_listed_not_invented() {
    let dir = temp_dir("partial");
    let preset = Preset::parse(&preset_text("1"), "synthetic").unwrap();
    prepare_dir(&dir, &preset).unwrap();
    // Only GPT+ runs finished: the speedup claims cannot be measured.
    for cell in preset.cells.iter().filter(|c| c.arch.name() == "gpt_plus") {
        write_run(&dir, cell, &default_synth(cell));
    }
    let s = write_report(&preset, &dir, "test").unwrap();
    assert_eq!(s.missing_cells.len(), 8);
    assert_eq!(s.runs.len(), 4);
    let json: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
    assert_eq!(claim(&json, "angpt_speedup")["verdict"], "not_measured");
    assert_eq!(claim(&json, "ngpt_speedup")["verdict"], "not_measured");
    assert!(read(&dir, "report.md").contains("Not finished (left out of every number below): ngpt-l2-f32-s1"));
    // A corrupt metrics line is an error naming the file and line.
    let bad = dir.join("runs/gpt_plus-l2-f32-s1/metrics.jsonl");
    let mut text = std::fs::read_to_string(&bad).unwrap();
    text.push_str("{\"kind\":\"step\",\"step\":\n");
    std::fs::write(&bad, text.clone()).unwrap();
    let e = write_report(&preset, &dir, "test").unwrap_err().to_string();
    assert!(e.contains("metrics.jsonl line") && e.contains(&text.lines().count().to_string()), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_baseline_is_its_own_unit_and_a_baseline_that_did_not_learn_sets_no_target() {
    let dir = temp_dir("baseline");
    let preset = Preset::parse(&preset_text("1, 2"), "synthetic").unwrap();
    prepare_dir(&dir, &preset).unwrap();
    for cell in &preset.cells {
        let mut s = default_synth(cell);
        // A non-monotone baseline curve that dips below its final value early on: its own
        // crossing would be an early step, which must not count as a speedup over itself.
        if cell.arch.name() == "gpt_plus" && cell.variant == "l2" && cell.precision.name() == "f32" {
            s.floor = 2.0 + 0.2 * cell.seed as f64;
        }
        write_run(&dir, cell, &s);
    }
    let s = write_report(&preset, &dir, "test").unwrap();
    let base = s.groups.iter().find(|g| g.label() == "gpt_plus/l2/f32").unwrap();
    assert_eq!(base.speedup, Some(1.0));
    assert_eq!(base.steps_to_target.map(|t| t.mean), Some(STEPS as f64));
    assert_eq!(base.reached_target, 2);

    // GPT+ in f32 ends above ln(256): no target loss, the speedup claims are not measured.
    for cell in preset.cells.iter().filter(|c| c.arch.name() == "gpt_plus" && c.variant == "l2" && c.precision.name() == "f32") {
        let mut s = default_synth(cell);
        s.floor = 6.0;
        write_run(&dir, cell, &s);
    }
    let s = write_report(&preset, &dir, "test").unwrap();
    let g = s.groups.iter().find(|g| g.label() == "angpt/l2/f32").unwrap();
    assert_eq!(g.target_loss, None);
    assert_eq!(g.speedup, None);
    assert!(g.target_note.as_deref().unwrap().contains("did not learn"), "{:?}", g.target_note);
    let json: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
    for id in ["angpt_speedup", "ngpt_speedup"] {
        assert_eq!(claim(&json, id)["verdict"], "not_measured", "{id}");
        assert!(claim(&json, id)["measured"].as_str().unwrap().contains("did not learn"), "{id}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

type Paths = std::collections::BTreeSet<String>;

/// The paths of `v` (`a.b`, arrays as `a[]`) over every element of every array: `leaves` gets
/// the values that are not objects (null included), `objects` the objects.
fn json_paths(v: &Value, prefix: &str, leaves: &mut Paths, objects: &mut Paths) {
    match v {
        Value::Object(m) => {
            if !prefix.is_empty() {
                objects.insert(prefix.to_string());
            }
            for (k, x) in m {
                let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                json_paths(x, &p, leaves, objects);
            }
        }
        Value::Array(a) if a.iter().any(|x| x.is_object()) => a.iter().for_each(|x| json_paths(x, &format!("{prefix}[]"), leaves, objects)),
        Value::Array(_) => {
            leaves.insert(format!("{prefix}[]"));
        }
        _ => {
            leaves.insert(prefix.to_string());
        }
    }
}

#[test]
fn summary_schema_doc_lists_exactly_the_fields_written() {
    let dir = temp_dir("schema");
    let preset = Preset::parse(&preset_text("1, 2"), "synthetic").unwrap();
    prepare_dir(&dir, &preset).unwrap();
    for cell in &preset.cells {
        write_run(&dir, cell, &default_synth(cell));
    }
    write_report(&preset, &dir, "test").unwrap();
    let json: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
    let (mut leaves, mut objects) = (Paths::new(), Paths::new());
    json_paths(&json, "", &mut leaves, &mut objects);
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/summary-schema.md")).unwrap();
    let documented: std::collections::BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next().map(str::to_string))
        .collect();
    let undocumented: Vec<_> = leaves.difference(&documented).collect();
    assert!(undocumented.is_empty(), "fields written but not in docs/summary-schema.md: {undocumented:?}");
    // The doc may also name objects (those that can be null), but nothing that is not written.
    let stale: Vec<_> = documented.iter().filter(|p| !leaves.contains(*p) && !objects.contains(*p)).collect();
    assert!(stale.is_empty(), "fields in docs/summary-schema.md that summary.json does not have: {stale:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// 4.3 per regime: a neutral regime (neither norm breaks) does not hide one where L2 breaks and
/// L1 holds; an L1 run that breaks contradicts the claim.
#[test]
fn half_precision_claim_is_judged_per_regime() {
    let dir = temp_dir("regimes");
    let text = preset_text("1").replace(
        r#"variants = [{ norm = { kind = "l2" } }, { norm = { kind = "l1" } }]"#,
        r#"variants = [{ norm = { kind = "l2" } }, { norm = { kind = "l1" } }, { norm = { kind = "l2" }, label = "l2_bigact", model = { init_std = 0.5 } }, { norm = { kind = "l1" }, label = "l1_bigact", model = { init_std = 0.5 } }]"#,
    );
    let preset = Preset::parse(&text, "synthetic").unwrap();
    assert_eq!(preset.cells.len(), 3 * 4 * 2);
    prepare_dir(&dir, &preset).unwrap();
    let write = |l1_bigact_breaks: bool| {
        for cell in &preset.cells {
            let mut s = default_synth(cell);
            let f16 = cell.precision.name() == "pure_f16";
            s.diverge_at = None;
            s.acc_overflow_per_step = 0;
            if f16 && cell.variant == "l2_bigact" {
                s.floor = 5.5; // stuck near ln(256): broke (> 5% above its f32 twin)
                s.acc_overflow_per_step = 1500;
            }
            if f16 && cell.variant == "l1_bigact" && l1_bigact_breaks {
                s.diverge_at = Some(50);
            }
            write_run(&dir, cell, &s);
        }
        write_report(&preset, &dir, "test").unwrap();
        let json: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
        claim(&json, "norm_matters_4_3_fp16").clone()
    };
    let c = write(false);
    assert_eq!(c["verdict"], "supported", "{c}");
    let m = c["measured"].as_str().unwrap();
    assert!(m.contains("gpt_plus/l2 vs l1: L2 broke 0/1") && m.contains("neutral: neither broke"), "{m}");
    assert!(m.contains("gpt_plus/l2_bigact vs l1_bigact: L2 broke 1/1") && m.contains("150000.0 acc. overflows/run") && m.contains("supports"), "{m}");
    let c = write(true);
    assert_eq!(c["verdict"], "not_supported", "{c}");
    assert!(c["measured"].as_str().unwrap().contains("L1 broke 1/1 (final loss") && c["measured"].as_str().unwrap().contains("diverged at step 50"), "{c}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// 4.1 "same accuracy" is one-sided: L1 ending lower than L2 supports the claim, L1 ending more
/// than 2% higher than L2 in any architecture does not.
#[test]
fn l1_same_accuracy_claim_is_one_sided() {
    let dir = temp_dir("l1-one-sided");
    let preset = Preset::parse(&preset_text("1"), "synthetic").unwrap();
    prepare_dir(&dir, &preset).unwrap();
    // `l1_floor` is the f32 L1 runs' loss floor; the L2 runs keep the default floor 2.01.
    let write = |l1_floor: f64| {
        for cell in &preset.cells {
            let mut s = default_synth(cell);
            if cell.variant == "l1" && cell.precision.name() == "f32" {
                s.floor = l1_floor;
            }
            write_run(&dir, cell, &s);
        }
        write_report(&preset, &dir, "test").unwrap();
        let json: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
        claim(&json, "norm_matters_4_1_same_accuracy").clone()
    };
    // L1 about 10% lower than L2 in every arch: supported, and said so.
    let c = write(1.8);
    assert_eq!(c["verdict"], "supported", "{c}");
    assert!(c["measured"].as_str().unwrap().contains("L1 lower"), "{c}");
    // L1 about 10% higher: not supported.
    let c = write(2.25);
    assert_eq!(c["verdict"], "not_supported", "{c}");
    assert!(c["measured"].as_str().unwrap().contains("L1 worse"), "{c}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// 4.1 "without C_L1, more than twice the steps": the target is the worst final loss of the
/// l1/l1_no_cl1 pair, which both reach, so the claim is judged even when L1 never reaches
/// GPT+'s final loss (as in the standard preset, where it ends a little above it).
#[test]
fn l1_constant_claim_uses_a_target_both_variants_reach() {
    let dir = temp_dir("l1-constant");
    let text = preset_text("1, 2").replace(
        r#"variants = [{ norm = { kind = "l2" } }, { norm = { kind = "l1" } }]"#,
        r#"variants = [{ norm = { kind = "l2" } }, { norm = { kind = "l1" } }, { norm = { kind = "l1" }, label = "l1_no_cl1", model = { norm_constant = "one" } }]"#,
    );
    let preset = Preset::parse(&text, "synthetic").unwrap();
    prepare_dir(&dir, &preset).unwrap();
    // L1 ends 0.2 above GPT+ (never reaches GPT+'s final loss), with and without the constant;
    // `tau_no` is the decay time of the runs without it, `diverge_no` makes them diverge.
    let write = |tau_no: f64, diverge_no: bool| {
        for cell in &preset.cells {
            let mut s = default_synth(cell);
            if cell.variant.starts_with("l1") && cell.precision.name() == "f32" {
                s.floor = 2.2;
                s.tau = 10.0;
            }
            if cell.variant == "l1_no_cl1" && cell.precision.name() == "f32" {
                s.tau = tau_no;
                s.diverge_at = diverge_no.then_some(60);
            }
            write_run(&dir, cell, &s);
        }
        write_report(&preset, &dir, "test").unwrap();
        let json: Value = serde_json::from_str(&read(&dir, "summary.json")).unwrap();
        claim(&json, "norm_matters_4_1_constant").clone()
    };
    // The target is the worst final loss of the eight runs; steps computed independently here.
    let expect = |tau_no: f64| {
        let cell = |name: &str| preset.cells.iter().find(|c| c.name == name).unwrap();
        let synth = |variant: &str, seed: u64| {
            let tau = if variant == "l1" { 10.0 } else { tau_no };
            Synth { floor: 2.2, tau, diverge_at: None, ..default_synth(cell(&format!("gpt_plus-{variant}-f32-s{seed}"))) }
        };
        let runs: Vec<(&str, Synth)> = ["l1", "l1_no_cl1"].iter().flat_map(|v| [1, 2].map(|s| (*v, synth(v, s)))).collect();
        let target = runs.iter().map(|(_, s)| final_loss(s)).fold(f64::MIN, f64::max);
        let steps = |v: &str| runs.iter().filter(|(w, _)| *w == v).map(|(_, s)| crossing(s, target)).sum::<f64>() / 2.0;
        (target, steps("l1_no_cl1") / steps("l1"))
    };
    // Three times slower without the constant: supported, with the numbers computed here.
    let c = write(30.0, false);
    assert_eq!(c["verdict"], "supported", "{c}");
    let (target, ratio) = expect(30.0);
    assert!(ratio >= 2.0, "{ratio}");
    let m = c["measured"].as_str().unwrap();
    assert!(m.contains(&format!("gpt_plus: steps to {target:.4}")) && m.contains(&format!("(ratio {ratio:.2})")), "{m}");
    // Faster without the constant: not supported (the old rule called this "not measured").
    let c = write(5.0, false);
    assert_eq!(c["verdict"], "not_supported", "{c}");
    let (_, ratio) = expect(5.0);
    assert!(ratio < 1.0, "{ratio}");
    assert!(c["measured"].as_str().unwrap().contains(&format!("(ratio {ratio:.2})")), "{c}");
    // Diverging without the constant: never reaches the target, supports the claim.
    let c = write(10.0, true);
    assert_eq!(c["verdict"], "supported", "{c}");
    assert!(c["measured"].as_str().unwrap().contains("ratio inf") && c["measured"].as_str().unwrap().contains("diverged"), "{c}");
    let _ = std::fs::remove_dir_all(&dir);
}
