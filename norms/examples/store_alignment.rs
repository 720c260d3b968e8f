//! What the alignment of the input and output buffers costs the row-norm forward: the same
//! rows with `x` and `y` both 64-byte aligned, both 16 bytes past that (where a large `Vec` or
//! candle tensor starts: `malloc` puts a 16-byte header after the page), and one of the two
//! past, alternating run by run in one process (this host's speed drifts between processes).
//! Gaussian f32 inputs, a weight, accum f32.
//!
//! ```text
//! cargo run --release -p normlab-norms --example store_alignment -- 4096 1024 30 rms,linf,topk,l1 2
//! ```
//!
//! Arguments: rows, n, runs per layout, kinds (comma-separated: rms, layer, unit-l2, l1, linf,
//! topk = Top-k with k = 8), threads. Prints the median with both aligned and each other
//! layout's median over it (above 1: slower than aligned). Each run first copies the input
//! into place, so the input starts from the cache rather than from memory.
mod common;
use common::gaussian;
use normlab_norms::{row, Accum, NormSpec, RowStats};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        eprintln!("usage: store_alignment ROWS N RUNS KINDS THREADS  (e.g. 4096 1024 30 rms,topk 2)");
        std::process::exit(2);
    }
    let rows: usize = a[1].parse().expect("ROWS");
    let n: usize = a[2].parse().expect("N");
    let reps: usize = a[3].parse().expect("RUNS");
    let threads: usize = a[5].parse().expect("THREADS");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    let g: Vec<f32> = gaussian(rows * n).into_iter().map(|v| v as f32).collect();
    // Room to place each buffer at a 64-byte boundary or 16 bytes past one.
    let mut xb = vec![0f32; rows * n + 32];
    let mut yb = vec![0f32; rows * n + 32];
    let to_line = |p: *const f32| (64 - p as usize % 64) % 64 / 4;
    let (xo, yo) = (to_line(xb.as_ptr()), to_line(yb.as_ptr()));
    // (x offset, y offset) in values: aligned, both past, y past, x past.
    let layouts = [(xo, yo), (xo + 4, yo + 4), (xo, yo + 4), (xo + 4, yo)];
    let w: Vec<f32> = common::weight(n);
    let mut st = vec![RowStats::default(); rows];
    pool.install(|| {
        for kind in a[4].split(',') {
            let spec = NormSpec::new(common::kind(kind, 8), 1e-5);
            let mut t: [Vec<f64>; 4] = Default::default();
            for r in 0..(reps + 2) * layouts.len() {
                let l = r % layouts.len();
                let (xs, ys) = layouts[l];
                xb[xs..xs + rows * n].copy_from_slice(&g);
                let t0 = Instant::now();
                row::forward(&spec, Accum::F32, &xb[xs..xs + rows * n], n, Some(&w), None, &mut yb[ys..ys + rows * n], Some(&mut st)).unwrap();
                if r >= 2 * layouts.len() {
                    t[l].push(t0.elapsed().as_secs_f64() * 1e3);
                }
            }
            let m: Vec<f64> = t.iter_mut().map(|v| common::min_median(v).1).collect();
            println!(
                "{rows}x{n} {kind:7} aligned {:.3} ms; over it: both +16 B {:.3}, y +16 B {:.3}, x +16 B {:.3}",
                m[0],
                m[1] / m[0],
                m[2] / m[0],
                m[3] / m[0]
            );
        }
    });
}
