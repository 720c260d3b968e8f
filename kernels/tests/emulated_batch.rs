//! The batch-norm kernels (src/cuda/batchnorm.cu) on the SIMT emulator, against normlab-norms'
//! batch forms with f64 storage and `Accum::F64` (`batch::forward/backward`, `mean_only`).
//!
//! Bounds (the row kernels' bounds, kernels/README.md, with a channel in the role of a row):
//! - forward y within 1 ulp of the output type, plus `2^-20 (|x̂ w| + |b|)` when a bias is added
//!   (the sum can cancel in fp32) and `2^-20 mean|x̂| |w|` over the channel for centred kinds
//!   (the absolute error of the fp32 mean; `normlab_kernels::bounds`);
//! - saved statistics: mean (hi + lo) and D within `2^-20` relative (+ `2^-40` absolute);
//! - running statistics within `2^-20` relative of the reference's, plus `2^-40 (1 + eps)`
//!   absolute: the kernel folds in the f64 statistic itself (variance, sigma), the reference
//!   recovers it from D (`D^2 - eps`, `D - eps`), which carries an f64 rounding of size
//!   `2^-52 (var + eps)`; for L1/L-inf/Top-k the |z| are fp32;
//! - backward dx within 1 ulp plus `2^-16 (max|dx| + s (max|g| + C |g . x̂|))` of its channel,
//!   dweight/dbias within 1 ulp plus `2^-18` of the channel sums of |dy x̂| and |dy|.
//!
//! Shapes: N = 1, C not a multiple of 8 or 32, H*W = 1, odd (15, 49) and a multiple of 8 (the
//! 16-byte paths), [N, C] with C % 8 == 0 (vector rows) and not, misaligned buffers (scalar
//! paths), chunks of 8..24 positions (many chunks per channel) and the default chunking; data
//! Gaussian with offsets, small integers (many ties: the Top-k/L-inf lowest-position rule),
//! edge channels (all zero, +-65504, NaN, +-Inf, bf16 near 3e38 and 1e-39). Orders fwd, rev,
//! random and reversed blocks give bitwise identical results.

use crate::common;

use common::{Data, Rng, H};
use half::{bf16, f16};
use normlab_kernels::batch::cpu as bcpu;
use normlab_kernels::batch::{BatchNorm, BatchTuning, Saved};
use normlab_kernels::bounds;
use normlab_kernels::cpu::{EmuOptions, Order};
use normlab_kernels::plan::Device;
use normlab_kernels::{list, KernelError};
use normlab_norms::batch::{self, mean_only, Convention, Layout, Mode, RunningStats};
use normlab_norms::{Accum, ConstMode, NormError, NormKind, NormSpec, RowStats};

fn opts(order: Order) -> EmuOptions {
    EmuOptions { order, device: Device::emulator(3), ..Default::default() }
}

fn to64<T: H>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to64()).collect()
}

fn gen<T: H>(rng: &mut Rng, len: usize, d: Data) -> Vec<T> {
    common::gen(rng, len, d)
}

/// Elements of channel `ch` in (n, h, w) order, as indices into the layout.
fn channel_idx(l: &Layout, ch: usize) -> Vec<usize> {
    let s = l.spatial();
    (0..l.batch()).flat_map(|i| (0..s).map(move |k| (i * l.channels() + ch) * s + k)).collect()
}

/// The f64 reference forward: output, statistics, running statistics after the step.
fn ref_forward(norm: &BatchNorm, l: Layout, x: &[f64], w: Option<&[f64]>, b: Option<&[f64]>, mode: Mode, run: Option<&mut RunningStats>) -> (Vec<f64>, Vec<RowStats>) {
    let mut y = vec![0.0; x.len()];
    let mut st = vec![RowStats::default(); l.channels()];
    match norm {
        BatchNorm::Spec(spec) => {
            batch::forward(spec, Accum::F64, l, x, w, b, &mut y, mode, run, Some(&mut st)).unwrap();
        }
        BatchNorm::MeanOnly => {
            mean_only::forward(Accum::F64, l, x, b, &mut y, mode, run).unwrap();
        }
    }
    (y, st)
}

/// Worst error in ulps of T beyond `slack(i)`; NaN must match NaN, references beyond the range
/// must round to the infinity of their sign.
fn ulp_err<T: H>(got: &[T], want: &[f64], slack: &dyn Fn(usize) -> f64) -> (f64, usize) {
    common::max_ulp_err(got, want, slack)
}

#[derive(Clone, Copy, Debug)]
struct Case {
    layout: Layout,
    data: Data,
    weight: bool,
    bias: bool,
    /// Element offset of every buffer (1: misaligned, scalar paths).
    off: usize,
    chunk: usize,
}

fn case(layout: Layout, data: Data) -> Case {
    Case { layout, data, weight: true, bias: true, off: 0, chunk: 16 }
}

fn gauss(mean: f64, scale: f64) -> Data {
    Data::Normal { mean, scale }
}

/// Specs valid for m elements per channel: every kind, both centrings where optional, exact and
/// code constants, Top-k with k = 1, 5 and 32 (where k <= m).
fn specs(m: usize) -> Vec<BatchNorm> {
    let mut v = vec![
        NormSpec::rms(1e-6),
        NormSpec::layer(1e-5),
        NormSpec::unit_l2(1e-12),
        NormSpec::l1(1e-6),
        NormSpec::l1(0.0).with_centred(false),
        NormSpec::linf(1e-6),
        NormSpec::linf(1e-6).with_centred(false),
    ];
    if m >= 2 {
        v.push(NormSpec::linf(1e-6).with_constant(ConstMode::Code));
    }
    for k in [1, 5, 32] {
        if k <= m {
            v.push(NormSpec::topk(k, 1e-6).with_centred(k != 5));
        }
    }
    let mut out: Vec<BatchNorm> = v.into_iter().map(BatchNorm::Spec).collect();
    out.push(BatchNorm::MeanOnly);
    out
}

fn name(n: &BatchNorm) -> String {
    match n {
        BatchNorm::Spec(s) => match s.kind {
            NormKind::TopK { k } => format!("topk{k}{}", if s.centred { "" } else { "-u" }),
            k => format!("{}{}", k.name(), if s.centred || !k.centring_is_optional() { "" } else { "-u" }),
        },
        BatchNorm::MeanOnly => "mean-only".into(),
    }
}

struct Outcome<T> {
    y: Vec<T>,
    saved: Saved,
    run: RunningStats,
    dx: Vec<T>,
    dw: Vec<T>,
    db: Vec<T>,
}

/// Everything the kernels produce for one case (train forward with running statistics, then
/// train backward from the saved state), in thread order `order`.
#[allow(clippy::too_many_arguments)]
fn run_kernels<T: H>(norm: &BatchNorm, c: &Case, x: &[T], dy: &[T], w: Option<&[T]>, b: Option<&[T]>, run0: &RunningStats, o: &EmuOptions) -> Outcome<T> {
    let l = c.layout;
    let tuning = BatchTuning::tiny(c.chunk);
    let mut yb = vec![T::from64(0.0); l.len() + c.off];
    let mut saved = Saved::default();
    let mut run = run0.clone();
    bcpu::forward(norm, l, x, w, b, &mut yb[c.off..], Mode::Train, Some(&mut run), Some(&mut saved), o, &tuning).unwrap();
    let mut dxb = vec![T::from64(0.0); l.len() + c.off];
    let mut dw = vec![T::from64(0.0); l.channels()];
    let mut db = vec![T::from64(0.0); l.channels()];
    let mean_only = *norm == BatchNorm::MeanOnly;
    bcpu::backward(
        norm,
        l,
        x,
        dy,
        Mode::Train,
        &saved,
        w,
        &mut dxb[c.off..],
        (!mean_only).then_some(&mut dw[..]),
        Some(&mut db[..]),
        o,
        &tuning,
    )
    .unwrap();
    Outcome { y: yb[c.off..].to_vec(), saved, run, dx: dxb[c.off..].to_vec(), dw, db }
}

/// Worst errors (forward, dx, dw, db) of one case in ulps beyond the documented allowances;
/// panics on a violated bound.
fn check_case<T: H>(norm: &BatchNorm, c: &Case, seed: u64, order: Order) -> [f64; 4] {
    let l = c.layout;
    let ch = l.channels();
    let mut rng = Rng(seed | 1);
    let xb: Vec<T> = gen(&mut rng, l.len() + c.off, c.data);
    let dyb: Vec<T> = gen(&mut rng, l.len() + c.off, gauss(0.1, 1.0));
    let mean_only = *norm == BatchNorm::MeanOnly;
    let w: Option<Vec<T>> = (c.weight && !mean_only).then(|| gen(&mut rng, ch, gauss(1.0, 0.5)));
    let b: Option<Vec<T>> = c.bias.then(|| gen(&mut rng, ch, gauss(0.0, 0.5)));
    let (x, dy) = (&xb[c.off..], &dyb[c.off..]);
    let mut run0 = RunningStats::new(ch).with_momentum(0.25);
    // The unbiased running variance needs m >= 2 (a typed error otherwise, tested below).
    let layer_m1 = l.per_channel() == 1 && matches!(norm, BatchNorm::Spec(s) if s.kind == NormKind::Layer);
    if seed % 2 == 1 || layer_m1 {
        run0.convention = Convention::NormMattersCode;
    }
    run0.mean = (0..ch).map(|i| 0.1 * i as f64).collect();
    run0.spread = (0..ch).map(|i| 0.5 + 0.25 * i as f64).collect();
    let what = format!("{} {:?} {:?} {:?} w={} b={} off={} chunk={} {order:?}", name(norm), T::DT, l, c.data, w.is_some(), b.is_some(), c.off, c.chunk);
    let k = run_kernels(norm, c, x, dy, w.as_deref(), b.as_deref(), &run0, &opts(order));

    // Reference: f64 storage and accumulation.
    let (x64, dy64) = (to64(x), to64(dy));
    let (w64, b64) = (w.as_deref().map(to64), b.as_deref().map(to64));
    let mut run_ref = run0.clone();
    let (y_ref, st_ref) = ref_forward(norm, l, &x64, w64.as_deref(), b64.as_deref(), Mode::Train, Some(&mut run_ref));
    let (yhat, _) = ref_forward(norm, l, &x64, None, None, Mode::Train, None);

    // Forward.
    let slack = bounds::batch_forward_slack(norm, &l, &y_ref, b64.as_deref());
    let (fwd, at) = ulp_err(&k.y, &y_ref, &|i| slack[i]);
    assert!(fwd <= 1.0, "{what}: forward {fwd} ulp at {at}: got {:?}, want {} (x = {:?})", k.y[at], y_ref[at], x[at]);

    // Saved statistics (spec kinds: the reference's RowStats).
    if let BatchNorm::Spec(spec) = norm {
        for (i, (ks, rs)) in k.saved.stats.iter().zip(&st_ref).enumerate() {
            let s = ks.to_row_stats();
            if rs.rscale.is_nan() {
                assert!(s.rscale.is_nan() && s.mean_hi.is_nan(), "{what}: channel {i}: reference NaN, kernel {ks:?}");
                continue;
            }
            let (dm, dd) = ((s.mean() - rs.mean()).abs(), (s.denominator() - rs.denominator()).abs());
            assert!(dm <= 2f64.powi(-20) * rs.mean().abs() + 2f64.powi(-40) * (1.0 + rs.denominator()), "{what}: channel {i}: mean {} vs {}", s.mean(), rs.mean());
            assert!(dd <= 2f64.powi(-20) * rs.denominator().abs() + 2f64.powi(-40), "{what}: channel {i}: D {} vs {}", s.denominator(), rs.denominator());
            assert_eq!(s.clamped, rs.clamped, "{what}: channel {i}: clamp flag");
            let _ = spec;
        }
    }
    // Running statistics.
    let eps = match norm {
        BatchNorm::Spec(s) => s.eps,
        BatchNorm::MeanOnly => 0.0,
    };
    assert_eq!(k.run.updates, run_ref.updates, "{what}");
    for (vals, refs, what2) in [(&k.run.mean, &run_ref.mean, "mean"), (&k.run.spread, &run_ref.spread, "spread")] {
        for (i, (g, r)) in vals.iter().zip(refs).enumerate() {
            if r.is_nan() {
                assert!(g.is_nan(), "{what}: running {what2} {i}: {g} vs NaN");
                continue;
            }
            let tol = 2f64.powi(-20) * r.abs() + 2f64.powi(-40) * (1.0 + eps);
            assert!((g - r).abs() <= tol, "{what}: running {what2} {i}: {g} vs {r} (diff {:e})", (g - r).abs());
        }
    }

    // Backward (the reference from its own statistics).
    let mut dx_ref = vec![0.0; l.len()];
    let (mut dw_ref, mut db_ref) = (vec![0.0; ch], vec![0.0; ch]);
    match norm {
        BatchNorm::Spec(spec) => {
            batch::backward(spec, Accum::F64, l, &x64, &dy64, Mode::Train, &st_ref, w64.as_deref(), &mut dx_ref, Some(&mut dw_ref), Some(&mut db_ref)).unwrap();
        }
        BatchNorm::MeanOnly => {
            mean_only::backward(Accum::F64, l, &dy64, Mode::Train, &mut dx_ref, Some(&mut db_ref)).unwrap();
        }
    }
    let cconst = match norm {
        BatchNorm::Spec(s) => s.scale_constant(l.per_channel()).unwrap().max(1.0),
        BatchNorm::MeanOnly => 1.0,
    };
    let chan_scale: Vec<f64> = (0..ch)
        .map(|c| {
            let s = if mean_only { 1.0 } else { 1.0 / st_ref[c].denominator() };
            let (mut gmax, mut dot, mut dxmax) = (0.0f64, 0.0f64, 0.0f64);
            for i in channel_idx(&l, c) {
                let g = dy64[i] * w64.as_ref().map_or(1.0, |w| w[c]);
                gmax = gmax.max(g.abs());
                dot += g * yhat[i];
                if dx_ref[i].is_finite() {
                    dxmax = dxmax.max(dx_ref[i].abs());
                }
            }
            dxmax + s * (gmax + cconst * dot.abs())
        })
        .collect();
    let (dxe, at) = ulp_err(&k.dx, &dx_ref, &|i| 2f64.powi(-16) * chan_scale[(i / l.spatial()) % ch]);
    assert!(dxe <= 1.0, "{what}: dx {dxe} ulp at {at}: got {:?}, want {} (channel {})", k.dx[at], dx_ref[at], (at / l.spatial()) % ch);
    let (mut abs_w, mut abs_b) = (vec![0.0; ch], vec![0.0; ch]);
    for c in 0..ch {
        for i in channel_idx(&l, c) {
            abs_w[c] += (dy64[i] * yhat[i]).abs();
            abs_b[c] += dy64[i].abs();
        }
    }
    let (dbe, at) = ulp_err(&k.db, &db_ref, &|c| 2f64.powi(-18) * abs_b[c]);
    assert!(dbe <= 1.0, "{what}: dbias {dbe} ulp at {at}: {:?} vs {}", k.db[at], db_ref[at]);
    let dwe = if mean_only {
        0.0
    } else {
        let (e, at) = ulp_err(&k.dw, &dw_ref, &|c| 2f64.powi(-18) * abs_w[c]);
        assert!(e <= 1.0, "{what}: dweight {e} ulp at {at}: {:?} vs {}", k.dw[at], dw_ref[at]);
        e
    };
    [fwd, dxe, dwe, dbe]
}

fn layouts() -> Vec<Layout> {
    vec![
        Layout::Nc { n: 1, c: 3 },
        Layout::Nc { n: 37, c: 5 },
        Layout::Nc { n: 21, c: 72 },
        Layout::Nc { n: 9, c: 67 },
        Layout::Nchw { n: 1, c: 2, h: 1, w: 1 },
        Layout::Nchw { n: 6, c: 3, h: 1, w: 1 },
        Layout::Nchw { n: 3, c: 3, h: 3, w: 5 },
        Layout::Nchw { n: 2, c: 2, h: 7, w: 7 },
        Layout::Nchw { n: 3, c: 3, h: 2, w: 4 },
        Layout::Nchw { n: 2, c: 5, h: 4, w: 6 },
    ]
}

/// Every (layout, norm) pair once, alternating the storage type (`parity` picks the half run by
/// this test), so each kind meets each layout family in both types across the two tests.
fn sweep<T: H>(seed0: u64, parity: usize) {
    let mut worst = [0.0f64; 4];
    let mut n = 0;
    for (li, l) in layouts().into_iter().enumerate() {
        for (si, norm) in specs(l.per_channel()).iter().enumerate() {
            if (li + si) % 2 != parity {
                continue;
            }
            let mut c = case(l, gauss(0.5, 2.0));
            // Vary affine, alignment and chunking across the sweep (every combination appears).
            c.weight = (li + si) % 3 != 0;
            c.bias = (li + si) % 2 == 0;
            c.off = usize::from((li + si) % 5 == 4);
            c.chunk = [8, 16, 24, 2048][(li * 3 + si) % 4];
            let order = [Order::Fwd, Order::Rev, Order::Random(seed0 + si as u64)][(li + si) % 3];
            let e = check_case::<T>(norm, &c, seed0 + (li * 31 + si) as u64, order);
            for (w, e) in worst.iter_mut().zip(e) {
                *w = w.max(e);
            }
            n += 1;
        }
    }
    eprintln!("{:?}: {n} cases, worst beyond allowance: fwd {:.3} dx {:.3} dw {:.3} db {:.3} ulp", T::DT, worst[0], worst[1], worst[2], worst[3]);
}

#[test]
fn every_kind_and_layout_f16() {
    sweep::<f16>(100, 0);
}

#[test]
fn every_kind_and_layout_bf16() {
    sweep::<bf16>(200, 1);
}

/// Integer data: many exact ties of |z| (the lowest-position rule of L-inf and Top-k), mean
/// offsets much larger than the spread.
#[test]
fn ties_and_offsets() {
    for (i, l) in [Layout::Nchw { n: 4, c: 3, h: 3, w: 3 }, Layout::Nc { n: 40, c: 9 }, Layout::Nchw { n: 3, c: 2, h: 2, w: 8 }].into_iter().enumerate() {
        for (ki, k) in [1, 3, 7, 20].into_iter().enumerate() {
            {
                let centred = (ki + i) % 2 == 0;
                let norm = BatchNorm::Spec(NormSpec::topk(k, 1e-6).with_centred(centred));
                let mut c = case(l, Data::Ints(2));
                c.chunk = 8;
                check_case::<f16>(&norm, &c, 7 + i as u64, Order::Rev);
            }
        }
        let norm = BatchNorm::Spec(NormSpec::linf(1e-6));
        check_case::<bf16>(&norm, &case(l, Data::Ints(1)), 9, Order::Fwd);
        // Exact zeros of z: sign(0) = 0 in the L1 gradient (uncentred: every x = 0).
        let norm = BatchNorm::Spec(NormSpec::l1(1e-6).with_centred(i % 2 == 0));
        check_case::<f16>(&norm, &case(l, Data::Ints(2)), 10, Order::Fwd);
        for (ni, norm) in [BatchNorm::Spec(NormSpec::layer(1e-5)), BatchNorm::Spec(NormSpec::l1(1e-5)), BatchNorm::MeanOnly].iter().enumerate() {
            if (ni + i) % 2 == 0 {
                check_case::<f16>(norm, &case(l, gauss(1000.0, 2.0)), 11, Order::Fwd);
            } else {
                check_case::<bf16>(norm, &case(l, gauss(-3e4, 5.0)), 12, Order::Rev);
            }
        }
    }
}

/// The default chunking with one chunk per channel, and 16-byte paths with a 2048-element slab.
#[test]
fn default_chunking_and_wide_slabs() {
    let l = Layout::Nchw { n: 2, c: 2, h: 32, w: 40 };
    for norm in [BatchNorm::Spec(NormSpec::layer(1e-5)), BatchNorm::Spec(NormSpec::topk(32, 1e-5)), BatchNorm::Spec(NormSpec::l1(1e-5))] {
        let mut c = case(l, gauss(0.0, 1.0));
        c.chunk = BatchTuning::DEFAULT.min_chunk;
        check_case::<bf16>(&norm, &c, 5, Order::Fwd);
        c.chunk = 512;
        check_case::<f16>(&norm, &c, 6, Order::Random(3));
    }
}

/// Bitwise identical results in fwd, rev and random thread orders and with the blocks reversed:
/// outputs, saved statistics, running statistics and every gradient.
#[test]
fn thread_orders_give_the_same_bits() {
    let mut rng = Rng(77);
    let all = [BatchNorm::Spec(NormSpec::layer(1e-5)), BatchNorm::Spec(NormSpec::l1(1e-5)), BatchNorm::Spec(NormSpec::topk(4, 1e-5)), BatchNorm::Spec(NormSpec::linf(1e-5)), BatchNorm::MeanOnly];
    for (l, norms) in [
        (Layout::Nchw { n: 3, c: 3, h: 3, w: 5 }, &all[..3]),
        (Layout::Nc { n: 50, c: 72 }, &all[2..]),
        (Layout::Nchw { n: 2, c: 3, h: 2, w: 8 }, &all[..2]),
    ] {
        for norm in norms.iter().copied() {
            let x: Vec<bf16> = gen(&mut rng, l.len(), Data::Ints(3));
            let dy: Vec<bf16> = gen(&mut rng, l.len(), gauss(0.0, 1.0));
            let w: Option<Vec<bf16>> = (norm != BatchNorm::MeanOnly).then(|| gen(&mut rng, l.channels(), gauss(1.0, 0.3)));
            let b: Vec<bf16> = gen(&mut rng, l.channels(), gauss(0.0, 0.3));
            let c = case(l, Data::Ints(3));
            let run0 = RunningStats::new(l.channels());
            let base = run_kernels(&norm, &c, &x, &dy, w.as_deref(), Some(&b), &run0, &opts(Order::Fwd));
            for o in [opts(Order::Rev), opts(Order::Random(5)), EmuOptions { reverse_blocks: true, ..opts(Order::Random(9)) }, EmuOptions { device: Device::emulator(1), ..opts(Order::Fwd) }] {
                let r = run_kernels(&norm, &c, &x, &dy, w.as_deref(), Some(&b), &run0, &o);
                let what = format!("{} {l:?} {o:?}", name(&norm));
                assert_eq!(r.y, base.y, "{what}: y");
                assert_eq!(r.saved.stats.iter().map(|s| (s.mean_hi.to_bits(), s.mean_lo.to_bits(), s.rscale.to_bits(), s.meta)).collect::<Vec<_>>(), base.saved.stats.iter().map(|s| (s.mean_hi.to_bits(), s.mean_lo.to_bits(), s.rscale.to_bits(), s.meta)).collect::<Vec<_>>(), "{what}: stats");
                assert_eq!(r.run.mean.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), base.run.mean.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{what}: running mean");
                assert_eq!(r.run.spread.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), base.run.spread.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{what}: running spread");
                assert_eq!(r.dx, base.dx, "{what}: dx");
                assert_eq!(r.dw, base.dw, "{what}: dweight");
                assert_eq!(r.db, base.db, "{what}: dbias");
            }
        }
    }
}

/// Eval mode: the running statistics (both conventions) normalize every element; the backward
/// treats them as constants. Compared with the reference's eval forward/backward.
#[test]
fn eval_mode_forward_and_backward() {
    let mut rng = Rng(99);
    for (li, l) in [Layout::Nchw { n: 2, c: 3, h: 3, w: 5 }, Layout::Nc { n: 7, c: 16 }, Layout::Nchw { n: 2, c: 2, h: 2, w: 4 }].into_iter().enumerate() {
        let ch = l.channels();
        for (si, norm) in specs(l.per_channel()).iter().enumerate() {
            for convention in [Convention::PyTorch, Convention::NormMattersCode] {
                let mut run = RunningStats { convention, ..RunningStats::new(ch) };
                run.mean = (0..ch).map(|_| rng.normal()).collect();
                run.spread = (0..ch).map(|_| 0.2 + rng.uniform()).collect();
                let x: Vec<f16> = gen(&mut rng, l.len(), gauss(0.3, 2.0));
                let dy: Vec<f16> = gen(&mut rng, l.len(), gauss(0.0, 1.0));
                let mean_only = *norm == BatchNorm::MeanOnly;
                let w: Option<Vec<f16>> = (!mean_only).then(|| gen(&mut rng, ch, gauss(1.0, 0.5)));
                let b: Vec<f16> = gen(&mut rng, ch, gauss(0.0, 0.5));
                let what = format!("{} {l:?} {convention:?}", name(norm));
                let o = opts([Order::Fwd, Order::Rev][(li + si) % 2]);
                let mut y = vec![f16::ZERO; l.len()];
                let mut saved = Saved::default();
                let before = run.clone();
                bcpu::forward(norm, l, &x, w.as_deref(), Some(&b), &mut y, Mode::Eval, Some(&mut run), Some(&mut saved), &o, &BatchTuning::tiny(8)).unwrap();
                assert_eq!(run, before, "{what}: eval must not touch the running statistics");
                let (x64, dy64, w64, b64) = (to64(&x), to64(&dy), w.as_deref().map(to64), to64(&b));
                let (y_ref, st_ref) = ref_forward(norm, l, &x64, w64.as_deref(), Some(&b64), Mode::Eval, Some(&mut run.clone()));
                let (yhat, _) = ref_forward(norm, l, &x64, None, None, Mode::Eval, Some(&mut run.clone()));
                let slack = bounds::batch_forward_slack(norm, &l, &y_ref, Some(&b64));
                let (e, at) = ulp_err(&y, &y_ref, &|i| slack[i]);
                assert!(e <= 1.0, "{what}: eval forward {e} ulp at {at}: {:?} vs {}", y[at], y_ref[at]);
                let mut dx = vec![f16::ZERO; l.len()];
                let mut dw = vec![f16::ZERO; ch];
                let mut db = vec![f16::ZERO; ch];
                bcpu::backward(norm, l, &x, &dy, Mode::Eval, &saved, w.as_deref(), &mut dx, (!mean_only).then_some(&mut dw[..]), Some(&mut db[..]), &o, &BatchTuning::tiny(8)).unwrap();
                let mut dx_ref = vec![0.0; l.len()];
                let (mut dw_ref, mut db_ref) = (vec![0.0; ch], vec![0.0; ch]);
                match norm {
                    BatchNorm::Spec(spec) => {
                        batch::backward(spec, Accum::F64, l, &x64, &dy64, Mode::Eval, &st_ref, w64.as_deref(), &mut dx_ref, Some(&mut dw_ref), Some(&mut db_ref)).unwrap();
                    }
                    BatchNorm::MeanOnly => {
                        mean_only::backward(Accum::F64, l, &dy64, Mode::Eval, &mut dx_ref, Some(&mut db_ref)).unwrap();
                    }
                }
                let (e, at) = ulp_err(&dx, &dx_ref, &|_| 0.0);
                assert!(e <= 1.0, "{what}: eval dx {e} ulp at {at}: {:?} vs {}", dx[at], dx_ref[at]);
                let (e, at) = ulp_err(&db, &db_ref, &|_| 0.0);
                assert!(e <= 1.0, "{what}: eval dbias {e} ulp at {at}");
                if !mean_only {
                    let (e, at) = ulp_err(&dw, &dw_ref, &|c| 2f64.powi(-18) * channel_idx(&l, c).iter().map(|&i| (dy64[i] * yhat[i]).abs()).sum::<f64>());
                    assert!(e <= 1.0, "{what}: eval dweight {e} ulp at {at}: {:?} vs {}", dw[at], dw_ref[at]);
                }
                // Without parameter gradients the backward skips its reductions: same dx.
                let mut dx2 = vec![f16::ZERO; l.len()];
                bcpu::backward(norm, l, &x, &dy, Mode::Eval, &saved, w.as_deref(), &mut dx2, None, None, &o, &BatchTuning::tiny(8)).unwrap();
                assert_eq!(dx2, dx, "{what}");
            }
        }
    }
}

/// Edge channels: all zero, +-65504 (fp16 limit), NaN and +-Inf (the channel's train output and
/// running statistics are NaN, the others are untouched), bf16 near 3e38 and near 1e-39.
#[test]
fn edge_channels() {
    let l = Layout::Nchw { n: 3, c: 6, h: 2, w: 4 };
    let m = l.per_channel();
    let mut rng = Rng(5);
    let mut x: Vec<f16> = gen(&mut rng, l.len(), gauss(0.0, 1.0));
    let idx: Vec<Vec<usize>> = (0..6).map(|c| channel_idx(&l, c)).collect();
    for &i in &idx[0] {
        x[i] = f16::ZERO;
    }
    for (j, &i) in idx[1].iter().enumerate() {
        x[i] = f16::from_f64(if j % 3 == 0 { 65504.0 } else { -65504.0 });
    }
    x[idx[2][5]] = f16::NAN;
    x[idx[3][0]] = f16::INFINITY;
    x[idx[4][m - 1]] = f16::NEG_INFINITY;
    for (j, &i) in idx[5].iter().enumerate() {
        x[i] = f16::from_f64(60000.0 + 8.0 * (j % 5) as f64);
    }
    for (si, norm) in specs(m).into_iter().enumerate() {
        {
            let mut c = case(l, gauss(0.0, 1.0));
            let off = si % 2;
            c.off = off;
            c.chunk = 8;
            let mut xb = vec![f16::ZERO; off];
            xb.extend_from_slice(&x);
            check_given::<f16>(&norm, &c, &xb, 21);
        }
    }
    let mut xb: Vec<bf16> = gen(&mut rng, l.len(), gauss(0.0, 1.0));
    for (j, &i) in idx[0].iter().enumerate() {
        xb[i] = bf16::from_f64(3.0e38 * if j % 2 == 0 { 1.0 } else { -0.7 });
    }
    for (j, &i) in idx[1].iter().enumerate() {
        xb[i] = bf16::from_f64(1.0e-39 * (1.0 + (j % 7) as f64));
    }
    for (j, &i) in idx[2].iter().enumerate() {
        xb[i] = bf16::from_f64(1.0e37 + 1.0e35 * (j % 3) as f64);
    }
    for norm in specs(m) {
        check_given::<bf16>(&norm, &case(l, gauss(0.0, 1.0)), &xb, 22);
    }
}

/// Channels of bf16 values below 2^-126 (fp32 subnormals: rescue exponent < -126) without a bias,
/// so that the tiny centred outputs themselves are compared, for every kind.
#[test]
fn subnormal_channels_without_bias() {
    let l = Layout::Nchw { n: 2, c: 2, h: 2, w: 4 };
    let mut rng = Rng(41);
    let x: Vec<bf16> = (0..l.len()).map(|_| bf16::from_f64(1e-39 * (2.0 + rng.normal()))).collect();
    let dy: Vec<bf16> = gen(&mut rng, l.len(), gauss(0.0, 1.0));
    for norm in specs(l.per_channel()) {
        let c = Case { bias: false, weight: false, chunk: 8, ..case(l, gauss(0.0, 1.0)) };
        let k = run_kernels(&norm, &c, &x, &dy, None, None, &RunningStats::new(2), &opts(Order::Fwd));
        let (y_ref, _) = ref_forward(&norm, l, &to64(&x), None, None, Mode::Train, Some(&mut RunningStats::new(2)));
        let (e, at) = ulp_err(&k.y, &y_ref, &|_| 0.0);
        assert!(e <= 1.0, "{}: {e} ulp at {at}: {:?} vs {}", name(&norm), k.y[at], y_ref[at]);
    }
}

/// check_case with the given input (the first `c.off` elements are padding).
fn check_given<T: H>(norm: &BatchNorm, c: &Case, xb: &[T], seed: u64) {
    // Route through check_case's machinery by regenerating only dy, w and b.
    let l = c.layout;
    let ch = l.channels();
    let mut rng = Rng(seed);
    let dyb: Vec<T> = gen(&mut rng, l.len() + c.off, gauss(0.0, 1.0));
    let mean_only = *norm == BatchNorm::MeanOnly;
    let w: Option<Vec<T>> = (!mean_only).then(|| gen(&mut rng, ch, gauss(1.0, 0.5)));
    let b: Vec<T> = gen(&mut rng, ch, gauss(0.0, 0.5));
    let (x, dy) = (&xb[c.off..], &dyb[c.off..]);
    let run0 = RunningStats::new(ch);
    let what = format!("edge {} {:?} off={}", name(norm), T::DT, c.off);
    let k = run_kernels(norm, c, x, dy, w.as_deref(), Some(&b), &run0, &opts(Order::Rev));
    let (x64, dy64, w64, b64) = (to64(x), to64(dy), w.as_deref().map(to64), to64(&b));
    let mut run_ref = run0.clone();
    let (y_ref, st_ref) = ref_forward(norm, l, &x64, w64.as_deref(), Some(&b64), Mode::Train, Some(&mut run_ref));
    let slack = bounds::batch_forward_slack(norm, &l, &y_ref, Some(&b64));
    let (e, at) = ulp_err(&k.y, &y_ref, &|i| slack[i]);
    assert!(e <= 1.0, "{what}: forward {e} ulp at {at} (channel {}): {:?} vs {}", (at / l.spatial()) % ch, k.y[at], y_ref[at]);
    for (i, (g, r)) in k.run.mean.iter().zip(&run_ref.mean).chain(k.run.spread.iter().zip(&run_ref.spread)).enumerate() {
        assert!(r.is_nan() == g.is_nan() && (r.is_nan() || (g - r).abs() <= 2f64.powi(-20) * r.abs() + 1e-12), "{what}: running value {i}: {g} vs {r}");
    }
    let mut dx_ref = vec![0.0; l.len()];
    let mut db_ref = vec![0.0; ch];
    match norm {
        BatchNorm::Spec(spec) => batch::backward(spec, Accum::F64, l, &x64, &dy64, Mode::Train, &st_ref, w64.as_deref(), &mut dx_ref, None, Some(&mut db_ref)).map(|_| ()).unwrap(),
        BatchNorm::MeanOnly => mean_only::backward(Accum::F64, l, &dy64, Mode::Train, &mut dx_ref, Some(&mut db_ref)).map(|_| ()).unwrap(),
    }
    // dx: NaN exactly where the reference is NaN; elsewhere within the channel bound.
    for c in 0..ch {
        let idx = channel_idx(&l, c);
        let scale = idx.iter().filter(|&&i| dx_ref[i].is_finite()).map(|&i| dx_ref[i].abs()).fold(0.0, f64::max);
        for &i in &idx {
            let (g, r) = (k.dx[i].to64(), dx_ref[i]);
            if r.is_nan() || g.is_nan() {
                assert!(r.is_nan() && g.is_nan(), "{what}: dx[{i}] channel {c}: {g} vs {r}");
                continue;
            }
            if r.abs() > T::DT.max_finite() {
                assert!(g.is_infinite() && g.signum() == r.signum() || g.abs() == T::DT.max_finite(), "{what}: dx[{i}] channel {c}: {g} vs {r} (beyond the range)");
                continue;
            }
            let err = ((g - r).abs() - 2f64.powi(-14) * scale).max(0.0) / T::DT.ulp(r);
            assert!(err <= 1.0, "{what}: dx[{i}] channel {c}: {g} vs {r} ({err} ulp)");
        }
    }
    let (e, at) = ulp_err(&k.db, &db_ref, &|_| 0.0);
    assert!(e <= 1.0, "{what}: dbias {e} ulp at {at}");
}

/// Typed errors: k > 32, k > m, bad lengths, eval without running statistics, an unbiased
/// running variance over one element, a weight for mean-only BN, bad momentum; the kernels'
/// names match the CPU launcher's table.
#[test]
fn typed_errors_and_kernel_list() {
    assert_eq!(bcpu::kernel_names(), list::batch_names());
    let o = EmuOptions::default();
    let t = BatchTuning::DEFAULT;
    let l = Layout::Nchw { n: 2, c: 3, h: 2, w: 3 };
    let x = vec![f16::ONE; 36];
    let mut y = vec![f16::ZERO; 36];
    let fwd = |norm: BatchNorm, l: Layout, x: &[f16], y: &mut [f16], w: Option<&[f16]>, mode: Mode, run: Option<&mut RunningStats>| {
        bcpu::forward(&norm, l, x, w, None, y, mode, run, None, &o, &t)
    };
    let s = |spec| BatchNorm::Spec(spec);
    let mut x120 = vec![f16::ONE; 120];
    let e = fwd(BatchNorm::Spec(NormSpec::topk(33, 0.0)), Layout::Nc { n: 40, c: 3 }, &x120.clone(), &mut x120, None, Mode::Train, None).unwrap_err();
    assert_eq!(e, KernelError::TopKTooLarge { k: 33, max: 32 });
    let mut l_small = vec![f16::ONE; 12];
    assert_eq!(fwd(s(NormSpec::topk(5, 0.0)), Layout::Nc { n: 4, c: 3 }, &l_small.clone(), &mut l_small, None, Mode::Train, None).unwrap_err(), KernelError::Norm(NormError::InvalidK { k: 5, n: 4 }));
    assert_eq!(fwd(s(NormSpec::layer(1e-5)), l, &x[..35], &mut y, None, Mode::Train, None).unwrap_err(), KernelError::Norm(NormError::Length { what: "input", expected: 36, got: 35 }));
    assert_eq!(fwd(s(NormSpec::layer(1e-5)), l, &x, &mut y, Some(&[f16::ONE; 2]), Mode::Train, None).unwrap_err(), KernelError::Norm(NormError::Length { what: "weight", expected: 3, got: 2 }));
    assert!(matches!(fwd(s(NormSpec::layer(1e-5)), l, &x, &mut y, None, Mode::Eval, None).unwrap_err(), KernelError::Norm(NormError::Unsupported { .. })));
    assert!(matches!(fwd(BatchNorm::MeanOnly, l, &x, &mut y, Some(&[f16::ONE; 3]), Mode::Train, None).unwrap_err(), KernelError::Norm(NormError::Unsupported { .. })));
    let mut run = RunningStats::new(3).with_momentum(1.5);
    assert_eq!(fwd(s(NormSpec::layer(1e-5)), l, &x, &mut y, None, Mode::Train, Some(&mut run)).unwrap_err(), KernelError::Norm(NormError::OutOfRange { what: "momentum", range: "[0, 1]", value: 1.5 }));
    let one = Layout::Nc { n: 1, c: 36 };
    let mut run = RunningStats::new(36);
    let e = fwd(s(NormSpec::layer(1e-5)), one, &x, &mut y, None, Mode::Train, Some(&mut run)).unwrap_err();
    assert!(e.to_string().contains("m = 1"), "{e}");
    assert_eq!(run.updates, 0);
    assert!(fwd(s(NormSpec::layer(1e-5)), one, &x, &mut y, None, Mode::Train, None).is_ok());
    let saved = Saved::new(2);
    let mut dx = vec![f16::ZERO; 36];
    let e = bcpu::backward(&s(NormSpec::l1(1e-5)), l, &x, &x, Mode::Train, &saved, None, &mut dx, None, None, &o, &t).unwrap_err();
    assert_eq!(e, KernelError::Norm(NormError::Length { what: "stats", expected: 3, got: 2 }));
}
