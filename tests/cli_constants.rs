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

/// The Monte Carlo column of `key` ("l1", "inf", "topk") from `--json` output.
fn mc<'a>(v: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    let c = &v["monte_carlo"][key];
    assert!(c.is_object(), "monte_carlo.{key} missing in {v}");
    c
}

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn monte_carlo_columns_agree_with_the_exact_constants() {
    // Fixed seed: deterministic. The exact constants must lie inside their intervals. At 95%,
    // 15 intervals all contain the truth only with probability 0.95^15 = 0.46 for a random seed
    // (this seed puts 3 of 15 outside, |z| <= 2.7; runs with 3-4e5 rows at n = 256 and 1024 give
    // |z| < 1.5: no bias), so the check uses 99.9% intervals (--level 0.999): a false alarm
    // somewhere has probability ~1.5% for a random seed, and a wrong constant is still caught
    // (see monte_carlo_has_power_against_a_wrong_constant). The 95% counts are printed.
    let mut inside95 = 0;
    for (n, k, samples) in [(8usize, 3usize, 40_000u64), (64, 1, 20_000), (256, 10, 10_000), (1024, 32, 4_000), (100, 100, 10_000)] {
        let args = |level: &str| normlab(&["constants", "--n", &n.to_string(), "--k", &k.to_string(), "--samples", &samples.to_string(), "--seed", "7", "--level", level, "--json"]);
        let v95 = json(&args("0.95"));
        let v = json(&args("0.999"));
        assert_eq!(v["monte_carlo"]["samples"].as_u64(), Some(samples));
        assert_eq!(v["monte_carlo"]["seed"].as_u64(), Some(7));
        assert_eq!(num(&v["monte_carlo"], "level"), 0.999);
        assert_eq!(num(&v95["monte_carlo"], "level"), 0.95);
        for (key, exact) in [("l1", constants::C_L1), ("inf", constants::c_inf(n).unwrap()), ("topk", constants::c_topk(n, k).unwrap())] {
            let c = mc(&v, key);
            for f in ["e_mc", "e_se", "e_lo", "e_hi", "c_mc", "c_se", "c_lo", "c_hi", "c_exact", "z"] {
                assert!(num(c, f).is_finite(), "n={n} k={k} {key}.{f} in {c}");
            }
            // (serde_json's default float parser may be 1 ulp off, hence the relative 1e-15.)
            assert!((num(c, "c_exact") - exact).abs() <= 1e-15 * exact, "n={n} k={k} {key}: {} vs {exact}", num(c, "c_exact"));
            let (lo, hi, se) = (num(c, "c_lo"), num(c, "c_hi"), num(c, "c_se"));
            assert!(lo <= exact && exact <= hi, "n={n} k={k} {key}: exact {exact} outside the 99.9% interval [{lo}, {hi}] (z = {})", num(c, "z"));
            assert_eq!(c["within_ci"].as_bool(), Some(true));
            // Same rows at 95%: same estimate, narrower interval, consistent flag.
            let c95 = mc(&v95, key);
            assert_eq!(num(c95, "c_mc"), num(c, "c_mc"));
            assert!(num(c95, "c_hi") - num(c95, "c_lo") < num(c, "c_hi") - num(c, "c_lo"));
            let within95 = num(c95, "c_lo") <= exact && exact <= num(c95, "c_hi");
            assert_eq!(c95["within_ci"].as_bool(), Some(within95));
            eprintln!("n={n} k={k} {key}: z = {:.3}, exact {} the 95% interval", num(c, "z"), if within95 { "inside" } else { "OUTSIDE" });
            inside95 += within95 as usize;
            // The interval is about 3.29 standard errors wide on each side (99.9%) and z is consistent.
            assert!(((hi - lo) / (2.0 * se) - 3.29).abs() < 0.01, "{c}");
            assert!((num(c, "z") - (num(c, "c_mc") - exact) / se).abs() < 1e-9);
            assert!(se > 0.0 && se < 0.01 * exact, "n={n} {key}: se {se}");
            // C = 1/E for the Monte Carlo values too.
            assert!((num(c, "c_mc") * num(c, "e_mc") - 1.0).abs() < 1e-12);
        }
    }
    eprintln!("{inside95} of 15 exact constants inside their 95% interval");
}

#[test]
fn monte_carlo_has_power_against_a_wrong_constant() {
    // The authors' biased c(n) is far outside the interval of c_inf: the check can fail.
    let v = json(&normlab(&["constants", "--n", "1024", "--samples", "5000", "--json"]));
    let c = mc(&v, "inf");
    let code = num(&v, "c_code");
    let z = (num(c, "c_mc") - code) / num(c, "c_se");
    assert!(z.abs() > 50.0, "z against c_code = {z}");
    assert!(!(num(c, "c_lo") <= code && code <= num(c, "c_hi")));
}

#[test]
fn monte_carlo_is_deterministic_for_a_seed_and_can_be_turned_off() {
    let run = |seed: &str| normlab(&["constants", "--n", "50", "--k", "5", "--samples", "3000", "--seed", seed, "--json"]).stdout;
    assert_eq!(run("3"), run("3"));
    assert_ne!(run("3"), run("4"));
    let v = json(&normlab(&["constants", "--n", "50", "--samples", "0", "--json"]));
    assert!(v["monte_carlo"].is_null(), "{v}");
    assert!(v["c_inf"].is_f64());
    // Default: Monte Carlo on, no Top-k column without --k.
    let v = json(&normlab(&["constants", "--n", "50", "--json"]));
    assert!(v["monte_carlo"]["inf"].is_object() && v["monte_carlo"]["topk"].is_null(), "{v}");
    assert_eq!(v["monte_carlo"]["samples"].as_u64(), Some(10_000));
}

#[test]
fn monte_carlo_text_columns_and_bad_samples() {
    let out = normlab(&["constants", "--n", "128", "--k", "4", "--samples", "2000"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["Monte Carlo (2000 rows, seed 0, 95% intervals)", "c_inf", "c_topk", "exact in CI"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    assert_refused(&["constants", "--n", "16", "--samples", "1"], "'1'");
    assert_refused(&["constants", "--n", "16", "--samples", "-5"], "-5");
    assert_refused(&["constants", "--n", "16", "--level", "1.5"], "1.5");
    assert_refused(&["constants", "--n", "16", "--level", "0"], "'0'");
}
