//! Engine behaviour: determinism, thread-count independence, progress, precision mode, errors,
//! and the anGPT table.

use std::sync::atomic::{AtomicU64, Ordering};

use normlab_norms::nu::angpt::{angpt_table, AngptConfig, GateScale};
use normlab_norms::nu::{estimate, estimate_to_precision, McConfig, NodeId, Pipeline, RowDist};
use normlab_norms::NormError;

fn swiglu(dm: usize) -> (Pipeline, NodeId) {
    let mut p = Pipeline::new();
    let h = p.sphere(dm).unwrap();
    let wu = p.linear(h, 4 * dm, RowDist::UNIT).unwrap();
    let wz = p.linear(h, 4 * dm, RowDist::UNIT).unwrap();
    let u = p.scale(wu, 0.5).unwrap();
    let z = p.scale(wz, 0.5).unwrap();
    let a = p.swiglu(u, z, (dm as f64).sqrt()).unwrap();
    (p, a)
}

#[test]
fn same_seed_same_result_any_thread_count() {
    let (p, a) = swiglu(32);
    let cfg = McConfig { samples: 20_000, seed: 42, chunk: 512, level: 0.95 };
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| estimate(&p, a, &cfg, None).unwrap())
    };
    let e1 = run(1);
    let e2 = run(2);
    let e3 = run(3);
    assert_eq!(e1, e2);
    assert_eq!(e1, e3);
    let other = estimate(&p, a, &McConfig { seed: 43, ..cfg.clone() }, None).unwrap();
    assert_ne!(e1.nu_rms.value, other.nu_rms.value);
}

#[test]
fn progress_reaches_the_total() {
    let (p, a) = swiglu(16);
    let last = AtomicU64::new(0);
    let calls = AtomicU64::new(0);
    let cb = |done: u64, total: u64| {
        assert_eq!(total, 10_000);
        last.fetch_max(done, Ordering::Relaxed);
        calls.fetch_add(1, Ordering::Relaxed);
    };
    estimate(&p, a, &McConfig { samples: 10_000, chunk: 1000, ..McConfig::default() }, Some(&cb)).unwrap();
    assert_eq!(last.load(Ordering::Relaxed), 10_000);
    assert_eq!(calls.load(Ordering::Relaxed), 10);
}

#[test]
fn precision_mode_reaches_its_target_deterministically() {
    let (p, a) = swiglu(64);
    let cfg = McConfig { samples: 8192, seed: 7, ..McConfig::default() };
    let e = estimate_to_precision(&p, a, &cfg, 4e-3, 2_000_000, None).unwrap();
    assert!(e.nu_rms.half_width() <= 4e-3, "{e:?}");
    assert!(e.samples > 8192);
    let again = estimate_to_precision(&p, a, &cfg, 4e-3, 2_000_000, None).unwrap();
    assert_eq!(e, again);
    // The cap wins over the target.
    let capped = estimate_to_precision(&p, a, &cfg, 1e-6, 20_000, None).unwrap();
    assert!(capped.samples <= 20_480 && capped.nu_rms.half_width() > 1e-6);
}

#[test]
fn bad_configs_are_typed_errors() {
    let (p, a) = swiglu(8);
    let zero = McConfig { samples: 0, ..McConfig::default() };
    assert!(matches!(estimate(&p, a, &zero, None), Err(NormError::Empty { value: 0, .. })));
    let one = McConfig { samples: 1, ..McConfig::default() };
    assert!(matches!(estimate(&p, a, &one, None), Err(NormError::OutOfRange { .. })));
    let level = McConfig { level: 1.0, ..McConfig::default() };
    assert!(matches!(estimate(&p, a, &level, None), Err(NormError::OutOfRange { value, .. }) if value == 1.0));
    let chunk = McConfig { chunk: 0, ..McConfig::default() };
    assert!(estimate(&p, a, &chunk, None).is_err());
    assert!(matches!(estimate_to_precision(&p, a, &McConfig::default(), -1.0, 10, None), Err(NormError::OutOfRange { .. })));

    let mc = McConfig { samples: 100, ..McConfig::default() };
    let bad = AngptConfig::new(100, 3);
    match angpt_table(&bad, &mc, None) {
        Err(NormError::Shape(msg)) => assert!(msg.contains("100") && msg.contains('3'), "{msg}"),
        other => panic!("expected a shape error, got {other:?}"),
    }
    let mut bad = AngptConfig::new(64, 4);
    bad.alphas = vec![0.1, 1.5];
    assert!(matches!(angpt_table(&bad, &mc, None), Err(NormError::OutOfRange { value, .. }) if value == 1.5));
    let mut bad = AngptConfig::new(64, 4);
    bad.mlp_ratio = 0.0;
    assert!(angpt_table(&bad, &mc, None).is_err());
    assert!(matches!(angpt_table(&AngptConfig::new(64, 4), &McConfig { samples: 0, ..mc }, None), Err(NormError::Empty { .. })));
}

#[test]
fn angpt_table_matches_closed_forms_and_reproduces_the_activation_factor() {
    let cfg = AngptConfig::new(64, 4);
    let mc = McConfig { samples: 200_000, seed: 11, level: 0.999, ..McConfig::default() };
    let t = angpt_table(&cfg, &mc, None).unwrap();
    assert_eq!((t.d_head, t.d_hidden), (16, 256));
    assert!(t.assumption.contains("0.5000"), "{}", t.assumption);
    for row in &t.rows {
        let c = row.comparison.expect("every default row has a closed form");
        assert!(c.within_ci, "{}: {:?} vs closed {:?}", row.name, row.mc.nu_rms, row.closed);
    }
    let get = |n: &str| t.rows.iter().find(|r| r.name == n).unwrap();
    assert!((get("nu_qkv").closed.unwrap() - 2.0).abs() < 1e-12);
    assert!((get("nu_p").closed.unwrap() - 0.5).abs() < 1e-12);
    assert!((get("nu_uz").closed.unwrap() - 0.5).abs() < 1e-12);
    assert!((get("nu_d").closed.unwrap() - 2.0).abs() < 1e-12);
    let acf = get("nu_acf");
    assert!((acf.asymptotic.unwrap() - 3.7203).abs() < 1e-4);
    assert!((acf.mc.nu_rms.value - 3.7264).abs() < 0.004, "{:?}", acf.mc.nu_rms);
    assert!((get("nu(alpha=0.2)").closed.unwrap() - 1.212678).abs() < 1e-6);

    // Table 1 read literally (no gate scale): the factor is far from 3.74 and grows with d.
    let mut lit = AngptConfig::new(64, 4);
    lit.gate_scale = GateScale::Value(1.0);
    lit.alphas.clear();
    let t = angpt_table(&lit, &McConfig { samples: 20_000, ..mc }, None).unwrap();
    let acf = t.rows.iter().find(|r| r.name == "nu_acf").unwrap();
    assert!(acf.mc.nu_rms.value > 25.0, "{:?}", acf.mc.nu_rms);
}
