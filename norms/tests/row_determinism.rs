//! Determinism: forward outputs, statistics, counters, dx, dweight and dbias are bitwise
//! identical in a 1-thread, a 2-thread and a 3-thread rayon pool, for every kind and centring.
//! Shapes are chosen so that the work is split: the forward groups rows into tasks of 2^15
//! elements, the backward sums the weight gradient over 64 row blocks.

use crate::common;

use common::{kinds, to_t, Rng};
use normlab_norms::{bf16, f16, row, Accum, Counters, Element, NormSpec, RowStats};

type Run<T> = (Vec<T>, Vec<RowStats>, Counters, Vec<T>, Vec<T>, Vec<T>, Counters);

fn run<T: Element>(spec: &NormSpec, accum: Accum, x: &[T], dy: &[T], n: usize, w: &[T], b: &[T]) -> Run<T> {
    let rows = x.len() / n;
    let mut y = vec![T::default(); x.len()];
    let mut st = vec![RowStats::default(); rows];
    let c = row::forward(spec, accum, x, n, Some(w), Some(b), &mut y, Some(&mut st)).unwrap();
    let (mut dx, mut dw, mut db) = (vec![T::default(); x.len()], vec![T::default(); n], vec![T::default(); n]);
    let cb = row::backward(spec, accum, x, dy, n, &st, Some(w), &mut dx, Some(&mut dw), Some(&mut db)).unwrap();
    (y, st, c, dx, dw, db, cb)
}

fn bits<T: Element>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

fn in_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(f)
}

fn case<T: Element>(accum: Accum, rows: usize, n: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let x: Vec<T> = to_t(&common::gaussian(&mut rng, rows * n, 1.0, 0.5));
    let dy: Vec<T> = to_t(&common::gaussian(&mut rng, rows * n, 1.0, 0.0));
    let (w, b) = common::affine(&mut rng, n);
    let (w, b): (Vec<T>, Vec<T>) = (to_t(&w), to_t(&b));
    for (kind, centred) in kinds(n.div_ceil(3)) {
        let spec = NormSpec { kind, centred, eps: 1e-5, constant: Default::default() };
        let one = in_pool(1, || run(&spec, accum, &x, &dy, n, &w, &b));
        for threads in [2, 3] {
            let many = in_pool(threads, || run(&spec, accum, &x, &dy, n, &w, &b));
            let what = format!("{spec:?} {accum:?} {} rows={rows} n={n} threads={threads}", T::DTYPE);
            assert_eq!(bits(&one.0), bits(&many.0), "{what}: y");
            assert_eq!(one.1, many.1, "{what}: stats");
            assert_eq!(one.2, many.2, "{what}: forward counters");
            assert_eq!(bits(&one.3), bits(&many.3), "{what}: dx");
            assert_eq!(bits(&one.4), bits(&many.4), "{what}: dweight");
            assert_eq!(bits(&one.5), bits(&many.5), "{what}: dbias");
            assert_eq!(one.6, many.6, "{what}: backward counters");
        }
    }
}

#[test]
fn identical_across_thread_counts() {
    // 150 rows x 1000: 5 forward tasks, 50 row blocks of 3 in the backward.
    case::<f32>(Accum::F32, 150, 1000, 1);
    case::<f16>(Accum::F32, 150, 1000, 2);
    // Many short rows: 2000 x 33 (2 forward tasks, 64 blocks of 32 rows).
    case::<bf16>(Accum::F32, 2000, 33, 3);
    case::<f64>(Accum::F64, 2000, 33, 4);
    case::<f16>(Accum::PureF16, 2000, 33, 5);
}

/// The weight gradient really is a sum over many rows: it changes when one row's dy changes,
/// so the comparisons above are not comparing zeros.
#[test]
fn dweight_depends_on_every_block() {
    let (rows, n) = (640, 10);
    let mut rng = Rng::new(9);
    let x: Vec<f32> = to_t(&common::gaussian(&mut rng, rows * n, 1.0, 0.0));
    let mut dy: Vec<f32> = to_t(&common::gaussian(&mut rng, rows * n, 1.0, 0.0));
    let (w, b) = common::affine(&mut rng, n);
    let (w, b): (Vec<f32>, Vec<f32>) = (to_t(&w), to_t(&b));
    let spec = NormSpec::rms(1e-5);
    let a = in_pool(2, || run(&spec, Accum::F32, &x, &dy, n, &w, &b));
    dy[(rows - 1) * n] += 1.0;
    let c = in_pool(2, || run(&spec, Accum::F32, &x, &dy, n, &w, &b));
    assert_ne!(a.4[0], c.4[0]);
    assert_eq!(c.5[0], a.5[0] + 1.0);
}
