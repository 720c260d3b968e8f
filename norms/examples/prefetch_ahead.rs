//! What the fused forward's prefetches bring: the store pass's prefetch of the row ahead
//! (`row::PREFETCH_AHEAD`, switch `ahead`) or the lines a row asks for before its store pass
//! (`row::EARLY_LINES`, switch `early`); also the bf16 rounding by the AVX512_BF16 instruction
//! (`row::BF16_INSTRUCTION`, switch `bf16`); also AVX2's Top-k selection by tables
//! (`row::SELECT_IN_REGISTERS`, switch `select`); also streamed rows staged and written out
//! whole (`row::STAGED_OUTPUT`, switch `staged`); also Top-k's store pass reading the centred
//! values its statistics pass saved (`row::SAVED_CENTRED`, switch `saved`); also Top-k's rows
//! run pipelined, each store pass after the next row's selection (`row::PIPELINED_TOP_K`,
//! switch `pipelined`). Each case is timed with the switch on and off,
//! alternating run by run in one process, so that both medians come from the same stretch of
//! this shared machine's load. Gaussian inputs, a weight, accum f32, all threads.
//!
//! ```text
//! cargo run --release -p normlab-norms --example prefetch_ahead -- 60 4096x1024,16384x4096 f32,f16,bf16 rms,layer,topk
//! cargo run --release -p normlab-norms --example prefetch_ahead -- 500 4096x1024 f32 rms,topk early
//! cargo run --release -p normlab-norms --example prefetch_ahead -- 200 4096x1024 bf16 rms,l1,topk bf16
//! ```
//!
//! Arguments: runs per setting, shapes, dtypes, kinds (comma-separated), and optionally the
//! switch (`ahead`, the default, `early`, `bf16`, `select`, `staged`, `saved` or `pipelined`). Prints the medians and their ratio (off /
//! on: above 1, the switch's subject helps).
mod common;
use common::gaussian;
use normlab_norms::{bf16, f16, row, Accum, Element, NormSpec, RowStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

fn run<T: Element>(switch: &AtomicBool, name: &str, kind: &str, rows: usize, n: usize, reps: usize) {
    let spec = NormSpec::new(common::kind(kind, 8), 1e-5);
    let x: Vec<T> = gaussian(rows * n).into_iter().map(T::from_f64).collect();
    let w: Vec<T> = common::weight(n);
    let mut y = vec![T::default(); rows * n];
    let mut st = vec![RowStats::default(); rows];
    let mut t = [Vec::new(), Vec::new()];
    for r in 0..reps * 2 + 4 {
        let on = r % 2 == 0;
        switch.store(on, Ordering::Relaxed);
        let t0 = Instant::now();
        row::forward(&spec, Accum::F32, &x, n, Some(&w), None, &mut y, Some(&mut st)).unwrap();
        let dt = t0.elapsed().as_secs_f64() * 1e3;
        if r >= 4 {
            t[on as usize].push(dt);
        }
    }
    switch.store(true, Ordering::Relaxed);
    let (on, off) = (common::min_median(&mut t[1]).1, common::min_median(&mut t[0]).1);
    println!("{rows}x{n} {name:4} {kind:7} on {on:.3} ms  off {off:.3} ms  off/on {:.3}", off / on);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 && a.len() != 6 {
        eprintln!("usage: prefetch_ahead RUNS SHAPES DTYPES KINDS [ahead|early|bf16|select|staged|saved|pipelined]  (e.g. 60 4096x1024 f32,bf16 rms,topk)");
        std::process::exit(2);
    }
    let switch = match a.get(5).map(String::as_str) {
        None | Some("ahead") => &row::PREFETCH_AHEAD,
        Some("early") => &row::EARLY_LINES,
        Some("bf16") => &row::BF16_INSTRUCTION,
        Some("select") => &row::SELECT_IN_REGISTERS,
        Some("staged") => &row::STAGED_OUTPUT,
        Some("saved") => &row::SAVED_CENTRED,
        Some("pipelined") => &row::PIPELINED_TOP_K,
        Some(other) => {
            eprintln!("unknown switch {other} (ahead, early, bf16, select, staged, saved, pipelined)");
            std::process::exit(2);
        }
    };
    let reps: usize = a[1].parse().expect("RUNS");
    for shape in a[2].split(',') {
        let (rows, n) = shape.split_once('x').expect("shape ROWSxN");
        let (rows, n): (usize, usize) = (rows.parse().expect("ROWS"), n.parse().expect("N"));
        for d in a[3].split(',') {
            for k in a[4].split(',') {
                match d {
                    "f32" => run::<f32>(switch, d, k, rows, n, reps),
                    "f16" => run::<f16>(switch, d, k, rows, n, reps),
                    "bf16" => run::<bf16>(switch, d, k, rows, n, reps),
                    other => panic!("unknown dtype {other}"),
                }
            }
        }
    }
}
