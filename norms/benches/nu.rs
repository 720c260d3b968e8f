//! Criterion benchmarks of the nu Monte Carlo engine.
//!
//! `swiglu_factor_1e-3`: the anGPT activation factor (algorithms.md 2.5 pipeline, d_m = 256,
//! r = 1024) to a 95% half width of 1e-3, in precision mode (the goal is < 2 s on 2 cores).
//! `swiglu_100k`: a fixed 100k-sample run, for per-sample cost.

use criterion::{criterion_group, criterion_main, Criterion};
use normlab_norms::nu::{estimate, estimate_to_precision, McConfig, NodeId, Pipeline, RowDist};

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

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("nu");
    g.sample_size(10);
    let (p, a) = swiglu(256);
    let cfg = McConfig { samples: 4096, seed: 1, ..McConfig::default() };
    let t0 = std::time::Instant::now();
    let e = estimate_to_precision(&p, a, &cfg, 1e-3, 50_000_000, None).unwrap();
    eprintln!(
        "swiglu d_m=256 to 1e-3 ({} threads): nu_rms = {:.5} ± {:.5}, nu_mean = {:.5}, {} samples, one run {:.2} s",
        rayon::current_num_threads(),
        e.nu_rms.value,
        e.nu_rms.half_width(),
        e.nu_mean.value,
        e.samples,
        t0.elapsed().as_secs_f64()
    );
    g.bench_function("swiglu_factor_1e-3", |b| b.iter(|| estimate_to_precision(&p, a, &cfg, 1e-3, 50_000_000, None).unwrap()));
    let fixed = McConfig { samples: 100_000, seed: 1, ..McConfig::default() };
    g.bench_function("swiglu_100k", |b| b.iter(|| estimate(&p, a, &fixed, None).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
