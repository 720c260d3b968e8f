//! `normlab bench norms` as CI runs it: `--quick --json` must finish and print the documented
//! schema; bad flags must be refused by name.

use std::process::{Command, Output};

fn normlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_normlab")).args(args).output().expect("the normlab binary runs")
}

#[test]
fn quick_json_parses_and_has_every_case() {
    let out = normlab(&["bench", "norms", "--quick", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {:?}, stderr: {stderr}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["schema"], "normlab.bench.norms/1");
    assert!(v["copy_bandwidth"]["gb_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["copy_bandwidth"]["bytes_per_rep"].as_u64().unwrap(), 2 * v["copy_bandwidth"]["buffer_bytes"].as_u64().unwrap());
    assert!(v["provenance"]["machine"]["logical_cores"].as_u64().unwrap() >= 1);
    assert!(v["provenance"]["versions"]["candle_nn"].is_string());
    let cases = v["cases"].as_array().unwrap();
    // 1 shape x 3 dtypes x 6 kinds x 2 directions.
    assert_eq!(cases.len(), 36);
    assert_eq!(v["baselines"].as_array().unwrap().len(), 6);
    for c in cases {
        let median = c["timing"]["median_s"].as_f64().unwrap();
        let bytes = c["bytes"].as_f64().unwrap();
        assert!(median > 0.0);
        assert!((c["gb_per_s"].as_f64().unwrap() - bytes / median / 1e9).abs() < 1e-9 * bytes / median);
        let fwd = c["direction"] == "forward";
        assert_eq!(c["candle_rms_norm_ratio"].is_f64(), fwd, "{c}");
        assert_eq!(c["counters"]["nonfinite_out"], 0);
    }
    assert_eq!(v["summary"]["forwards"], 18);
}

#[test]
fn quick_text_mentions_copy_bandwidth_and_goals() {
    let out = normlab(&["bench", "norms", "--quick", "--dtypes", "f32", "--kinds", "rms,topk", "--topk-k", "4", "--reps", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["copy bandwidth", "candle rms_norm", "topk4", "backward", "Goals"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

/// `--rounds` spreads each case's timed runs: every case still has exactly `--reps` of them,
/// and the JSON says how they were taken.
#[test]
fn rounds_keep_the_number_of_timed_runs() {
    let out = normlab(&["bench", "norms", "--quick", "--json", "--dtypes", "bf16", "--kinds", "l1", "--reps", "5", "--rounds", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!((v["config"]["reps"].as_u64(), v["config"]["rounds"].as_u64()), (Some(5), Some(2)));
    for c in v["cases"].as_array().unwrap().iter().chain(v["baselines"].as_array().unwrap()) {
        assert_eq!(c["timing"]["reps"], 5, "{c}");
    }
    assert_eq!(v["config"]["staged_output"], true);
}

/// The hidden `--unstaged` (an A/B measurement of the staged output) is said in the report, in
/// JSON and in text, so that its numbers are not taken for the default forward's.
#[test]
fn unstaged_runs_say_so() {
    let args = ["bench", "norms", "--quick", "--dtypes", "f32", "--kinds", "linf", "--reps", "1", "--unstaged"];
    let out = normlab(&[&args[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["config"]["staged_output"], false);
    let out = normlab(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT staged (--unstaged)"));
}

#[test]
fn bad_flags_are_refused_by_name() {
    for (args, value) in [
        (&["bench", "norms", "--quick", "--shapes", "12x"][..], "12x"),
        (&["bench", "norms", "--quick", "--dtypes", "f8e4m3"][..], "f8e4m3"),
        (&["bench", "norms", "--quick", "--kinds", "l3"][..], "l3"),
        (&["bench", "norms", "--quick", "--reps", "0"][..], "'0'"),
        (&["bench", "norms", "--quick", "--shapes", "4x4", "--kinds", "topk"][..], "topk8"),
        (&["bench", "norms", "--quick", "--topk-k", "0"][..], "'0'"),
        (&["bench", "norms", "--quick", "--copy-mib", "0"][..], "'0'"),
        (&["bench", "norms", "--quick", "--rounds", "0"][..], "'0'"),
        (&["bench", "norms", "--quick", "--reps", "2", "--rounds", "3"][..], "'3'"),
    ] {
        let out = normlab(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(value), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A shape that cannot fit in memory is refused before anything is allocated (the check reads
/// /proc/meminfo, so it exists on Linux only).
#[cfg(target_os = "linux")]
#[test]
fn shape_larger_than_memory_is_refused() {
    let out = normlab(&["bench", "norms", "--shapes", "1000000x1000000", "--dtypes", "f32"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("1000000x1000000") && stderr.contains("MiB"), "{stderr}");
}
