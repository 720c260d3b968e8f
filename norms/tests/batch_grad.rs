//! Finite-difference gradient checks of the batch forms (f64 storage, f64 accumulator): every
//! kind, train mode (gradient through the batch statistics) and eval mode (fixed running
//! statistics), dx, dγ and dβ; and mean-only batch norm.
//!
//! The loss is `L = Σ r_j y_j` with random `r`, so `dL/dy = r`. Central differences with
//! step `h = 1e-6` have truncation error O(h^2) and rounding error O(1e-16 |L| / h), far below
//! the tolerance `1e-6 (1 + max |grad|)`. Inputs are random Gaussians, so the L-inf / Top-k
//! selections have margins far above `h` (checked for every case: `assert_no_kink_near`).

use crate::batch_common;

use batch_common::{layouts, specs, Rng};
use normlab_norms::batch::{self, mean_only, Convention, Layout, Mode, RunningStats};
use normlab_norms::{Accum, NormSpec, RowStats};

const H: f64 = 1e-6;

#[allow(clippy::too_many_arguments)]
fn loss(spec: &NormSpec, layout: Layout, mode: Mode, run: &RunningStats, x: &[f64], w: &[f64], b: &[f64], r: &[f64]) -> f64 {
    let mut y = vec![0.0; x.len()];
    let mut run = run.clone();
    batch::forward(spec, Accum::F64, layout, x, Some(w), Some(b), &mut y, mode, Some(&mut run), None).unwrap();
    y.iter().zip(r).map(|(y, r)| y * r).sum()
}

fn fd(f: impl Fn(&[f64]) -> f64, v: &[f64]) -> Vec<f64> {
    (0..v.len())
        .map(|j| {
            let (mut p, mut m) = (v.to_vec(), v.to_vec());
            p[j] += H;
            m[j] -= H;
            (f(&p) - f(&m)) / (2.0 * H)
        })
        .collect()
}

fn assert_close(what: &str, ctx: &str, an: &[f64], num: &[f64]) {
    let scale = 1.0 + an.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (j, (a, n)) in an.iter().zip(num).enumerate() {
        assert!((a - n).abs() <= 1e-6 * scale, "{ctx}: {what}[{j}] analytic {a} vs finite difference {n}");
    }
}

fn check(spec: &NormSpec, layout: Layout, mode: Mode, convention: Convention, rng: &mut Rng) {
    let c = layout.channels();
    let x = rng.gaussian(layout.len(), 1.0, 0.3);
    let w = rng.gaussian(c, 0.5, 1.0);
    let b = rng.gaussian(c, 1.0, 0.0);
    let r = rng.gaussian(layout.len(), 1.0, 0.0);
    assert_no_kink_near(spec, layout, &x);
    let mut run = match convention {
        Convention::PyTorch => RunningStats::new(c),
        Convention::NormMattersCode => RunningStats::norm_matters(c),
    };
    run.mean = rng.gaussian(c, 0.5, 0.0);
    run.spread = (0..c).map(|_| 0.5 + rng.uniform()).collect();
    // Analytic gradients.
    let mut y = vec![0.0; x.len()];
    let mut st = vec![RowStats::default(); c];
    batch::forward(spec, Accum::F64, layout, &x, Some(&w), Some(&b), &mut y, mode, Some(&mut run.clone()), Some(&mut st)).unwrap();
    let (mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; c], vec![0.0; c]);
    let counters =
        batch::backward(spec, Accum::F64, layout, &x, &r, mode, &st, Some(&w), &mut dx, Some(&mut dw), Some(&mut db)).unwrap();
    assert!(counters.is_clean());
    let ctx = format!("{spec:?} {layout:?} {mode:?} {convention:?}");
    assert_close("dx", &ctx, &dx, &fd(|v| loss(spec, layout, mode, &run, v, &w, &b, &r), &x));
    assert_close("dgamma", &ctx, &dw, &fd(|v| loss(spec, layout, mode, &run, &x, v, &b, &r), &w));
    assert_close("dbeta", &ctx, &db, &fd(|v| loss(spec, layout, mode, &run, &x, &w, v, &r), &b));
}

/// The L-inf / Top-k selections must not change within the steps: the sorted |x - mu| of
/// every channel are more than 100 h apart (true for these seeds; fails loudly otherwise).
fn assert_no_kink_near(spec: &NormSpec, layout: Layout, x: &[f64]) {
    for ch in 0..layout.channels() {
        let v = batch_common::channel(&layout, x, ch);
        let centre = if spec.centred { v.iter().sum::<f64>() / v.len() as f64 } else { 0.0 };
        let mut a: Vec<f64> = v.iter().map(|x| (x - centre).abs()).collect();
        a.sort_by(|p, q| p.partial_cmp(q).unwrap());
        for pair in a.windows(2) {
            assert!(pair[1] - pair[0] > 100.0 * H, "{layout:?}: gap {}", pair[1] - pair[0]);
        }
    }
}

fn grad_layouts() -> Vec<Layout> {
    vec![Layout::Nchw { n: 2, c: 2, h: 2, w: 3 }, Layout::Nc { n: 7, c: 3 }, Layout::Nchw { n: 1, c: 2, h: 1, w: 5 }]
}

#[test]
fn train_mode_gradients_match_finite_differences() {
    let mut rng = Rng::new(21);
    for layout in grad_layouts() {
        for spec in specs(layout.per_channel(), 1e-3) {
            check(&spec, layout, Mode::Train, Convention::PyTorch, &mut rng);
        }
    }
}

#[test]
fn eval_mode_gradients_match_finite_differences() {
    let mut rng = Rng::new(22);
    for layout in grad_layouts() {
        for spec in specs(layout.per_channel(), 1e-3) {
            check(&spec, layout, Mode::Eval, Convention::PyTorch, &mut rng);
            check(&spec, layout, Mode::Eval, Convention::NormMattersCode, &mut rng);
        }
    }
}

#[test]
fn train_gradients_differ_from_eval_gradients() {
    // The train backward must include the statistics' terms: with dy = 1 the train dx of a
    // centred norm is 0 (a shift of x does not move the output) while the eval dx is not.
    let layout = Layout::Nc { n: 6, c: 2 };
    let mut rng = Rng::new(23);
    let x = rng.gaussian(layout.len(), 1.0, 0.0);
    let dy = vec![1.0; layout.len()];
    let spec = NormSpec::layer(1e-5);
    let mut st = vec![RowStats::default(); 2];
    let mut y = vec![0.0; x.len()];
    batch::forward(&spec, Accum::F64, layout, &x, None, None, &mut y, Mode::Train, None, Some(&mut st)).unwrap();
    let mut dx = vec![0.0; x.len()];
    batch::backward(&spec, Accum::F64, layout, &x, &dy, Mode::Train, &st, None, &mut dx, None, None).unwrap();
    assert!(dx.iter().all(|v| v.abs() < 1e-12), "{dx:?}");
    batch::backward(&spec, Accum::F64, layout, &x, &dy, Mode::Eval, &st, None, &mut dx, None, None).unwrap();
    assert!(dx.iter().all(|v| v.abs() > 0.1), "{dx:?}");
}

fn mean_only_loss(layout: Layout, mode: Mode, run: &RunningStats, x: &[f64], b: &[f64], r: &[f64]) -> f64 {
    let mut y = vec![0.0; x.len()];
    let mut run = run.clone();
    mean_only::forward(Accum::F64, layout, x, Some(b), &mut y, mode, Some(&mut run)).unwrap();
    y.iter().zip(r).map(|(y, r)| y * r).sum()
}

#[test]
fn mean_only_gradients_match_finite_differences() {
    let mut rng = Rng::new(24);
    for layout in layouts() {
        for mode in [Mode::Train, Mode::Eval] {
            let c = layout.channels();
            let x = rng.gaussian(layout.len(), 1.0, 2.0);
            let b = rng.gaussian(c, 1.0, 0.0);
            let r = rng.gaussian(layout.len(), 1.0, 0.0);
            let mut run = RunningStats::new(c);
            run.mean = rng.gaussian(c, 1.0, 0.0);
            let (mut dx, mut db) = (vec![0.0; x.len()], vec![0.0; c]);
            mean_only::backward(Accum::F64, layout, &r, mode, &mut dx, Some(&mut db)).unwrap();
            let ctx = format!("mean-only {layout:?} {mode:?}");
            assert_close("dx", &ctx, &dx, &fd(|v| mean_only_loss(layout, mode, &run, v, &b, &r), &x));
            assert_close("dbeta", &ctx, &db, &fd(|v| mean_only_loss(layout, mode, &run, &x, v, &r), &b));
        }
    }
}
