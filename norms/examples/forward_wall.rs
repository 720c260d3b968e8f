//! Wall-clock time per row of the row-norm forward on one thread, in a one-thread rayon pool
//! (so no call waits for another thread to wake), for several kinds in one process. Rows that
//! fit in the L2 (a few hundred KiB in all) measure the work on rows already in cache, which
//! is what limits the 16-bit forwards on two cores; `forward_time` measures CPU time instead.
//!
//! ```text
//! target/release/examples/forward_wall bf16 64 4096 2000 l1,layer,linf,topk,rms
//! ```
//!
//! Arguments: dtype (f32, f16, bf16), rows, n, repetitions, kinds (comma-separated: rms, layer,
//! unit-l2, l1, linf, topk = Top-k with k = 8). Inputs are standard normal, with a weight (and a bias
//! for LayerNorm) as `normlab bench norms` uses. Prints the minimum and the median per row.

mod common;

use common::gaussian;
use normlab_norms::{bf16, f16, row, Accum, Element, NormKind, NormSpec, RowStats};
use std::time::Instant;

fn run<T: Element>(kinds: &[&str], rows: usize, n: usize, reps: usize) {
    let x: Vec<T> = gaussian(rows * n).into_iter().map(T::from_f64).collect();
    let w: Vec<T> = common::weight(n);
    let b: Vec<T> = common::bias(n);
    let mut y = vec![T::default(); rows * n];
    let mut st = vec![RowStats::default(); rows];
    for name in kinds {
        let spec = NormSpec::new(common::kind(name, 8), 1e-5);
        let bias = (spec.kind == NormKind::Layer).then_some(&b[..]);
        let mut t = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            row::forward(&spec, Accum::F32, &x, n, Some(&w), bias, &mut y, Some(&mut st)).expect("forward");
            t.push(t0.elapsed().as_secs_f64());
        }
        common::print_per_row(name, rows, &mut t);
    }
    println!("(us per {} row of {n}, min/median)", T::DTYPE);
}

fn main() {
    let a = common::wall_args("forward_wall");
    let kinds: Vec<&str> = a.kinds.iter().map(String::as_str).collect();
    let (rows, n, reps) = (a.rows, a.n, a.reps);
    common::one_thread(|| match a.dtype.as_str() {
        "f32" => run::<f32>(&kinds, rows, n, reps),
        "f16" => run::<f16>(&kinds, rows, n, reps),
        "bf16" => run::<bf16>(&kinds, rows, n, reps),
        other => {
            eprintln!("forward_wall: unknown DTYPE {other:?} (f32, f16, bf16)");
            std::process::exit(2)
        }
    });
}
