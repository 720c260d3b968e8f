//! `normlab gpu-check` and `normlab bench --device cuda` as CI runs them: on a machine without a
//! GPU (or a build without the `cuda` feature) they must exit 1 with an error that names the
//! reason, print nothing on stdout (no unmeasured number) and never panic. On a machine with a
//! GPU the same tests check the successful run instead, and hiding every device with
//! `CUDA_VISIBLE_DEVICES=` must give the "no device" error.

use std::process::{Command, Output};

fn normlab(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_normlab"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the normlab binary runs")
}

/// The reasons a run without a usable GPU may give, by build.
fn no_gpu_reasons() -> &'static [&'static str] {
    if cfg!(feature = "cuda") {
        &["no CUDA driver", "no CUDA device", "NVRTC missing", "CUDA headers missing"]
    } else {
        &["built without the `cuda` feature"]
    }
}

/// A failed run: status 1, `error: <reason>` on stderr, nothing on stdout, no panic.
fn assert_clean_failure(out: &Output, reasons: &[&str], what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: status {:?}, stderr: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{what} panicked: {stderr}");
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert!(reasons.iter().any(|r| stderr.contains(r)), "{what}: none of {reasons:?} in: {stderr}");
    assert!(out.stdout.is_empty(), "{what} printed on stdout: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn gpu_check_fails_cleanly_or_passes() {
    let out = normlab(&["gpu-check", "--quick", "--json"], &[]);
    if out.status.success() {
        // A GPU: the JSON report, every case within its bound.
        // Success is only possible in a build with the GPU runtime.
        if !cfg!(feature = "cuda") {
            panic!("succeeded in a build without the `cuda` feature: {out:?}");
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
        assert_eq!(v["schema"], "normlab.gpu_check/1");
        assert_eq!(v["failed"], 0);
        let cases = v["cases"].as_array().unwrap();
        assert!(!cases.is_empty() && cases.iter().all(|c| c["pass"] == true && c["forward_ulp"].as_f64().unwrap() <= 1.0));
    } else {
        assert_clean_failure(&out, no_gpu_reasons(), "gpu-check");
    }
}

#[test]
fn bench_device_cuda_fails_cleanly_or_reports_measurements() {
    let out = normlab(&["bench", "--device", "cuda", "--json", "--reps", "2"], &[]);
    if out.status.success() {
        // Success is only possible in a build with the GPU runtime.
        if !cfg!(feature = "cuda") {
            panic!("succeeded in a build without the `cuda` feature: {out:?}");
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
        assert_eq!(v["schema"], "normlab.bench.cuda/1");
        let copy = v["copy_bandwidth"]["gb_per_s"].as_f64().unwrap();
        assert!(copy > 0.0);
        for c in v["cases"].as_array().unwrap() {
            let (gbs, frac) = (c["gb_per_s"].as_f64().unwrap(), c["fraction_of_copy"].as_f64().unwrap());
            assert!(gbs > 0.0 && (frac - gbs / copy).abs() < 1e-9 * frac.max(1.0), "{c}");
        }
    } else {
        assert_clean_failure(&out, no_gpu_reasons(), "bench --device cuda");
    }
}

#[test]
fn hidden_devices_give_the_no_device_error() {
    // With every device hidden a GPU machine behaves like one without a device.
    let env = [("CUDA_VISIBLE_DEVICES", "")];
    let mut reasons = no_gpu_reasons().to_vec();
    reasons.retain(|r| *r != "NVRTC missing" && *r != "CUDA headers missing");
    assert_clean_failure(&normlab(&["gpu-check"], &env), &reasons, "gpu-check (hidden devices)");
    assert_clean_failure(&normlab(&["bench", "--device", "cuda"], &env), &reasons, "bench --device cuda (hidden devices)");
}

#[test]
fn device_flag_misuse_is_refused_by_name() {
    let out = normlab(&["bench", "--device", "cuda", "norms", "--quick"], &[]);
    assert_clean_failure(&out, &["--device", "takes no subcommand"], "bench --device cuda norms");
    let out = normlab(&["bench"], &[]);
    assert_clean_failure(&out, &["normlab bench norms"], "bench without a target");
    // clap refuses unknown devices itself (usage error, status 2), naming the value.
    let out = normlab(&["bench", "--device", "tpu"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tpu"));
}

#[test]
fn only_selects_families_by_name() {
    // Without a GPU a valid selection fails for the machine's reason, as a full run does; with
    // one, the report holds that family and no other.
    let out = normlab(&["gpu-check", "--quick", "--json", "--only", "updates,batch"], &[]);
    if out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
        assert_eq!(v["families"], serde_json::json!(["updates", "batch"]));
        assert!(v["cases"].as_array().unwrap().is_empty() && !v["updates"].as_array().unwrap().is_empty());
    } else {
        assert_clean_failure(&out, no_gpu_reasons(), "gpu-check --only updates,batch");
    }
    // An unknown family is a usage error (status 2) naming the value and the possible ones.
    let out = normlab(&["gpu-check", "--only", "rows,kernels"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'kernels'") && stderr.contains("variants"), "{stderr}");
}

#[test]
fn precompile_fills_the_kernel_cache_without_a_gpu() {
    // A value that is no compute capability is refused by name in every build.
    let out = normlab(&["gpu-check", "--precompile", "ninety"], &[]);
    assert_clean_failure(&out, &["'ninety'"], "gpu-check --precompile ninety");
    let dir = std::env::temp_dir().join(format!("normlab-precompile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let env = [("NORMLAB_PTX_CACHE", dir.to_str().unwrap())];
    let out = normlab(&["gpu-check", "--precompile", "sm_80", "--json"], &env);
    if !out.status.success() {
        // No GPU runtime, or no NVRTC / headers here: a clean, named failure (no driver needed).
        let mut reasons = no_gpu_reasons().to_vec();
        reasons.retain(|r| *r != "no CUDA driver" && *r != "no CUDA device");
        assert_clean_failure(&out, &reasons, "gpu-check --precompile sm_80");
        return;
    }
    let infos = |out: &Output| -> Vec<serde_json::Value> { serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).expect("JSON list") };
    let first = infos(&out);
    let modules: Vec<&str> = first.iter().map(|i| i["module"].as_str().unwrap()).collect();
    assert_eq!(modules, ["rownorm", "residual", "batchnorm", "project", "copy"]);
    for i in &first {
        assert_eq!((i["target"].as_str(), i["kind"].as_str(), i["origin"].as_str()), (Some("sm_80"), Some("cubin"), Some("compiled")), "{i}");
        let file = std::path::PathBuf::from(i["cache_file"].as_str().unwrap());
        assert!(file.starts_with(&dir) && file.metadata().unwrap().len() > 1000, "{i}");
    }
    // A second process finds every image on disk, as a GPU machine given the cache would.
    let second = infos(&normlab(&["gpu-check", "--precompile", "8.0", "--json"], &env));
    assert!(second.iter().all(|i| i["origin"] == "disk"), "{second:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
