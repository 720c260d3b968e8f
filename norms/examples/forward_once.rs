//! One row-norm forward of a given case, for instruction counting under callgrind.
//!
//! ```text
//! cargo build --release -p normlab-norms --example forward_once
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='normlab_norms::row::forward_task' \
//!     target/release/examples/forward_once rms f16 64 4096
//! ```
//!
//! Arguments: kind (rms, layer, unit-l2, l1, linf, topk), dtype (f32, f16, bf16), rows, n,
//! and optionally k for top-k (default 8). As `normlab bench norms`: N(0, 1) input, a weight on
//! every kind, a bias on LayerNorm, f32 accumulation. `--toggle-collect` on the per-task row
//! function counts the row work only (not the data generation or rayon's scheduling), so
//! instructions per element are the collected total divided by rows * n.

mod common;

use normlab_norms::{bf16, f16, row, Accum, Element, NormKind, NormSpec, RowStats};

/// splitmix64 + Box-Muller: deterministic N(mean, sd^2) values.
fn gaussian(len: usize, seed: u64, mean: f64, sd: f64) -> Vec<f64> {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..len)
        .map(|_| {
            let (u1, u2) = (1.0 - next(), next());
            mean + sd * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        })
        .collect()
}

fn run<T: Element>(spec: &NormSpec, rows: usize, n: usize) {
    let conv = |v: Vec<f64>| v.into_iter().map(T::from_f64).collect::<Vec<T>>();
    let x = conv(gaussian(rows * n, 1, 0.0, 1.0));
    let w = conv(gaussian(n, 3, 1.0, 0.1));
    let b = conv(gaussian(n, 4, 0.0, 0.1));
    let bias = (spec.kind == NormKind::Layer).then_some(&b[..]);
    let mut y = vec![T::default(); rows * n];
    let mut st = vec![RowStats::default(); rows];
    let c = row::forward(spec, Accum::F32, &x, n, Some(&w), bias, &mut y, Some(&mut st)).expect("forward");
    assert!(c.is_clean(), "{c:?}");
    let sum: f64 = y.iter().map(|v| v.to_f64()).sum();
    println!("{} {} {rows}x{n}: checksum {sum:.6e}", spec.kind.name(), T::DTYPE);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: forward_once KIND DTYPE ROWS N [K]");
        std::process::exit(2);
    }
    let k: usize = a.get(5).map_or(8, |v| v.parse().expect("K"));
    let spec = NormSpec::new(common::kind(&a[1], k), 1e-5);
    let (rows, n): (usize, usize) = (a[3].parse().expect("ROWS"), a[4].parse().expect("N"));
    match a[2].as_str() {
        "f32" => run::<f32>(&spec, rows, n),
        "f16" => run::<f16>(&spec, rows, n),
        "bf16" => run::<bf16>(&spec, rows, n),
        other => panic!("unknown dtype {other}"),
    }
}
