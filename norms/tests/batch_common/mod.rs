//! Shared helpers of the batch-form tests: a seeded generator, layout walks, the spec list,
//! and an independent textbook f64 batch norm (written from the formulas, not from the crate).
#![allow(dead_code)]

use normlab_norms::batch::Layout;
use normlab_norms::{ConstMode, NormKind, NormSpec};

/// SplitMix64: small, seeded, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    pub fn gaussian(&mut self, len: usize, scale: f64, offset: f64) -> Vec<f64> {
        (0..len).map(|_| offset + scale * self.normal()).collect()
    }
}

/// Index of element (sample i, channel ch, spatial k) in the layout.
pub fn index(layout: &Layout, i: usize, ch: usize, k: usize) -> usize {
    let s = layout.spatial();
    (i * layout.channels() + ch) * s + k
}

/// The elements of channel `ch`, in (n, h, w) order.
pub fn channel<T: Copy>(layout: &Layout, v: &[T], ch: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(layout.per_channel());
    for i in 0..layout.batch() {
        for k in 0..layout.spatial() {
            out.push(v[index(layout, i, ch, k)]);
        }
    }
    out
}

/// Every kind, with both centrings where optional, and the Code constant for L-inf / Top-k.
pub fn specs(m: usize, eps: f64) -> Vec<NormSpec> {
    let mut v = vec![NormSpec::rms(eps), NormSpec::layer(eps), NormSpec::unit_l2(eps)];
    let mut ks = vec![NormKind::L1, NormKind::LInf, NormKind::TopK { k: 1 }, NormKind::TopK { k: m.div_ceil(3) }];
    if m >= 2 {
        ks.push(NormKind::TopK { k: m });
    }
    for kind in ks {
        v.push(NormSpec::new(kind, eps));
        v.push(NormSpec::new(kind, eps).with_centred(false));
    }
    if m >= 2 {
        // The authors' c(n) is defined for n >= 2.
        v.push(NormSpec::linf(eps).with_constant(ConstMode::Code));
    }
    v
}

/// Textbook statistics of one channel: (mean, D, biased var or mean square, the statistic
/// that PyTorch-convention running `spread` tracks before the unbiasing).
pub struct ChannelRef {
    pub mean: f64,
    /// The mean as an unrounded pair (`mean = hi + lo`).
    pub mean_hi: f64,
    pub mean_lo: f64,
    pub d: f64,
    pub spread: f64,
}

pub fn channel_ref(spec: &NormSpec, x: &[f64]) -> ChannelRef {
    let m = x.len();
    let c = spec.scale_constant(m).unwrap();
    // Two-pass mean (the second pass corrects the first's rounding, which matters when
    // |mean| >> std), applied as z = (x - m0) - corr: x - (m0 + corr) would round the mean to
    // a double first and lose the correction.
    let (m0, corr) = if spec.centred {
        let m0 = x.iter().sum::<f64>() / m as f64;
        (m0, x.iter().map(|v| v - m0).sum::<f64>() / m as f64)
    } else {
        (0.0, 0.0)
    };
    let mean = m0 + corr;
    let z: Vec<f64> = x.iter().map(|v| (v - m0) - corr).collect();
    let sq = z.iter().map(|v| v * v).sum::<f64>();
    let mut a: Vec<f64> = z.iter().map(|v| v.abs()).collect();
    a.sort_by(|p, q| q.partial_cmp(p).unwrap());
    let (d, spread) = match spec.kind {
        NormKind::Rms | NormKind::Layer => ((sq / m as f64 + spec.eps).sqrt(), sq / m as f64),
        NormKind::UnitL2 => (sq.sqrt().max(spec.eps), sq.sqrt().max(spec.eps)),
        NormKind::L1 => {
            let s = c * a.iter().sum::<f64>() / m as f64;
            (s + spec.eps, s)
        }
        NormKind::LInf => (c * a[0] + spec.eps, c * a[0]),
        NormKind::TopK { k } => {
            let s = c * a[..k].iter().sum::<f64>() / k as f64;
            (s + spec.eps, s)
        }
    };
    ChannelRef { mean, mean_hi: m0, mean_lo: corr, d, spread }
}

/// Textbook train-mode forward: `y = (x - mu_c) / D_c * γ_c + β_c`.
pub fn forward_ref(spec: &NormSpec, layout: &Layout, x: &[f64], w: Option<&[f64]>, b: Option<&[f64]>) -> (Vec<f64>, Vec<ChannelRef>) {
    let mut y = vec![0.0; x.len()];
    let mut refs = Vec::new();
    for ch in 0..layout.channels() {
        let r = channel_ref(spec, &channel(layout, x, ch));
        for i in 0..layout.batch() {
            for k in 0..layout.spatial() {
                let j = index(layout, i, ch, k);
                y[j] = ((x[j] - r.mean_hi) - r.mean_lo) / r.d * w.map_or(1.0, |w| w[ch]) + b.map_or(0.0, |b| b[ch]);
            }
        }
        refs.push(r);
    }
    (y, refs)
}

/// A few layouts: one element per channel, odd sizes, one channel, one sample, a wide NC.
pub fn layouts() -> Vec<Layout> {
    vec![
        Layout::Nc { n: 1, c: 3 },
        Layout::Nc { n: 7, c: 3 },
        Layout::Nc { n: 1000, c: 2 },
        Layout::Nchw { n: 2, c: 3, h: 3, w: 5 },
        Layout::Nchw { n: 1, c: 1, h: 4, w: 9 },
        Layout::Nchw { n: 5, c: 2, h: 1, w: 1 },
        Layout::Nchw { n: 3, c: 4, h: 7, w: 11 },
    ]
}
