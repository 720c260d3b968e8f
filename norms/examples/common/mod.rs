//! What the forward and backward examples share: their input generator, the kind names they
//! parse, the arguments of the `*_wall` examples and the summary of their timings.
//! (Each example uses part of it.)
#![allow(dead_code)]

use normlab_norms::{Element, NormKind};

/// Standard normal values by Box-Muller over a 64-bit LCG: deterministic, no dependency.
pub fn gaussian(len: usize) -> Vec<f64> {
    let mut state = 0x5EED_0001_u64;
    let mut uniform = move || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..len)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        })
        .collect()
}

/// The affine weight of the forward examples, `1 + 0.01 (j mod 7)`: near 1, not constant.
pub fn weight<T: Element>(n: usize) -> Vec<T> {
    (0..n).map(|i| T::from_f64(1.0 + 0.01 * (i % 7) as f64)).collect()
}

/// The affine bias of the forward examples (LayerNorm's), `0.01 (j mod 5)`.
pub fn bias<T: Element>(n: usize) -> Vec<T> {
    (0..n).map(|i| T::from_f64(0.01 * (i % 5) as f64)).collect()
}

/// The kind a command-line name stands for (`topk` with the given k).
pub fn kind(name: &str, k: usize) -> NormKind {
    match name {
        "rms" => NormKind::Rms,
        "layer" => NormKind::Layer,
        "unit-l2" => NormKind::UnitL2,
        "l1" => NormKind::L1,
        "linf" => NormKind::LInf,
        "topk" => NormKind::TopK { k },
        other => panic!("unknown kind {other} (rms, layer, unit-l2, l1, linf, topk)"),
    }
}

/// The minimum and the median (the middle value, the upper one of an even count) of timings,
/// which it sorts. At least one timing.
pub fn min_median(t: &mut [f64]) -> (f64, f64) {
    t.sort_by(f64::total_cmp);
    (t[0], t[t.len() / 2])
}

/// The arguments of the `*_wall` examples: `DTYPE ROWS N REPS KINDS` (kinds comma-separated).
pub struct WallArgs {
    pub dtype: String,
    pub rows: usize,
    pub n: usize,
    pub reps: usize,
    pub kinds: Vec<String>,
}

/// The `*_wall` arguments of this process; a usage line naming `example` and exit status 2
/// when some are missing, a message naming the bad value when one does not parse.
pub fn wall_args(example: &str) -> WallArgs {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 6 {
        eprintln!("usage: {example} DTYPE ROWS N REPS KINDS");
        std::process::exit(2);
    }
    let count = |i: usize, what: &str| -> usize {
        a[i].parse().unwrap_or_else(|e| {
            eprintln!("{example}: {what} {:?}: {e}", a[i]);
            std::process::exit(2)
        })
    };
    WallArgs { dtype: a[1].clone(), rows: count(2, "ROWS"), n: count(3, "N"), reps: count(4, "REPS"), kinds: a[5].split(',').map(str::to_owned).collect() }
}

/// `f` in a one-thread rayon pool, so that no call waits for another thread to wake.
pub fn one_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("a one-thread pool").install(f)
}

/// Prints one kind's minimum and median time per row (us) from its timings (seconds per call),
/// which it sorts.
pub fn print_per_row(name: &str, rows: usize, t: &mut [f64]) {
    let (min, med) = min_median(t);
    print!("{name} {:.3}/{:.3} ", min * 1e6 / rows as f64, med * 1e6 / rows as f64);
}
