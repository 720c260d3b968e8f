//! `normlab compare --preset mini` end to end with real training (seconds): the report's numbers
//! are the runs' numbers, a rerun trains nothing, and a comparison with one unfinished cell
//! trains that cell only.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn normlab(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_normlab")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn json_file(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn compare(dir: &Path) -> Value {
    let (code, out, err) = normlab(&["compare", "--preset", "mini", "--out", dir.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("--json output does not parse ({e}):\n{out}"))
}

#[test]
fn mini_preset_trains_reports_and_resumes() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compare_mini");
    let _ = std::fs::remove_dir_all(&dir);

    let first = compare(&dir);
    let cells: Vec<String> = json_file(&dir.join("manifest.json"))["cells"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    assert_eq!(cells.len(), 8, "mini is 2 archs x 2 norms x 2 precisions x 1 seed");
    assert_eq!(first["ran"].as_array().unwrap().len(), 8);
    assert!(first["skipped"].as_array().unwrap().is_empty());
    for f in ["report.md", "report.html", "summary.json"] {
        assert!(dir.join(f).metadata().unwrap().len() > 1000, "{f}");
    }

    // Every run in summary.json is that run's own summary.json, and every group's final loss is
    // computed from them (one seed: the mean is the run's value, no std).
    let summary = json_file(&dir.join("summary.json"));
    assert_eq!(summary["schema"], "normlab.compare-summary/1");
    let runs = summary["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8);
    for r in runs {
        let cell = r["cell"].as_str().unwrap();
        let own = json_file(&dir.join("runs").join(cell).join("summary.json"));
        assert_eq!(r["summary"], own, "{cell}");
        assert_eq!(own["steps"], 12, "{cell}: mini trains 12 steps");
        let g = summary["groups"].as_array().unwrap().iter().find(|g| g["cells"][0] == cell).unwrap();
        match own["final_val_loss"].as_f64().filter(|_| own["diverged_at"].is_null()) {
            Some(l) => {
                assert_eq!(g["final_val_loss"]["mean"].as_f64(), Some(l), "{cell}");
                assert!(g["final_val_loss"]["std"].is_null());
                assert!(l.is_finite() && l < 8.0, "{cell}: final loss {l}");
            }
            None => assert!(g["final_val_loss"].is_null(), "{cell}"),
        }
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains(cell), "report.md lacks run {cell}");
    }

    // A rerun trains nothing.
    let again = compare(&dir);
    assert!(again["ran"].as_array().unwrap().is_empty(), "{again}");
    assert_eq!(again["skipped"].as_array().unwrap().len(), 8);

    // One unfinished cell (its summary.json gone, as if interrupted): only it is trained; the
    // finished runs' files are untouched.
    let victim = &cells[5];
    let keep = &cells[0];
    let kept_metrics = std::fs::read(dir.join("runs").join(keep).join("metrics.jsonl")).unwrap();
    std::fs::remove_file(dir.join("runs").join(victim).join("summary.json")).unwrap();
    let third = compare(&dir);
    assert_eq!(third["ran"], serde_json::json!([victim]), "{third}");
    assert_eq!(third["skipped"].as_array().unwrap().len(), 7);
    assert!(dir.join("runs").join(victim).join("summary.json").exists());
    assert_eq!(std::fs::read(dir.join("runs").join(keep).join("metrics.jsonl")).unwrap(), kept_metrics);
    let _ = std::fs::remove_dir_all(&dir);
}
