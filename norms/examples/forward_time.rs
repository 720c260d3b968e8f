//! CPU time of one row-norm forward, less disturbed by other processes than wall-clock time:
//! the process's CPU time per forward (minimum and median over the repetitions), which is
//! not inflated by waiting for a core while the machine is shared (it still is by cache and
//! memory contention). Run it with `RAYON_NUM_THREADS=1` for a single-core time.
//!
//! ```text
//! RAYON_NUM_THREADS=1 NORMLAB_CPU_SIMD=avx2 target/release/examples/forward_time rms f16 4096 1024 20
//! ```
//!
//! Arguments: kind, dtype, rows, n, repetitions (as `forward_once`, plus the repetitions), and
//! optionally `gauss`: standard normal inputs (as `normlab bench norms` uses) instead of the
//! default uniform pattern on [-2, 2]. Top-k's speed depends on the distribution (how many
//! values are candidates for the k largest).

mod common;

use common::gaussian;
use normlab_norms::{bf16, f16, row, Accum, Element, NormKind, NormSpec, RowStats};

fn cpu_seconds() -> f64 {
    let mut ts = libc_timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { clock_gettime(2 /* CLOCK_PROCESS_CPUTIME_ID */, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[repr(C)]
struct libc_timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut libc_timespec) -> i32;
}

fn run<T: Element>(spec: &NormSpec, rows: usize, n: usize, reps: usize, gauss: bool) {
    let x: Vec<T> = if gauss {
        gaussian(rows * n).into_iter().map(T::from_f64).collect()
    } else {
        (0..rows * n).map(|i| T::from_f64(((i as f64) * 0.618_033_988_7).fract() * 4.0 - 2.0)).collect()
    };
    let w: Vec<T> = common::weight(n);
    let b: Vec<T> = common::bias(n);
    let bias = (spec.kind == NormKind::Layer).then_some(&b[..]);
    let mut y = vec![T::default(); rows * n];
    let mut st = vec![RowStats::default(); rows];
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps + 1 {
        let t0 = cpu_seconds();
        row::forward(spec, Accum::F32, &x, n, Some(&w), bias, &mut y, Some(&mut st)).expect("forward");
        times.push(cpu_seconds() - t0);
    }
    times.remove(0); // warm-up
    let bytes = (2 * rows * n * std::mem::size_of::<T>()) as f64;
    let (min, med) = common::min_median(&mut times);
    println!(
        "{:<8} {:<5} {rows}x{n}: cpu min {:.3} ms, median {:.3} ms ({:.1} GB/s of cpu time at the minimum)",
        spec.kind.name(),
        T::DTYPE,
        min * 1e3,
        med * 1e3,
        bytes / min / 1e9
    );
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 6 {
        eprintln!("usage: forward_time KIND DTYPE ROWS N REPS [gauss]");
        std::process::exit(2);
    }
    let spec = NormSpec::new(common::kind(&a[1], 8), 1e-5);
    let (rows, n, reps): (usize, usize, usize) = (a[3].parse().expect("ROWS"), a[4].parse().expect("N"), a[5].parse().expect("REPS"));
    let gauss = match a.get(6).map(String::as_str) {
        None => false,
        Some("gauss") => true,
        Some(other) => panic!("unknown input distribution {other} (expected gauss)"),
    };
    match a[2].as_str() {
        "f32" => run::<f32>(&spec, rows, n, reps, gauss),
        "f16" => run::<f16>(&spec, rows, n, reps, gauss),
        "bf16" => run::<bf16>(&spec, rows, n, reps, gauss),
        other => panic!("unknown dtype {other}"),
    }
}
