//! The fused kernels against the generic kernel, bit for bit: outputs, statistics and
//! counters, for every kind and centring, f32/f16/bf16 storage, with and without weight and
//! bias, at every explicit-SIMD level this CPU has, on random rows of many lengths (tails of
//! every size, rows shorter than one 16-lane group) and edge rows (zeros, signed zeros,
//! constants, huge and tiny magnitudes, subnormals, NaN, infinities, ties, outputs that
//! overflow the storage type, NaN weights).

use half::{bf16, f16};

use super::{bound_before_difference, rows_at, EarlyLines, Level, FROM_SAVED, IN_REGISTERS, L1_AHEAD, PIPELINED_TASKS, RESCUED, UNPIPELINED, UNSTAGED};
use crate::element::Element;
use crate::row::kernel::Scratch;
use crate::row::simd::Storage;
use crate::row::stats::{RowCtx, RowStats};
use crate::spec::{ConstMode, NormKind, NormSpec};

/// The levels to test: those this CPU runs (the generic kernel is the reference).
pub(crate) fn levels() -> Vec<Level> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if crate::row::has_avx2() {
            v.push(Level::Avx2);
            if is_x86_feature_detected!("avx512f") {
                v.push(Level::Avx512);
                if is_x86_feature_detected!("avx512bf16") && is_x86_feature_detected!("avx512dq") {
                    v.push(Level::Avx512Bf16);
                }
            }
        }
    }
    if v.is_empty() {
        eprintln!("no explicit-SIMD level on this CPU: the fused kernels never run here");
    }
    v
}

/// The test data's random numbers (also `fused_backward`'s tests): SplitMix64 from a seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        crate::nu::rng::splitmix64(&mut self.0)
    }
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(crate) fn normal(&mut self) -> f64 {
        let (u1, u2) = (1.0 - self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Row `r` of a test matrix: one of many shapes of data, chosen by `r`.
fn edge_row(rng: &mut Rng, r: usize, n: usize, max: f64) -> Vec<f64> {
    let mut v: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    match r % 16 {
        0 => {}
        1 => v.iter_mut().for_each(|x| *x = 0.0),
        2 => v.iter_mut().for_each(|x| *x = if rng.uniform() < 0.5 { 0.0 } else { -0.0 }),
        3 => v.iter_mut().for_each(|x| *x = 3.25),
        4 => v.iter_mut().for_each(|x| *x = 1000.0 + *x * 1e-3),
        5 => v.iter_mut().for_each(|x| *x *= 1e-6),
        6 => v.iter_mut().for_each(|x| *x *= 1e-41), // f32 subnormals (0 in f16/bf16 storage)
        7 => v.iter_mut().for_each(|x| *x = max * (2.0 * rng.uniform() - 1.0)),
        8 => v[rng.below(n)] = f64::NAN,
        9 => v[rng.below(n)] = f64::INFINITY,
        10 => v[rng.below(n)] = f64::NEG_INFINITY,
        11 => v.iter_mut().for_each(|x| *x = (x.abs() * 2.0).round() * 0.5), // ties for Top-k
        12 => v.iter_mut().for_each(|x| *x = if rng.uniform() < 0.5 { 1.0 } else { -1.0 }),
        13 => v.iter_mut().for_each(|x| *x = *x * 1e4 - 5e4),
        14 => {
            // one large outlier: huge outputs
            v[rng.below(n)] = 3e4;
        }
        _ => v.iter_mut().for_each(|x| *x *= 1e-3),
    }
    v
}

fn specs(n: usize) -> Vec<NormSpec> {
    let mut ks = vec![1, 2, 8, 16, 17, n.div_ceil(3), n];
    ks.retain(|&k| k <= n);
    ks.dedup();
    let mut out = Vec::new();
    for (i, &k) in ks.iter().enumerate() {
        for (kind, centred) in [
            (NormKind::Rms, false),
            (NormKind::Layer, true),
            (NormKind::UnitL2, false),
            (NormKind::L1, true),
            (NormKind::L1, false),
            (NormKind::LInf, true),
            (NormKind::LInf, false),
            (NormKind::TopK { k }, true),
            (NormKind::TopK { k }, false),
        ] {
            let is_topk = matches!(kind, NormKind::TopK { .. });
            if i > 0 && !is_topk {
                continue;
            }
            for eps in [1e-5, 0.0, 1e-30] {
                let constant = if is_topk && n > 300 { ConstMode::One } else { ConstMode::Exact };
                out.push(NormSpec { kind, centred, eps, constant });
            }
        }
    }
    out
}

fn stats_bits(s: &RowStats) -> (u64, u64, u64, i32, bool) {
    (s.mean_hi.to_bits(), s.mean_lo.to_bits(), s.rscale.to_bits(), s.exp2, s.clamped)
}

/// Every spec and affine choice on `x` (`rows` rows of n), generic against every level.
fn compare<S: Storage>(x: &[S], n: usize, w: &[f32], b: &[f32], what: &str) -> usize {
    specs(n).iter().map(|spec| compare_spec(spec, x, n, w, b, what)).sum()
}

/// [`compare`] for one spec.
fn compare_spec<S: Storage>(spec: &NormSpec, x: &[S], n: usize, w: &[f32], b: &[f32], what: &str) -> usize {
    let rows = x.len() / n;
    let mut checked = 0;
    let ctx = crate::row::ctx::<f32>(spec, n).unwrap();
    for (wo, bo) in [(None, None), (Some(w), None), (None, Some(b)), (Some(w), Some(b))] {
        let mut scr = Scratch::<f32>::new(n);
        let mut y0 = vec![S::default(); x.len()];
        let mut s0 = vec![RowStats::default(); rows];
        let c0 = crate::row::forward_rows::<S, f32>(&ctx, x, &mut y0, &mut s0, wo, bo, &mut scr);
        // Streaming stores (row::stream_output) start at the output's first aligned address:
        // with the buffer as allocated and shifted by 5 values, so heads of every length occur.
        // Streamed rows staged and written out whole (`staged`), or streamed group by group.
        let ways = |l| [(l, false, 0, true), (l, true, 0, true), (l, true, 5, true), (l, true, 0, false), (l, true, 5, false)];
        for (level, stream, shift, staged) in levels().into_iter().flat_map(ways) {
            UNSTAGED.with(|u| u.set(!staged));
            let mut scr = Scratch::<f32>::new(n);
            let mut buf = vec![S::default(); x.len() + shift];
            let y1 = &mut buf[shift..];
            let mut s1 = vec![RowStats::default(); rows];
            let ctx = RowCtx { stream_output: stream, ..ctx };
            let c1 = rows_at::<S>(level, &ctx, x, y1, &mut s1, wo, bo, &mut scr);
            UNSTAGED.with(|u| u.set(false));
            let ctx_s = || format!("{what} {} n={n} {spec:?} w={} b={} {level:?} stream={stream} shift={shift} staged={staged}", S::DTYPE, wo.is_some(), bo.is_some());
            assert_eq!(c0, c1, "{}: counters", ctx_s());
            for r in 0..rows {
                assert_eq!(stats_bits(&s0[r]), stats_bits(&s1[r]), "{}: stats of row {r}", ctx_s());
            }
            for (j, (a, e)) in y1.iter().zip(&y0).enumerate() {
                assert!(a.to_f64().to_bits() == e.to_f64().to_bits(), "{}: y[{j}] = {:?}, generic {:?}", ctx_s(), a, e);
            }
            checked += 1;
        }
    }
    checked
}

fn affine(rng: &mut Rng, n: usize) -> (Vec<f64>, Vec<f64>) {
    let w = (0..n).map(|_| 1.0 + 0.1 * rng.normal()).collect();
    let b = (0..n).map(|_| 0.1 * rng.normal()).collect();
    (w, b)
}

/// Weights and bias as the storage type holds them, widened to f32 as `row::forward` does.
fn in_storage<S: Element>(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| S::from_f64(x).to_f32()).collect()
}

fn case<S: Storage>(n: usize, seed: u64) -> usize {
    let mut rng = Rng(seed);
    let rows = 16;
    let max = S::DTYPE.max_finite().min(1e300);
    let x: Vec<S> = (0..rows).flat_map(|r| edge_row(&mut rng, r, n, max)).map(S::from_f64).collect();
    let (w, b) = affine(&mut rng, n);
    compare(&x, n, &in_storage::<S>(&w), &in_storage::<S>(&b), "edge rows")
}

fn fused_equals_generic_on_every_length() {
    let mut checked = 0;
    for (i, n) in [1usize, 2, 3, 7, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 255, 256, 1000, 1031].into_iter().enumerate() {
        checked += case::<f32>(n, 10 + i as u64);
        checked += case::<f16>(n, 100 + i as u64);
        checked += case::<bf16>(n, 1000 + i as u64);
    }
    if !levels().is_empty() {
        assert!(checked > 5000, "{checked} comparisons");
    }
}

/// Weights that make outputs overflow the storage type (counted as non-finite), zero and NaN
/// weights (inf * 0 and NaN outputs: the bf16 rounding's NaN case), an infinite bias.
fn fused_equals_generic_with_extreme_affine() {
    for n in [40usize, 64, 1024] {
        let mut rng = Rng(7 + n as u64);
        let x: Vec<f64> = (0..4 * n).map(|i| if i % 97 == 5 { 3e4 } else { rng.normal() }).collect();
        for (label, w, b) in [
            ("huge weight", vec![60000.0; n], vec![0.0; n]),
            ("zero and huge weights", (0..n).map(|j| if j % 3 == 0 { 0.0 } else { 1e30 }).collect(), vec![1.0; n]),
            ("NaN weight", (0..n).map(|j| if j == n / 2 { f64::NAN } else { 1.0 }).collect(), vec![0.0; n]),
            ("infinite bias", vec![1.0; n], (0..n).map(|j| if j == 3 { f64::INFINITY } else { 0.0 }).collect()),
        ] {
            compare::<f32>(&x.iter().map(|&v| v as f32).collect::<Vec<_>>(), n, &in_storage::<f32>(&w), &in_storage::<f32>(&b), label);
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f64(v)).collect();
            compare::<f16>(&xh, n, &in_storage::<f16>(&w), &in_storage::<f16>(&b), label);
            let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
            compare::<bf16>(&xb, n, &in_storage::<bf16>(&w), &in_storage::<bf16>(&b), label);
        }
    }
}

/// Outputs that are f32 subnormals: bf16 holds them (its exponent range is f32's), and the
/// AVX512_BF16 rounding reads them as zero, so the registers holding one must take the
/// integer rounding (`simd::avx512::Avx512Bf16`). Tiny weights on some columns, and a row whose
/// one huge value makes every other output tiny.
fn fused_rounds_subnormal_outputs_like_generic() {
    for n in [16usize, 40, 64, 1024] {
        let mut rng = Rng(11 + n as u64);
        let mut x: Vec<f64> = (0..4 * n).map(|_| rng.normal()).collect();
        x[2 * n + 3] = 1e38;
        let w: Vec<f64> = (0..n).map(|j| if j % 5 == 0 { 3e-39 } else if j % 7 == 0 { -1e-41 } else { 1.0 }).collect();
        let b = vec![0.0; n];
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
        compare::<bf16>(&xb, n, &in_storage::<bf16>(&w), &in_storage::<bf16>(&b), "subnormal outputs");
        compare::<f32>(&x.iter().map(|&v| v as f32).collect::<Vec<_>>(), n, &in_storage::<f32>(&w), &in_storage::<f32>(&b), "subnormal outputs");
    }
}

/// f32 rows whose statistics overflow or underflow f32 (the generic kernel rescales them): the
/// fused kernel hands exactly those rows over, and keeps the others.
fn fused_hands_rescued_rows_to_the_generic_kernel() {
    let n = 100;
    let mut rng = Rng(3);
    let mut x: Vec<f32> = (0..6 * n).map(|_| rng.normal() as f32).collect();
    x[n..2 * n].iter_mut().for_each(|v| *v *= 1e30); // sum of squares overflows
    x[3 * n..4 * n].iter_mut().for_each(|v| *v *= 1e-30); // sum of squares underflows
    x[5 * n + 7] = f32::MAX;
    let (w, b) = affine(&mut rng, n);
    compare::<f32>(&x, n, &in_storage::<f32>(&w), &in_storage::<f32>(&b), "rescued rows");
}

/// Outputs right at the storage type's largest finite value: the fused kernel skips its
/// non-finite check when a bound from the statistics says no output can overflow, so the
/// bound must hold exactly there. One-hot rows make the bound tight (the only nonzero value
/// is as large as the root of the sum of squares, or the sum of |z|); the weight is scaled so
/// that the largest output lands just below, at, and just above the limit.
fn fused_counts_overflowing_outputs_like_generic() {
    fn at_limit<S: Storage>() {
        let limit = f32::from_bits(S::MAX_FINITE_BITS) as f64;
        for n in [16usize, 64, 100, 1024] {
            let mut rng = Rng(n as u64);
            let mut x = vec![0.0f64; 3 * n];
            x[5] = 3.0; // one-hot row
            x[n..2 * n].iter_mut().for_each(|v| *v = rng.normal());
            x[2 * n..].iter_mut().for_each(|v| *v = 1.0 + 1e-3 * rng.normal());
            x[2 * n + 1] = -40.0;
            let xs: Vec<S> = x.iter().map(|&v| S::from_f64(v)).collect();
            for spec in specs(n) {
                // The largest output with a unit weight, from the generic kernel.
                let ctx = crate::row::ctx::<f32>(&spec, n).unwrap();
                let mut y = vec![S::default(); xs.len()];
                let mut st = vec![RowStats::default(); 3];
                let ones = vec![1.0f32; n];
                crate::row::forward_rows::<S, f32>(&ctx, &xs, &mut y, &mut st, Some(&ones), None, &mut Scratch::new(n));
                let top = y.iter().map(|v| v.to_f64().abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
                if top == 0.0 {
                    continue;
                }
                for c in [0.999, 0.99999, 1.0, 1.00001, 1.001, 1.1] {
                    let w = vec![S::from_f64(c * limit / top).to_f32(); n];
                    let b = vec![0.0f32; n];
                    compare_spec::<S>(&spec, &xs, n, &w, &b, &format!("outputs at {c} x limit"));
                }
            }
        }
    }
    at_limit::<f32>();
    at_limit::<f16>();
    at_limit::<bf16>();
}

/// Ordinary rows (Gaussian, finite, moderate) take the fused path for every kind, centring,
/// k and storage type: none is handed to the generic kernel. The results would be the same
/// bits either way, so only this shows that, say, a Top-k threshold above the row's values
/// does not silently send every row to the slow path.
fn ordinary_rows_are_not_rescued() {
    for level in levels() {
        for n in [64usize, 100, 1024, 1031] {
            let mut rng = Rng(77 + n as u64);
            let x: Vec<f64> = (0..8 * n).map(|_| rng.normal()).collect();
            for spec in specs(n) {
                if spec.eps == 0.0 {
                    continue;
                }
                let ctx = crate::row::ctx::<f32>(&spec, n).unwrap();
                fn run<S: Storage>(level: Level, ctx: &RowCtx<f32>, x: &[f64], n: usize) -> usize {
                    let x: Vec<S> = x.iter().map(|&v| S::from_f64(v)).collect();
                    let mut y = vec![S::default(); x.len()];
                    let mut st = vec![RowStats::default(); x.len() / n];
                    let before = RESCUED.with(|r| r.get());
                    rows_at::<S>(level, ctx, &x, &mut y, &mut st, None, None, &mut Scratch::<f32>::new(n));
                    RESCUED.with(|r| r.get()) - before
                }
                for (dtype, rescued) in
                    [("f32", run::<f32>(level, &ctx, &x, n)), ("f16", run::<f16>(level, &ctx, &x, n)), ("bf16", run::<bf16>(level, &ctx, &x, n))]
                {
                    assert_eq!(rescued, 0, "{level:?} {dtype} n={n} {spec:?}: {rescued} of 8 rows rescued");
                }
            }
        }
    }
}

/// On AVX-512 and AVX2, Top-k rows of whole blocks take their mean with no branch on the data
/// (`in_registers`: `simd::top_k_avx512`, `simd::top_k_avx2`, the latter for rows of up to
/// `top_k_avx2::MAX_BLOCKS` blocks, and never for longer ones) unless they have too many
/// candidates: at least 90% of Gaussian rows of 1024 and 4096 at k = 1 and 8 (about 99% are
/// expected; at k = 16 the threshold, the smallest lane maximum, leaves more than 16
/// candidates in most rows), centred or not, in every storage type, with the generic kernel's
/// bits (`compare_spec`). A path that quietly always fell back would give the same bits, so
/// only this count shows that it runs. Constant rows (every lane marked) and rows of +-1
/// (hundreds of candidates) fall back, and also match.
fn top_k_rows_of_whole_blocks_select_without_branches() {
    let here: Vec<Level> = [Level::Avx512, Level::Avx2].into_iter().filter(|l| levels().contains(l)).collect();
    if here.is_empty() {
        eprintln!("no AVX2: the selection without branches never runs here");
        return;
    }
    fn run<S: Storage>(level: Level, n: usize, k: usize, centred: bool, x: &[f64]) -> (usize, usize) {
        let rows = x.len() / n;
        let (w, b) = affine(&mut Rng(7 + n as u64), n);
        let xs: Vec<S> = x.iter().map(|&v| S::from_f64(v)).collect();
        let spec = NormSpec { kind: NormKind::TopK { k }, centred, eps: 1e-5, constant: ConstMode::One };
        let ctx = crate::row::ctx::<f32>(&spec, n).unwrap();
        let mut y = vec![S::default(); xs.len()];
        let mut st = vec![RowStats::default(); rows];
        let before = IN_REGISTERS.with(|r| r.get());
        rows_at::<S>(level, &ctx, &xs, &mut y, &mut st, None, None, &mut Scratch::<f32>::new(n));
        let fast = IN_REGISTERS.with(|r| r.get()) - before;
        let checked = compare_spec::<S>(&spec, &xs, n, &in_storage::<S>(&w), &in_storage::<S>(&b), "top-k in registers");
        (fast, checked)
    }
    #[cfg(target_arch = "x86_64")]
    let avx2_longest = 64 * crate::row::simd::top_k_avx2::MAX_BLOCKS;
    #[cfg(not(target_arch = "x86_64"))]
    let avx2_longest = 0;
    for n in [1024usize, 4096] {
        let mut rng = Rng(4242 + n as u64);
        let gauss: Vec<f64> = (0..64 * n).map(|_| rng.normal()).collect();
        let mut odd: Vec<f64> = (0..4 * n).map(|_| rng.normal()).collect();
        odd[..n].iter_mut().for_each(|v| *v = 1.5);
        odd[n..2 * n].iter_mut().for_each(|v| *v = v.signum());
        for (level, k, centred) in here.iter().flat_map(|&l| [1usize, 8].into_iter().flat_map(move |k| [(l, k, true), (l, k, false)])) {
            for (dtype, (fast, checked)) in [
                ("f32", run::<f32>(level, n, k, centred, &gauss)),
                ("f16", run::<f16>(level, n, k, centred, &gauss)),
                ("bf16", run::<bf16>(level, n, k, centred, &gauss)),
            ] {
                if level == Level::Avx2 && n > avx2_longest {
                    assert_eq!(fast, 0, "{level:?} {dtype} n={n} k={k} centred={centred}: {fast} rows without branches");
                } else {
                    assert!(fast >= 58, "{level:?} {dtype} n={n} k={k} centred={centred}: {fast} of 64 rows in registers");
                }
                assert!(checked > 0);
            }
            for (dtype, (fast, _)) in [("f32", run::<f32>(level, n, k, centred, &odd)), ("bf16", run::<bf16>(level, n, k, centred, &odd))] {
                assert!(fast <= 2, "{level:?} {dtype} n={n} k={k} centred={centred}: {fast} of the 2 Gaussian rows (of 4) in registers");
            }
        }
    }
    // Rows of 1, 3 and 9 blocks: an odd block fills half of AVX2's last word of marks.
    for n in [64usize, 192, 576] {
        let mut rng = Rng(77 + n as u64);
        let gauss: Vec<f64> = (0..64 * n).map(|_| rng.normal()).collect();
        for (level, centred) in here.iter().flat_map(|&l| [(l, true), (l, false)]) {
            for (dtype, (fast, checked)) in [("f32", run::<f32>(level, n, 8, centred, &gauss)), ("bf16", run::<bf16>(level, n, 8, centred, &gauss))] {
                assert!(fast >= 32, "{level:?} {dtype} n={n} centred={centred}: {fast} of 64 rows in registers");
                assert!(checked > 0);
            }
        }
    }
}

/// Top-k on rows longer than one run of the candidate gather (64 mask words, 16384 values):
/// Gaussian rows, a constant row (every value a candidate) and rows with one or two outliers
/// far into the row, for both centrings and k across the lane-maxima range.
fn fused_equals_generic_on_long_top_k_rows() {
    for n in [4096usize, 4111, 8200, 16500] {
        let mut rng = Rng(500 + n as u64);
        let mut x: Vec<f64> = (0..4 * n).map(|_| rng.normal()).collect();
        x[n..2 * n].iter_mut().for_each(|v| *v = 2.5);
        x[2 * n + 4100] = 40.0;
        x[2 * n + 16390 % n] = -38.0;
        x[3 * n + 5000.min(n - 1)] = -35.0;
        x[3 * n + n - 3] = 36.0;
        let (w, b) = affine(&mut rng, n);
        let mut checked = 0;
        for k in [1usize, 2, 8, 16] {
            for centred in [true, false] {
                let spec = NormSpec { kind: NormKind::TopK { k }, centred, eps: 1e-5, constant: ConstMode::One };
                let xs: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                checked += compare_spec::<f32>(&spec, &xs, n, &in_storage::<f32>(&w), &in_storage::<f32>(&b), "long top-k rows");
                let xh: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
                checked += compare_spec::<bf16>(&spec, &xh, n, &in_storage::<bf16>(&w), &in_storage::<bf16>(&b), "long top-k rows");
            }
        }
        if !levels().is_empty() {
            assert!(checked > 0, "{checked} comparisons");
        }
    }
}

/// Centred Top-k on rows whose mean is large beside their spread, where `lo` (the mean of
/// `t = x - hi`, from the rounding of `hi`) is many ulps of `|t|`: the threshold is the k-th
/// largest of `fl(max |t| - |lo|)` over the lanes, and a threshold from `max |t|` alone, or
/// from `max |t| + |lo|`, drops the k-th largest `|z|` whenever it is a lane's largest `|t|`
/// with the sign of `lo`. None of these rows is rescued (that would hide the fused path).
fn fused_equals_generic_on_offset_top_k_rows() {
    fn run<S: Storage>(offset: f64, spread: f64) -> usize {
        let mut checked = 0;
        // Lengths that are not powers of two: there `hi = sum / n` rounds even when the sum of
        // 16-bit values is exact, so `lo` is nonzero in every type.
        // 960: whole blocks of 64, selected without branches on AVX2 and AVX-512 (`in_registers`).
        for n in [100usize, 960, 1000, 1031] {
            let mut rng = Rng(900 + n as u64);
            let x: Vec<S> = (0..64 * n).map(|_| S::from_f64(offset + spread * rng.normal())).collect();
            let (w, b) = affine(&mut rng, n);
            for k in [1usize, 2, 8, 16] {
                let spec = NormSpec { kind: NormKind::TopK { k }, centred: true, eps: 1e-5, constant: ConstMode::One };
                checked += compare_spec::<S>(&spec, &x, n, &in_storage::<S>(&w), &in_storage::<S>(&b), "offset top-k rows");
                let ctx = crate::row::ctx::<f32>(&spec, n).unwrap();
                for level in levels() {
                    let mut y = vec![S::default(); x.len()];
                    let mut st = vec![RowStats::default(); 64];
                    let before = RESCUED.with(|r| r.get());
                    rows_at::<S>(level, &ctx, &x, &mut y, &mut st, None, None, &mut Scratch::<f32>::new(n));
                    assert_eq!(RESCUED.with(|r| r.get()), before, "{level:?} {} n={n} k={k}: rows rescued", S::DTYPE);
                    let with_lo = st.iter().filter(|s| s.mean_lo != 0.0).count();
                    assert!(with_lo >= 32, "{} n={n}: only {with_lo} of 64 rows have lo != 0", S::DTYPE);
                }
            }
        }
        checked
    }
    let checked = run::<f32>(300.0, 0.05) + run::<f16>(24.0, 0.5) + run::<bf16>(6.0, 1.0);
    if !levels().is_empty() {
        assert!(checked > 0, "{checked} comparisons");
    }
}

/// `bound_before_difference(a, v)`: every f32 `u` with `|fl(u - v)| >= a` has `|u| >= m`,
/// checked on the values where it could fail (u within a few ulps of `a + v`, `a - v`, `v - a`
/// and their negations), for bounds `a` and corrections `v` of every scale, subnormals
/// included (Top-k's `(t0, lo)`; two seeds, from when it had a second use with a test each);
/// and the bound is not needlessly loose (at least `a (1 - 2^-21) - |v| - 2^-147`).
fn top_k_bound_before_difference_keeps_every_candidate() {
    for (seed, least) in [(77u64, 100_000), (78, 50_000)] {
        let mut rng = Rng(seed);
        let mut checked = 0;
        for case in 0..20_000 {
            let a = match case % 4 {
                0 => f32::from_bits(1 + rng.below(1 << 12) as u32),
                _ => (rng.normal().abs() * 2f64.powi(rng.below(200) as i32 - 100)) as f32,
            };
            let v = (rng.normal() * a as f64 * 2f64.powi(-(rng.below(40) as i32))) as f32;
            let Some(m) = bound_before_difference(a, v) else {
                continue;
            };
            assert!(m > 0.0 && (m as f64) >= a as f64 * (1.0 - 2f64.powi(-21)) - (v as f64).abs() - 2f64.powi(-147), "a {a:e} v {v:e}: m {m:e}");
            for centre in [a + v, a - v, -(a + v), -(a - v), v + a, v - a] {
                for d in -4i32..=4 {
                    let u = f32::from_bits((centre.to_bits() as i32 + d) as u32);
                    if u.is_finite() && (u - v).abs() >= a {
                        assert!(u.abs() >= m, "a {a:e} v {v:e}: u {u:e} has |u - v| = {:e} >= a but |u| < m = {m:e}", (u - v).abs());
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > least, "seed {seed}: {checked} values checked");
    }
}

fn early_lines_only_for_four_byte_rows_within_the_row() {
    let spec = NormSpec::new(NormKind::TopK { k: 8 }, 1e-5);
    let ctx = crate::row::ctx::<f32>(&spec, 1024).unwrap();
    let streamed = RowCtx { stream_output: true, ..ctx };
    let ahead = std::ptr::null();
    let counts = |l: EarlyLines| (l.ahead_lines, l.out_lines);
    // f32 rows of 1024 (64 lines): capped at 16 lines ahead and 32 output lines.
    let y = vec![0f32; 1024];
    assert_eq!(counts(EarlyLines::new(&ctx, &y, ahead, true)), (EarlyLines::AHEAD_LINES, EarlyLines::OUT_LINES));
    assert_eq!((EarlyLines::AHEAD_LINES, EarlyLines::OUT_LINES), (16, 32));
    // Streamed output: no output line pulled into the caches; switched off: nothing.
    assert_eq!(counts(EarlyLines::new(&streamed, &y, ahead, true)), (16, 0));
    assert_eq!(counts(EarlyLines::new(&ctx, &y, ahead, false)), (0, 0));
    // Short rows: whole lines of the row only (100 f32 = 400 bytes: 6 lines; 15 f32: none).
    assert_eq!(counts(EarlyLines::new(&ctx, &y[..100], ahead, true)), (6, 6));
    assert_eq!(counts(EarlyLines::new(&ctx, &y[..15], ahead, true)), (0, 0));
    // 16-bit rows ask for nothing.
    assert_eq!(counts(EarlyLines::new(&ctx, &vec![f16::ZERO; 4096], ahead, true)), (0, 0));
    assert_eq!(counts(EarlyLines::new(&ctx, &vec![bf16::ZERO; 4096], ahead, true)), (0, 0));
}

/// Centred bf16 Top-k rows on AVX2 store their output from the `x - hi` their statistics pass
/// saved (`row::SAVED_CENTRED`, `Storage::SAVES_CENTRED`), with the generic kernel's bits; no
/// other storage does, nor an uncentred row, nor one streamed group by group. The same bits would come from
/// the row itself, so only the count shows that the saved values are read.
fn bf16_top_k_stores_from_saved_centred_values() {
    if !levels().contains(&Level::Avx2) {
        eprintln!("no AVX2: the saved centred values are never read here");
        return;
    }
    fn run<S: Storage>(n: usize, centred: bool, stream: bool, x: &[f64]) -> usize {
        let rows = x.len() / n;
        let (w, b) = affine(&mut Rng(11 + n as u64), n);
        let xs: Vec<S> = x.iter().map(|&v| S::from_f64(v)).collect();
        let spec = NormSpec { kind: NormKind::TopK { k: 8 }, centred, eps: 1e-5, constant: ConstMode::One };
        let ctx = RowCtx { stream_output: stream, ..crate::row::ctx::<f32>(&spec, n).unwrap() };
        let mut y = vec![S::default(); xs.len()];
        let mut st = vec![RowStats::default(); rows];
        let wv: Vec<f32> = w.iter().map(|&v| v as f32).collect();
        let before = FROM_SAVED.with(|r| r.get());
        // Streamed rows written group by group (a staged row is computed at its start).
        UNSTAGED.with(|u| u.set(stream));
        rows_at::<S>(Level::Avx2, &ctx, &xs, &mut y, &mut st, Some(&wv), None, &mut Scratch::<f32>::new(n));
        UNSTAGED.with(|u| u.set(false));
        let saved = FROM_SAVED.with(|r| r.get()) - before;
        assert!(compare_spec::<S>(&spec, &xs, n, &in_storage::<S>(&w), &in_storage::<S>(&b), "top-k from saved") > 0);
        saved
    }
    for n in [64usize, 100, 1024, 1000] {
        let mut rng = Rng(97 + n as u64);
        let x: Vec<f64> = (0..16 * n).map(|_| rng.normal() * 3.0 + 0.5).collect();
        assert_eq!(run::<bf16>(n, true, false, &x), 16, "bf16 n={n}: every Gaussian row from its saved values");
        assert_eq!(run::<bf16>(n, false, false, &x), 0, "bf16 n={n} uncentred");
        assert_eq!(run::<bf16>(n, true, true, &x), 0, "bf16 n={n} streamed unstaged");
        assert_eq!(run::<f16>(n, true, false, &x), 0, "f16 n={n}");
        assert_eq!(run::<f32>(n, true, false, &x), 0, "f32 n={n}");
    }
}

/// Top-k's rows written through the caches run each store pass after the next row's
/// statistics (`pipelined_rows`), with the bits of the rows run one by one and of the generic
/// kernel: whichever rows need a rescue (the first, two in a row, the last), whichever pass
/// sums the next row (the statistics pass, or, for bf16 rows from saved values, the store pass
/// run after it), centred or not, k within and beyond the lane maxima's reach.
fn pipelined_top_k_rows_equal_rows_one_by_one() {
    /// Output bits, statistics bits, counters, and the tasks run pipelined.
    type Run = (Vec<u64>, Vec<(u64, u64, u64, i32, bool)>, crate::Counters, usize);
    fn run<S: Storage>(level: Level, spec: &NormSpec, x: &[S], n: usize, w: &[f32], one_by_one: bool) -> Run {
        let rows = x.len() / n;
        let ctx = crate::row::ctx::<f32>(spec, n).unwrap();
        let mut y = vec![S::default(); x.len()];
        let mut st = vec![RowStats::default(); rows];
        let before = PIPELINED_TASKS.with(|q| q.get());
        UNPIPELINED.with(|u| u.set(one_by_one));
        let c = rows_at::<S>(level, &ctx, x, &mut y, &mut st, Some(w), None, &mut Scratch::<f32>::new(n));
        UNPIPELINED.with(|u| u.set(false));
        let tasks = PIPELINED_TASKS.with(|q| q.get()) - before;
        (y.iter().map(|v| v.to_f64().to_bits()).collect(), st.iter().map(stats_bits).collect(), c, tasks)
    }
    fn each<S: Storage>(n: usize) -> usize {
        let rows = 10;
        let mut rng = Rng(500 + n as u64);
        let mut x: Vec<f64> = (0..rows * n).map(|_| rng.normal() * 2.0 + 0.25).collect();
        // Rescued rows: the first, the fourth and fifth, the last.
        for (r, bad) in [(0, f64::NAN), (3, f64::INFINITY), (4, f64::NAN), (rows - 1, f64::NEG_INFINITY)] {
            x[r * n + rng.below(n)] = bad;
        }
        let xs: Vec<S> = x.iter().map(|&v| S::from_f64(v)).collect();
        let (w, b) = affine(&mut rng, n);
        let wv = in_storage::<S>(&w);
        let mut checked = 0;
        for k in [1usize, 8, 17] {
            if k > n {
                continue;
            }
            for centred in [true, false] {
                let spec = NormSpec { kind: NormKind::TopK { k }, centred, eps: 1e-5, constant: ConstMode::One };
                for level in levels() {
                    let what = format!("{} n={n} k={k} centred={centred} {level:?}", S::DTYPE);
                    let (y0, s0, c0, t0) = run::<S>(level, &spec, &xs, n, &wv, true);
                    let (y1, s1, c1, t1) = run::<S>(level, &spec, &xs, n, &wv, false);
                    // Pipelined on AVX2 only (`rows`).
                    let want = usize::from(level == Level::Avx2);
                    assert_eq!((t0, t1), (0, want), "{what}: pipelined tasks one by one, pipelined");
                    assert_eq!(c0, c1, "{what}: counters");
                    assert_eq!(s0, s1, "{what}: stats");
                    assert_eq!(y0, y1, "{what}: outputs");
                    checked += 1;
                }
                // And both against the generic kernel.
                checked += compare_spec::<S>(&spec, &xs, n, &wv, &in_storage::<S>(&b), "pipelined");
            }
        }
        checked
    }
    for n in [16usize, 64, 100, 1000, 1024] {
        let checked = each::<bf16>(n) + each::<f16>(n) + each::<f32>(n);
        assert!(levels().is_empty() || checked > 0, "n={n}: nothing compared");
    }
}

/// Centred L1 rows run their statistics in one pass where the rows before computed their sum
/// and lo sum (`l1_pass_ahead`): every row of a task but its last, at every level, in every
/// storage type, with the generic kernel's bits (`compare_spec`; also through a rescued row in
/// the middle of the task, whose neighbours keep the pipeline). A pipeline that quietly never
/// ran would give the same bits, so only this count shows that it does. Uncentred L1 never
/// takes it.
fn centred_l1_rows_take_one_pass() {
    for n in [1usize, 17, 64, 1000, 1024] {
        let rows = 9;
        let mut rng = Rng(300 + n as u64);
        let gauss: Vec<f64> = (0..rows * n).map(|_| rng.normal()).collect();
        let mut nan_row = gauss.clone();
        nan_row[4 * n + n / 2] = f64::NAN;
        for (label, x, expected_rescues) in [("gaussian", &gauss, 0), ("a NaN in row 4", &nan_row, 1)] {
            for centred in [true, false] {
                let spec = NormSpec { kind: NormKind::L1, centred, eps: 1e-5, constant: ConstMode::Exact };
                let ctx = crate::row::ctx::<f32>(&spec, n).unwrap();
                fn run<S: Storage>(level: Level, ctx: &RowCtx<f32>, x: &[f64], n: usize) -> (usize, usize) {
                    let x: Vec<S> = x.iter().map(|&v| S::from_f64(v)).collect();
                    let mut y = vec![S::default(); x.len()];
                    let mut st = vec![RowStats::default(); x.len() / n];
                    let (a0, r0) = (L1_AHEAD.with(|q| q.get()), RESCUED.with(|q| q.get()));
                    rows_at::<S>(level, ctx, &x, &mut y, &mut st, None, None, &mut Scratch::<f32>::new(n));
                    (L1_AHEAD.with(|q| q.get()) - a0, RESCUED.with(|q| q.get()) - r0)
                }
                for level in levels() {
                    for (dtype, (ahead, rescued)) in
                        [("f32", run::<f32>(level, &ctx, x, n)), ("f16", run::<f16>(level, &ctx, x, n)), ("bf16", run::<bf16>(level, &ctx, x, n))]
                    {
                        let what = format!("{level:?} {dtype} n={n} {label} centred={centred}");
                        assert_eq!(rescued, expected_rescues, "{what}: rows rescued");
                        assert_eq!(ahead, if centred { rows - 1 } else { 0 }, "{what}: rows whose pass ran with the next rows' sums");
                    }
                }
                let xs: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                let xh: Vec<f16> = x.iter().map(|&v| f16::from_f64(v)).collect();
                let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
                compare_spec::<f32>(&spec, &xs, n, &vec![1.5; n], &vec![0.25; n], label);
                compare_spec::<f16>(&spec, &xh, n, &vec![1.5; n], &vec![0.25; n], label);
                compare_spec::<bf16>(&spec, &xb, n, &vec![1.5; n], &vec![0.25; n], label);
            }
        }
    }
}

pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![fused_equals_generic_on_every_length, fused_equals_generic_with_extreme_affine, fused_rounds_subnormal_outputs_like_generic, fused_hands_rescued_rows_to_the_generic_kernel, fused_counts_overflowing_outputs_like_generic, ordinary_rows_are_not_rescued, top_k_rows_of_whole_blocks_select_without_branches, fused_equals_generic_on_long_top_k_rows, fused_equals_generic_on_offset_top_k_rows, top_k_bound_before_difference_keeps_every_candidate, early_lines_only_for_four_byte_rows_within_the_row, bf16_top_k_stores_from_saved_centred_values, pipelined_top_k_rows_equal_rows_one_by_one, centred_l1_rows_take_one_pass];
