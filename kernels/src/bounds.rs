//! The forward error bound of the normalization kernels against the f64 reference
//! (kernels/README.md, "Bounds"), in one place, so that the emulator tests and `normlab
//! gpu-check` check the same statement; and the backward's allowance for a Top-k or L-inf
//! selection tied at fp32 resolution ([`selection_tie_slack`]).
//!
//! An output may differ from the reference by at most 1 ulp of its storage type beyond an
//! absolute allowance for the fp32 steps whose error is not relative to the output:
//!
//! - with a bias, `2^-20 (|x̂ w| + |b|)`: the fp32 sum `x̂ w + b` can cancel;
//! - for a centred kind, `2^-20 mean|x̂| |w|`, the mean over the row (or channel). The output
//!   `(x - mu) / D` carries the absolute error of the fp32 mean, and that error is relative to
//!   the row's spread (the sum of `x - hi` in the mean's correction), not to the output. It
//!   shows only where `x` lies within a few fp32 ulps of the mean, where the output's ulp is
//!   as small as that error (fp16 below `2^-13`, whose ulp is `2^-24` absolute; bf16 below
//!   about `2^-16`).
//!
//! `2^-20` is 16 fp32 ulps of the term sizes. Measured on the emulator by
//! `cargo run --release -p normlab-kernels --example centred_bound_sweep [-- wide]` (the five centred specs
//! of kernels/tests/emulated.rs, fp16 and bf16, rows of 1..1400 elements of N(0.2, 3^2), no
//! affine, weight, weight and bias: 8994 cases): with the centred term at `2^-23` every output
//! was within 0.5003 ulp beyond the allowance, so `2^-20` leaves 8x room; without the term 21
//! cases were 1.01..2.73 ulp off, all at outputs below `1e-4` in magnitude. On wider rows (4099, 8192, 12288; 96 cases) the term at `2^-24` was
//! enough (0.5003 ulp beyond it). The norms crate's f32 path has the same term
//! (norms/tests/row_lowprec.rs), with a width-dependent factor for its 16-lane sums.

use normlab_norms::batch::Layout;
use normlab_norms::NormSpec;

use crate::batch::BatchNorm;

/// The fp32 allowance unit, `2^-20`.
pub const FP32_SLACK: f64 = 1.0 / 1_048_576.0;

/// Allowance of one forward output: `xhat_w` is `x̂ w` (the normalized value times its weight),
/// `bias` the bias when one is added, `spread_w` the row's (or channel's) `mean|x̂| |w|` for a
/// centred kind and 0 otherwise. Non-finite terms give 0 (such outputs are compared as NaN or
/// infinity, without an allowance).
pub fn forward_slack(xhat_w: f64, bias: Option<f64>, spread_w: f64) -> f64 {
    let affine = bias.map_or(0.0, |b| xhat_w.abs() + b.abs());
    let s = FP32_SLACK * (affine + spread_w);
    if s.is_finite() {
        s
    } else {
        0.0
    }
}

/// Mean of `|v|` over the finite values of a row or channel, divided by its full length `len`
/// (a row with NaN or infinite inputs has NaN outputs, compared without an allowance).
pub fn mean_abs(values: impl IntoIterator<Item = f64>, len: usize) -> f64 {
    if len == 0 {
        return 0.0;
    }
    values.into_iter().filter(|v| v.is_finite()).map(f64::abs).sum::<f64>() / len as f64
}

/// Allowance of every output of a row-form forward over `[rows, n]`: `xhat` is the reference's
/// normalized input without affine parameters, `w` and `b` the weight and bias if the forward
/// applies them.
pub fn row_forward_slack(spec: &NormSpec, xhat: &[f64], n: usize, w: Option<&[f64]>, b: Option<&[f64]>) -> Vec<f64> {
    let mut out = Vec::with_capacity(xhat.len());
    if n == 0 {
        return out;
    }
    for row in xhat.chunks(n) {
        let spread = if spec.centred { mean_abs(row.iter().copied(), n) } else { 0.0 };
        for (j, xh) in row.iter().enumerate() {
            let wj = w.map_or(1.0, |w| w[j]);
            out.push(forward_slack(xh * wj, b.map(|b| b[j]), spread * wj.abs()));
        }
    }
    out
}

/// Allowance of every output of a batch-form forward (a channel in the role of a row): `y_ref`
/// is the reference output with the weight and bias `b` applied (`x̂ w = y_ref - b`; the weight
/// is constant over a channel, so the channel's `mean|x̂| |w|` is its `mean|y_ref - b|`).
pub fn batch_forward_slack(norm: &BatchNorm, l: &Layout, y_ref: &[f64], b: Option<&[f64]>) -> Vec<f64> {
    let ch = l.channels();
    let channel = |i: usize| (i / l.spatial()) % ch;
    let bias = |i: usize| b.map(|b| b[channel(i)]);
    let xhat_w = |i: usize| y_ref[i] - bias(i).unwrap_or(0.0);
    let centred = match norm {
        BatchNorm::Spec(s) => s.centred,
        BatchNorm::MeanOnly => true,
    };
    let mut spread = vec![0.0; ch];
    if centred {
        for i in 0..y_ref.len() {
            let v = xhat_w(i);
            if v.is_finite() {
                spread[channel(i)] += v.abs();
            }
        }
        spread.iter_mut().for_each(|s| *s /= l.per_channel().max(1) as f64);
    }
    (0..y_ref.len()).map(|i| forward_slack(xhat_w(i), bias(i), spread[channel(i)])).collect()
}

/// Extra backward (dx) allowance of a row whose Top-k or L-inf selection is ambiguous at fp32
/// resolution, per element of the row (zeros for other kinds and for unambiguous rows).
///
/// The kernels select on the fp32 `|z|`, `z = fl(fl(x - hi) - lo)`, ties to the lowest index;
/// the f64 reference on the exact `|x - mu|`. Two elements on opposite sides of the mean whose
/// `|x - mu|` differ by less than fp32's rounding of `z` can tie in fp32 (or swap order), and
/// then the kernel may select either of them at the k-th place (gpu-check found such a row: at
/// the 32nd place, `|z|` 2.4794922624714673 and 2.4794921125285327 in f64, equal in fp32). A
/// swap changes the selected elements' `dz` by `s |T|` (`T = C dot / k`, the term only selected
/// elements carry) and, for a centred kind, every `dx` by up to `2 s |T| / n` through the mean.
/// So: with `xhat` the row's reference `x̂` (= `z s`), the elements within `tau` of the k-th
/// largest `|x̂|` (`tau = 2^-20 (|x̂_k| + s |mu|)`, 16 fp32 ulps of the terms of `z`) are
/// ambiguous when they straddle the k-th place; they get `s |T|`, and every element of a
/// centred row gets `2 s |T| m / n` for the `m` possible swaps. A selection differing from the
/// reference's anywhere else still fails.
pub fn selection_tie_slack(spec: &NormSpec, xhat: &[f64], s: f64, mean: f64, dot: f64) -> Vec<f64> {
    use normlab_norms::NormKind;
    let n = xhat.len();
    let k = match spec.kind {
        NormKind::TopK { k } => k,
        NormKind::LInf => 1,
        _ => return vec![0.0; n],
    };
    if k == 0 || k > n || !s.is_finite() || !dot.is_finite() {
        return vec![0.0; n];
    }
    let c = spec.scale_constant(n).unwrap_or(1.0);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| xhat[b].abs().total_cmp(&xhat[a].abs()).then(a.cmp(&b)));
    let vk = xhat[order[k - 1]].abs();
    let tau = FP32_SLACK * (vk + s * mean.abs());
    let near = |i: usize| (xhat[i].abs() - vk).abs() <= tau;
    let inside = order[..k].iter().filter(|&&i| near(i)).count();
    let outside = order[k..].iter().take_while(|&&i| near(i)).count();
    if inside == 0 || outside == 0 {
        return vec![0.0; n];
    }
    let t = (c * dot / k as f64).abs() * s;
    let swaps = inside.min(outside) as f64;
    let shift = if spec.centred { 2.0 * t * swaps / n as f64 } else { 0.0 };
    (0..n).map(|i| shift + if near(i) { t } else { 0.0 }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_add_up() {
        // Bias only: |x̂ w| + |b|.
        assert_eq!(forward_slack(-3.0, Some(1.0), 0.0), 4.0 * FP32_SLACK);
        // Centred only: the spread term.
        assert_eq!(forward_slack(-3.0, None, 0.5), 0.5 * FP32_SLACK);
        assert_eq!(forward_slack(-3.0, Some(-1.0), 0.5), 4.5 * FP32_SLACK);
        assert_eq!(forward_slack(7.0, None, 0.0), 0.0);
        // Non-finite terms never widen the bound (f64::max(NaN, 0) would hide any error).
        assert_eq!(forward_slack(f64::NAN, Some(1.0), 0.0), 0.0);
        assert_eq!(forward_slack(1.0, Some(f64::INFINITY), 0.0), 0.0);
    }

    #[test]
    fn selection_ties_widen_only_ambiguous_rows() {
        // The row gpu-check found (Top-k, k = 32): the 32nd and 33rd |x̂| differ by 1.5e-7,
        // below fp32's resolution of z; here at k = 2 with the same two values.
        let (a, b) = (2.4794922624714673, 2.4794921125285327);
        let xhat = [3.0, -a, b, 0.5, -1.0, 0.25];
        let spec = NormSpec::topk(2, 1e-5);
        let (s, mean, dot) = (0.9, 0.1, 10.0);
        let t = spec.scale_constant(6).unwrap() * dot / 2.0 * s;
        let slack = selection_tie_slack(&spec, &xhat, s, mean, dot);
        let shift = 2.0 * t / 6.0;
        for (i, v) in slack.iter().enumerate() {
            let want = shift + if i == 1 || i == 2 { t } else { 0.0 };
            assert!((v - want).abs() <= 1e-12 * want, "{i}: {v} vs {want}");
        }
        // Uncentred: no shift through the mean.
        let slack = selection_tie_slack(&spec.with_centred(false), &xhat, s, mean, dot);
        assert_eq!(slack.iter().filter(|v| **v > 0.0).count(), 2);
        // A gap of 1e-4 is far beyond fp32 resolution: no allowance. Nor for k = 1 here.
        let clear = [3.0, -2.4795, 2.4794, 0.5, -1.0, 0.25];
        assert!(selection_tie_slack(&spec, &clear, s, mean, dot).iter().all(|v| *v == 0.0));
        assert!(selection_tie_slack(&NormSpec::topk(1, 1e-5), &xhat, s, mean, dot).iter().all(|v| *v == 0.0));
        // Kinds without a selection never get one.
        assert!(selection_tie_slack(&NormSpec::rms(1e-6), &xhat, s, mean, dot).iter().all(|v| *v == 0.0));
    }

    #[test]
    fn row_slack_uses_each_rows_spread_and_weight() {
        let xhat = [1.0, -3.0, f64::NAN, 2.0, 0.0, -2.0];
        let w = [2.0, -1.0, 1.0];
        let centred = NormSpec::layer(1e-5);
        let s = row_forward_slack(&centred, &xhat, 3, Some(&w), None);
        // Row 0: mean|x̂| over finite values / 3 = 4/3; row 1: 4/3.
        let m = 4.0 / 3.0;
        let want = [m * 2.0, m, m, m * 2.0, m, m].map(|v| v * FP32_SLACK);
        for (a, b) in s.iter().zip(want) {
            assert!((a - b).abs() <= 1e-15 * b, "{s:?} vs {want:?}");
        }
        // Uncentred without a bias: no allowance at all.
        let s = row_forward_slack(&NormSpec::rms(1e-6), &xhat, 3, Some(&w), None);
        assert!(s.iter().all(|&v| v == 0.0));
        // Uncentred with a bias: the affine term only.
        let s = row_forward_slack(&NormSpec::rms(1e-6), &xhat, 3, None, Some(&[0.5, 0.5, 0.5]));
        assert_eq!(s[1], 3.5 * FP32_SLACK);
        assert_eq!(s[2], 0.0);
    }

    #[test]
    fn batch_slack_uses_each_channels_spread() {
        // [N=2, C=2, H*W=2]: elements 0,1 and 4,5 are channel 0; 2,3 and 6,7 channel 1.
        let l = Layout::Nchw { n: 2, c: 2, h: 1, w: 2 };
        let b = [1.0, -2.0];
        let xhat_w = [1.0, -1.0, 4.0, 0.0, 3.0, -3.0, f64::INFINITY, 4.0];
        let y: Vec<f64> = xhat_w.iter().enumerate().map(|(i, v)| v + b[(i / 2) % 2]).collect();
        let s = batch_forward_slack(&BatchNorm::MeanOnly, &l, &y, Some(&b));
        // Channel 0: mean |x̂ w| = 8/4 = 2; channel 1: (4 + 0 + 4) / 4 = 2 (the infinity skipped).
        let want = [1.0 + 1.0 + 2.0, 1.0 + 1.0 + 2.0, 4.0 + 2.0 + 2.0, 0.0 + 2.0 + 2.0, 3.0 + 1.0 + 2.0, 3.0 + 1.0 + 2.0, 0.0, 4.0 + 2.0 + 2.0];
        assert_eq!(s, want.map(|v| v * FP32_SLACK).to_vec());
        // An uncentred kind without a bias: nothing.
        let rms = BatchNorm::Spec(NormSpec::rms(1e-6));
        assert!(batch_forward_slack(&rms, &l, &y, None).iter().all(|&v| v == 0.0));
    }
}
