//! What the forward examples share: their input generator, the kind names they parse and the
//! summary of their timings.
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
