//! `normlab constants` as a user runs it: the binary, its stdout, stderr and exit status.

use std::process::{Command, Output};

use normlab::norms::constants;

fn normlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_normlab")).args(args).output().expect("the normlab binary runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "status {:?}, stderr: {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

#[test]
fn json_matches_the_library_values() {
    for (n, k) in [(1024usize, 8usize), (4096, 32), (8, 4), (2, 1), (1000, 1000)] {
        let v = json(&normlab(&["constants", "--n", &n.to_string(), "--k", &k.to_string(), "--json"]));
        let f = |key: &str| v[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {v}"));
        assert_eq!(v["n"].as_u64(), Some(n as u64));
        assert_eq!(v["k"].as_u64(), Some(k as u64));
        assert_eq!(f("c_l1"), constants::C_L1);
        assert_eq!(f("c_inf"), constants::c_inf(n).unwrap(), "n={n}");
        assert_eq!(f("c_topk"), constants::c_topk(n, k).unwrap(), "n={n} k={k}");
        assert_eq!(f("c_code"), constants::c_code(n).unwrap(), "n={n}");
        assert_eq!(f("e_max_abs"), constants::e_max_abs(n).unwrap());
        assert_eq!(f("e_topk_mean_abs"), constants::e_topk_mean_abs(n, k).unwrap());
        // C multiplies the statistic: C * E[stat] = 1.
        assert!((f("c_inf") * f("e_max_abs") - 1.0).abs() < 1e-14);
        assert!((f("c_topk") * f("e_topk_mean_abs") - 1.0).abs() < 1e-14);
    }
}

#[test]
fn published_values() {
    // algorithms.md 4.2/4.3: E[max|Z|](4096) = 3.802295, E[top-10 mean](1024) = 2.882649,
    // c(1024) = 0.414539.
    let v = json(&normlab(&["constants", "--n", "4096", "--json"]));
    assert!((v["e_max_abs"].as_f64().unwrap() - 3.802295).abs() < 1e-6);
    assert!(v["c_topk"].is_null() && v["k"].is_null());
    let v = json(&normlab(&["constants", "--n", "1024", "--k", "10", "--json"]));
    assert!((v["e_topk_mean_abs"].as_f64().unwrap() - 2.882649).abs() < 1e-6);
    assert!((v["c_code"].as_f64().unwrap() - 0.414539).abs() < 1e-6);
}

#[test]
fn n_one_has_no_authors_constant() {
    let v = json(&normlab(&["constants", "--n", "1", "--json"]));
    assert!(v["c_code"].is_null());
    assert!((v["e_max_abs"].as_f64().unwrap() - (2.0 / std::f64::consts::PI).sqrt()).abs() < 1e-12);
}

#[test]
fn text_output_says_which_is_which() {
    let out = normlab(&["constants", "--n", "128", "--k", "4"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["E[max_i |Z_i|]", "c_inf  = 1/E[max|Z|]", "c_code", "estimates sigma"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // E[mean top-4 |Z|](128) = 2.463989 (algorithms.md 4.3), printed with 12 decimals.
    let line = text.lines().find(|l| l.contains("E[mean of top-4 |Z_i|]")).unwrap_or_else(|| panic!("{text}"));
    let value: f64 = line.rsplit('=').next().unwrap().trim().parse().unwrap();
    assert!((value - 2.463989).abs() < 1e-6, "{line}");
}

fn assert_refused(args: &[&str], value: &str) {
    let out = normlab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(stderr.contains(value), "{args:?}: stderr does not name {value:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
}

#[test]
fn bad_input_exits_non_zero_naming_the_value() {
    assert_refused(&["constants", "--n", "0"], "'0'");
    assert_refused(&["constants", "--n", "16", "--k", "17"], "'17'");
    assert_refused(&["constants", "--n", "16", "--k", "0", "--json"], "'0'");
    assert_refused(&["constants", "--n", "-3"], "-3");
    assert_refused(&["constants", "--n", "abc"], "abc");
    assert_refused(&["constants"], "--n");
}
