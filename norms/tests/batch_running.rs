//! Running statistics (both conventions), eval mode, mean-only batch norm, determinism across
//! thread counts, and typed errors of the batch forms.

#![allow(clippy::needless_range_loop)]

use crate::batch_common;

use batch_common::{channel, channel_ref, index, specs, Rng};
use normlab_norms::batch::{self, mean_only, Convention, Layout, Mode, RunningStats};
use normlab_norms::{f16, Accum, Element, NormError, NormKind, NormSpec, RowStats};

fn train(spec: &NormSpec, layout: Layout, x: &[f64], run: &mut RunningStats) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    let c = batch::forward(spec, Accum::F64, layout, x, None, None, &mut y, Mode::Train, Some(run), None).unwrap();
    assert!(c.is_clean());
    y
}

/// What one batch contributes to `spread` (textbook, module doc of `batch::running`).
fn expected_batch_spread(spec: &NormSpec, convention: Convention, x: &[f64]) -> f64 {
    let r = channel_ref(spec, x);
    let m = x.len() as f64;
    match convention {
        Convention::NormMattersCode => 1.0 / r.d,
        Convention::PyTorch => match spec.kind {
            NormKind::Layer => r.spread * m / (m - 1.0),
            _ => r.spread,
        },
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * (1.0 + b.abs())
}

#[test]
fn running_updates_follow_both_conventions() {
    let layout = Layout::Nchw { n: 3, c: 2, h: 2, w: 2 };
    let mut rng = Rng::new(31);
    for spec in specs(layout.per_channel(), 1e-5) {
        for (convention, momentum) in [(Convention::PyTorch, 0.1), (Convention::PyTorch, 0.35), (Convention::NormMattersCode, 0.1)] {
            let mut run = RunningStats { convention, momentum, ..RunningStats::new(2) };
            run.mean = vec![0.25, -0.5];
            run.spread = vec![2.0, 0.5];
            let (mut mean, mut spread) = (run.mean.clone(), run.spread.clone());
            // Weight of the new batch value.
            let a = if convention == Convention::PyTorch { momentum } else { 1.0 - momentum };
            for step in 0..3 {
                let x = rng.gaussian(layout.len(), 1.0 + step as f64, 0.5);
                train(&spec, layout, &x, &mut run);
                for ch in 0..2 {
                    let xc = channel(&layout, &x, ch);
                    if spec.centred {
                        mean[ch] = (1.0 - a) * mean[ch] + a * channel_ref(&spec, &xc).mean;
                    }
                    spread[ch] = (1.0 - a) * spread[ch] + a * expected_batch_spread(&spec, convention, &xc);
                    let ctx = format!("{spec:?} {convention:?} m={momentum} step {step} ch {ch}");
                    assert!(close(run.mean[ch], mean[ch]), "{ctx}: mean {} vs {}", run.mean[ch], mean[ch]);
                    assert!(close(run.spread[ch], spread[ch]), "{ctx}: spread {} vs {}", run.spread[ch], spread[ch]);
                }
            }
            assert_eq!(run.updates, 3);
        }
    }
}

#[test]
fn pytorch_and_norm_matters_conventions_differ() {
    // Same data, same momentum: PyTorch gives the new batch weight 0.1, the code 0.9.
    let layout = Layout::Nc { n: 8, c: 1 };
    let x: Vec<f64> = (0..8).map(|i| i as f64).collect();
    let mut a = RunningStats::new(1);
    let mut b = RunningStats::norm_matters(1);
    train(&NormSpec::l1(0.0), layout, &x, &mut a);
    train(&NormSpec::l1(0.0), layout, &x, &mut b);
    assert!(close(a.mean[0], 0.35), "{}", a.mean[0]);
    assert!(close(b.mean[0], 3.15), "{}", b.mean[0]);
    // sigma = C_L1 * mean|x - 3.5| = C_L1 * 2; the code keeps the scale 1/sigma.
    let sigma = normlab_norms::constants::C_L1 * 2.0;
    assert!(close(a.spread[0], 0.9 + 0.1 * sigma));
    assert!(close(b.spread[0], 0.1 + 0.9 / sigma));
}

#[test]
fn eval_uses_running_statistics() {
    let mut rng = Rng::new(32);
    for layout in [Layout::Nchw { n: 2, c: 3, h: 2, w: 3 }, Layout::Nc { n: 5, c: 2 }] {
        let c = layout.channels();
        for spec in specs(layout.per_channel(), 1e-3) {
            for convention in [Convention::PyTorch, Convention::NormMattersCode] {
                let mut run = RunningStats { convention, ..RunningStats::new(c) };
                run.mean = rng.gaussian(c, 1.0, 0.0);
                run.spread = (0..c).map(|_| 0.2 + rng.uniform()).collect();
                let x = rng.gaussian(layout.len(), 2.0, 0.0);
                let w = rng.gaussian(c, 1.0, 0.0);
                let b = rng.gaussian(c, 1.0, 0.0);
                let mut y = vec![0.0; x.len()];
                let mut st = vec![RowStats::default(); c];
                let before = run.clone();
                batch::forward(&spec, Accum::F64, layout, &x, Some(&w), Some(&b), &mut y, Mode::Eval, Some(&mut run), Some(&mut st))
                    .unwrap();
                assert_eq!(run, before, "eval must not update running statistics");
                for ch in 0..c {
                    let s = run.spread[ch];
                    let d = match (convention, spec.kind) {
                        (Convention::NormMattersCode, _) => 1.0 / s,
                        (_, NormKind::Rms | NormKind::Layer) => (s + spec.eps).sqrt(),
                        (_, NormKind::UnitL2) => s.max(spec.eps),
                        _ => s + spec.eps,
                    };
                    let mu = if spec.centred { run.mean[ch] } else { 0.0 };
                    assert_eq!(st[ch].mean(), mu);
                    assert!(close(st[ch].denominator(), d));
                    for i in 0..layout.batch() {
                        for k in 0..layout.spatial() {
                            let j = index(&layout, i, ch, k);
                            let want = (x[j] - mu) / d * w[ch] + b[ch];
                            assert!((y[j] - want).abs() <= 1e-13 * (1.0 + want.abs()), "{spec:?} {convention:?}: {} vs {want}", y[j]);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn eval_with_momentum_one_reproduces_train_output() {
    // Momentum 1 (PyTorch) makes the running statistics those of the last batch: eval on the
    // same batch gives the train output, except Layer whose running variance is unbiased.
    let layout = Layout::Nchw { n: 2, c: 2, h: 3, w: 3 };
    let m = layout.per_channel() as f64;
    let mut rng = Rng::new(33);
    for spec in specs(layout.per_channel(), 1e-4) {
        let x = rng.gaussian(layout.len(), 1.5, -0.5);
        let mut run = RunningStats::new(2).with_momentum(1.0);
        let y = train(&spec, layout, &x, &mut run);
        if spec.kind == NormKind::Layer {
            run.spread.iter_mut().for_each(|v| *v *= (m - 1.0) / m);
        }
        let mut ye = vec![0.0; x.len()];
        batch::forward(&spec, Accum::F64, layout, &x, None, None, &mut ye, Mode::Eval, Some(&mut run), None).unwrap();
        for (a, b) in y.iter().zip(&ye) {
            assert!((a - b).abs() < 1e-9, "{spec:?}: train {a} vs eval {b}");
        }
    }
}

#[test]
fn f16_eval_within_one_ulp_of_f64() {
    let layout = Layout::Nchw { n: 2, c: 3, h: 4, w: 5 };
    let mut rng = Rng::new(34);
    for spec in specs(layout.per_channel(), 1e-3) {
        let mut run = RunningStats::new(3);
        run.mean = rng.gaussian(3, 1.0, 0.0);
        run.spread = vec![0.5, 2.0, 30.0];
        let x: Vec<f16> = rng.gaussian(layout.len(), 3.0, 0.0).iter().map(|&v| f16::from_f64(v)).collect();
        let xf: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
        let mut y = vec![f16::ZERO; x.len()];
        let mut yf = vec![0.0; x.len()];
        batch::forward(&spec, Accum::F32, layout, &x, None, None, &mut y, Mode::Eval, Some(&mut run), None).unwrap();
        batch::forward(&spec, Accum::F64, layout, &xf, None, None, &mut yf, Mode::Eval, Some(&mut run), None).unwrap();
        for (a, r) in y.iter().zip(&yf) {
            // One rounding into f16 plus the f32 arithmetic (a few 2^-24 of |x - mu| * s).
            let bound = normlab_norms::DType::F16.ulp(*r) + 1e-6 * (1.0 + r.abs());
            assert!((a.to_f64() - r).abs() <= bound, "{spec:?}: {a} vs {r}");
        }
    }
}

#[test]
fn running_stats_propagate_nan_channels_only() {
    let layout = Layout::Nc { n: 4, c: 2 };
    let mut x = vec![1.0, 2.0, 3.0, 5.0, -1.0, 0.0, 2.0, 7.0];
    x[index(&layout, 2, 1, 0)] = f64::NAN;
    let mut run = RunningStats::new(2);
    let mut y = vec![0.0; 8];
    let c = batch::forward(&NormSpec::layer(1e-5), Accum::F64, layout, &x, None, None, &mut y, Mode::Train, Some(&mut run), None).unwrap();
    assert_eq!(c.nonfinite_in, 1);
    assert!(run.mean[0].is_finite() && run.spread[0].is_finite());
    assert!(run.mean[1].is_nan() && run.spread[1].is_nan());
    // Eval is elementwise: only the NaN element is NaN.
    let mut run = RunningStats::new(2);
    let c = batch::forward(&NormSpec::layer(1e-5), Accum::F64, layout, &x, None, None, &mut y, Mode::Eval, Some(&mut run), None).unwrap();
    assert_eq!((c.nonfinite_in, c.nonfinite_out), (1, 1));
    assert_eq!(y.iter().filter(|v| v.is_nan()).count(), 1);
}

#[test]
fn mean_only_forward_running_and_eval() {
    let mut rng = Rng::new(35);
    for layout in batch_common::layouts() {
        let c = layout.channels();
        let x = rng.gaussian(layout.len(), 1e-3, 7.0);
        let b = rng.gaussian(c, 1.0, 0.0);
        for convention in [Convention::PyTorch, Convention::NormMattersCode] {
            let mut run = RunningStats { convention, ..RunningStats::new(c) };
            let mut y = vec![0.0; x.len()];
            mean_only::forward(Accum::F64, layout, &x, Some(&b), &mut y, Mode::Train, Some(&mut run)).unwrap();
            let spec = NormSpec::layer(0.0); // centred: the textbook mean
            let a = if convention == Convention::PyTorch { 0.1 } else { 0.9 };
            for ch in 0..c {
                let r = channel_ref(&spec, &channel(&layout, &x, ch));
                for (yv, xv) in channel(&layout, &y, ch).iter().zip(channel(&layout, &x, ch)) {
                    let want = ((xv - r.mean_hi) - r.mean_lo) + b[ch];
                    assert!((yv - want).abs() <= 1e-15 * (1.0 + want.abs()), "{layout:?}: {yv} vs {want}");
                }
                assert!(close(run.mean[ch], a * r.mean));
                assert_eq!(run.spread[ch], 1.0, "mean-only leaves spread alone");
            }
            let mut ye = vec![0.0; x.len()];
            mean_only::forward(Accum::F64, layout, &x, Some(&b), &mut ye, Mode::Eval, Some(&mut run)).unwrap();
            for ch in 0..c {
                for (yv, xv) in channel(&layout, &ye, ch).iter().zip(channel(&layout, &x, ch)) {
                    assert_eq!(*yv, (xv - run.mean[ch]) + b[ch]);
                }
            }
        }
    }
}

#[test]
fn mean_only_f16_and_nan() {
    let layout = Layout::Nchw { n: 2, c: 2, h: 3, w: 1 };
    let x: Vec<f16> = [6e4, 6.1e4, 6.2e4, 1.0, 2.0, 3.0, 6.3e4, 6.4e4, 6.5e4, 4.0, f64::NAN, 6.0].iter().map(|&v| f16::from_f64(v)).collect();
    let mut y = vec![f16::ZERO; 12];
    let c = mean_only::forward(Accum::F32, layout, &x, None, &mut y, Mode::Train, None).unwrap();
    assert_eq!((c.nonfinite_in, c.nonfinite_out), (1, 6));
    let ch0: Vec<f64> = channel(&layout, &y, 0).iter().map(|v| v.to_f64()).collect();
    let xs: Vec<f64> = channel(&layout, &x, 0).iter().map(|v| v.to_f64()).collect();
    let mean = xs.iter().sum::<f64>() / 6.0;
    for (a, xv) in ch0.iter().zip(&xs) {
        assert_eq!(*a, f16::from_f64(xv - mean).to_f64());
    }
    assert!(channel(&layout, &y, 1).iter().all(|v| v.is_nan()));
}

fn run_all<T: Element>(layout: Layout, x: &[T], dy: &[T]) -> (Vec<T>, Vec<T>, Vec<T>, RunningStats) {
    let c = layout.channels();
    let spec = NormSpec::topk(7, 1e-5);
    let w: Vec<T> = (0..c).map(|i| T::from_f64(1.0 + 0.1 * i as f64)).collect();
    let mut y = vec![T::default(); x.len()];
    let mut run = RunningStats::new(c);
    let mut st = vec![RowStats::default(); c];
    batch::forward(&spec, Accum::F32, layout, x, Some(&w), None, &mut y, Mode::Train, Some(&mut run), Some(&mut st)).unwrap();
    let (mut dx, mut dw) = (vec![T::default(); x.len()], vec![T::default(); c]);
    batch::backward(&spec, Accum::F32, layout, x, dy, Mode::Train, &st, Some(&w), &mut dx, Some(&mut dw), None).unwrap();
    (y, dx, dw, run)
}

#[test]
fn deterministic_across_thread_counts() {
    let layout = Layout::Nchw { n: 4, c: 8, h: 16, w: 17 };
    let mut rng = Rng::new(36);
    let x: Vec<f16> = rng.gaussian(layout.len(), 2.0, 0.3).iter().map(|&v| f16::from_f64(v)).collect();
    let dy: Vec<f16> = rng.gaussian(layout.len(), 1.0, 0.0).iter().map(|&v| f16::from_f64(v)).collect();
    let results: Vec<_> = [1, 2, 5]
        .iter()
        .map(|&t| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap().install(|| run_all(layout, &x, &dy)))
        .collect();
    let bits = |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
    for r in &results[1..] {
        assert_eq!(bits(&r.0), bits(&results[0].0));
        assert_eq!(bits(&r.1), bits(&results[0].1));
        assert_eq!(bits(&r.2), bits(&results[0].2));
        assert_eq!(r.3, results[0].3);
    }
}

#[test]
fn bad_input_gives_typed_errors() {
    let spec = NormSpec::layer(1e-5);
    let x = vec![0.0f32; 12];
    let mut y = vec![0.0f32; 12];
    let fwd = |spec: &NormSpec, layout: Layout, x: &[f32], y: &mut [f32], w: Option<&[f32]>, mode: Mode, run: Option<&mut RunningStats>| {
        batch::forward(spec, Accum::F32, layout, x, w, None, y, mode, run, None)
    };
    for (layout, what) in [
        (Layout::Nc { n: 0, c: 3 }, "layout dimension n (batch)"),
        (Layout::Nc { n: 3, c: 0 }, "layout dimension c (channels)"),
        (Layout::Nchw { n: 1, c: 3, h: 0, w: 4 }, "layout dimension h (height)"),
        (Layout::Nchw { n: 1, c: 3, h: 4, w: 0 }, "layout dimension w (width)"),
    ] {
        assert_eq!(fwd(&spec, layout, &x, &mut y, None, Mode::Train, None), Err(NormError::Empty { what, value: 0 }));
    }
    let big = Layout::Nchw { n: usize::MAX, c: 2, h: 2, w: 2 };
    assert!(matches!(big.validate(), Err(NormError::Shape(_))));
    let l = Layout::Nc { n: 4, c: 3 };
    assert_eq!(fwd(&spec, Layout::Nc { n: 5, c: 3 }, &x, &mut y, None, Mode::Train, None), Err(NormError::Length { what: "input", expected: 15, got: 12 }));
    assert_eq!(fwd(&spec, l, &x, &mut y[..11], None, Mode::Train, None), Err(NormError::Length { what: "output", expected: 12, got: 11 }));
    assert_eq!(fwd(&spec, l, &x, &mut y, Some(&[1.0; 4]), Mode::Train, None), Err(NormError::Length { what: "weight", expected: 3, got: 4 }));
    assert_eq!(fwd(&NormSpec::topk(5, 0.0), l, &x, &mut y, None, Mode::Train, None), Err(NormError::InvalidK { k: 5, n: 4 }));
    assert_eq!(fwd(&NormSpec::l1(f64::NAN), l, &x, &mut y, None, Mode::Train, None).unwrap_err().to_string(), "eps must be finite and >= 0, got NaN");
    let mut run = RunningStats::new(3).with_momentum(1.5);
    assert_eq!(
        fwd(&spec, l, &x, &mut y, None, Mode::Train, Some(&mut run)),
        Err(NormError::OutOfRange { what: "momentum", range: "[0, 1]", value: 1.5 })
    );
    let mut run = RunningStats::new(2);
    assert_eq!(
        fwd(&spec, l, &x, &mut y, None, Mode::Train, Some(&mut run)),
        Err(NormError::Length { what: "running mean", expected: 3, got: 2 })
    );
    assert!(matches!(fwd(&spec, l, &x, &mut y, None, Mode::Eval, None), Err(NormError::Unsupported { .. })));
    // Unbiased running variance over one element per channel.
    let one = Layout::Nc { n: 1, c: 12 };
    let mut run = RunningStats::new(12);
    let e = fwd(&spec, one, &x, &mut y, None, Mode::Train, Some(&mut run)).unwrap_err();
    assert!(e.to_string().contains("m = 1"), "{e}");
    assert_eq!(run.updates, 0);
    // ... fine without running statistics, or in the code convention.
    assert!(fwd(&spec, one, &x, &mut y, None, Mode::Train, None).is_ok());
    assert!(fwd(&spec, one, &x, &mut y, None, Mode::Train, Some(&mut RunningStats::norm_matters(12))).is_ok());
    // Backward lengths.
    let mut dx = vec![0.0f32; 12];
    let st = vec![RowStats::default(); 2];
    assert_eq!(
        batch::backward(&spec, Accum::F32, l, &x, &x, Mode::Train, &st, None, &mut dx, None, None),
        Err(NormError::Length { what: "stats", expected: 3, got: 2 })
    );
    let st = vec![RowStats::default(); 3];
    assert_eq!(
        batch::backward(&spec, Accum::F32, l, &x, &x, Mode::Train, &st, None, &mut dx, Some(&mut [0.0; 2]), None),
        Err(NormError::Length { what: "dweight", expected: 3, got: 2 })
    );
    // Mean-only.
    assert_eq!(
        mean_only::forward(Accum::F32, l, &x, Some(&[0.0; 2]), &mut y, Mode::Train, None),
        Err(NormError::Length { what: "bias", expected: 3, got: 2 })
    );
    assert!(matches!(mean_only::forward(Accum::F32, l, &x, None, &mut y, Mode::Eval, None), Err(NormError::Unsupported { .. })));
    assert_eq!(
        mean_only::backward(Accum::F32, Layout::Nc { n: 0, c: 1 }, &x, Mode::Train, &mut dx, None),
        Err(NormError::Empty { what: "layout dimension n (batch)", value: 0 })
    );
}
