//! Wall-clock time per row of the row-norm backward on one thread, in a one-thread rayon pool,
//! for several kinds in one process: the backward's counterpart of `forward_wall`. The
//! statistics come from one forward; each timed call computes dx, dweight and (LayerNorm)
//! dbias, as `normlab bench norms` does.
//!
//! ```text
//! target/release/examples/backward_wall f32 64 1024 2000 rms,l1,topk
//! ```
//!
//! Arguments: dtype (f32, f16, bf16), rows, n, repetitions, kinds (comma-separated: rms, layer,
//! unit-l2, l1, linf, topk = Top-k with k = 8). Prints the minimum and the median per row.

mod common;

use common::gaussian;
use normlab_norms::{bf16, f16, row, Accum, Element, NormKind, NormSpec, RowStats};
use std::time::Instant;

fn run<T: Element>(kinds: &[&str], rows: usize, n: usize, reps: usize) {
    let x: Vec<T> = gaussian(rows * n).into_iter().map(T::from_f64).collect();
    let dy: Vec<T> = gaussian(2 * rows * n)[rows * n..].iter().map(|&v| T::from_f64(v)).collect();
    let w: Vec<T> = common::weight(n);
    let b: Vec<T> = common::bias(n);
    let mut y = vec![T::default(); rows * n];
    let mut dx = vec![T::default(); rows * n];
    let mut dw = vec![T::default(); n];
    let mut db = vec![T::default(); n];
    let mut st = vec![RowStats::default(); rows];
    for name in kinds {
        let spec = NormSpec::new(common::kind(name, 8), 1e-5);
        let layer = spec.kind == NormKind::Layer;
        let bias = layer.then_some(&b[..]);
        row::forward(&spec, Accum::F32, &x, n, Some(&w), bias, &mut y, Some(&mut st)).expect("forward");
        let mut t = Vec::with_capacity(reps);
        for _ in 0..reps {
            let dbias = if layer { Some(&mut db[..]) } else { None };
            let t0 = Instant::now();
            row::backward(&spec, Accum::F32, &x, &dy, n, &st, Some(&w), &mut dx, Some(&mut dw), dbias).expect("backward");
            t.push(t0.elapsed().as_secs_f64());
        }
        common::print_per_row(name, rows, &mut t);
    }
    println!("(us per {} row of {n}, min/median, backward)", T::DTYPE);
}

fn main() {
    let a = common::wall_args("backward_wall");
    let kinds: Vec<&str> = a.kinds.iter().map(String::as_str).collect();
    let (rows, n, reps) = (a.rows, a.n, a.reps);
    common::one_thread(|| match a.dtype.as_str() {
        "f32" => run::<f32>(&kinds, rows, n, reps),
        "f16" => run::<f16>(&kinds, rows, n, reps),
        "bf16" => run::<bf16>(&kinds, rows, n, reps),
        other => {
            eprintln!("backward_wall: unknown DTYPE {other:?} (f32, f16, bf16)");
            std::process::exit(2)
        }
    });
}
