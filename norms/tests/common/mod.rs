//! Shared helpers of the normlab-norms integration tests.
//!
//! - [`textbook`]: an independent f64 implementation of every row norm, written as the
//!   formulas read (two passes, plain loops, no lanes, no rescaling; sums are Neumaier-compensated
//!   so the oracle is accurate to a few ulps for any n and offset). It is
//!   the oracle the crate's own f64 path is checked against; the crate's f64 path is then the
//!   oracle of the low-precision paths.
//! - [`Rng`]: a tiny deterministic generator (splitmix64 + Box-Muller), so proptest only has to
//!   generate a seed and a shape and shrinking stays cheap.
//! - spec enumeration ([`all_specs`]) and conversion helpers.
//!
//! Each test file uses only part of this module.
#![allow(dead_code)]

use normlab_norms::{row, Accum, ConstMode, Counters, Element, NormKind, NormSpec, RowStats};

/// Number of proptest cases: `default`, or `ROW_TEST_CASES` from the environment for a long
/// soak run (`ROW_TEST_CASES=2000 cargo test -p normlab-norms --release --test integration row_lowprec::`).
pub fn cases(default: u32) -> u32 {
    std::env::var("ROW_TEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Deterministic pseudo-random numbers (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [a, b).
    pub fn range(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.uniform()
    }
    /// Standard normal (Box-Muller; one value per call, simple over fast).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Round a vector of f64 into storage `T` (one rounding each).
pub fn to_t<T: Element>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

/// Widen storage to f64 (exact).
pub fn to_f64<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Every valid (kind, centring) pair with the given constant mode; Top-k uses `k`.
pub fn kinds(k: usize) -> Vec<(NormKind, bool)> {
    vec![
        (NormKind::Rms, false),
        (NormKind::Layer, true),
        (NormKind::UnitL2, false),
        (NormKind::L1, true),
        (NormKind::L1, false),
        (NormKind::LInf, true),
        (NormKind::LInf, false),
        (NormKind::TopK { k }, true),
        (NormKind::TopK { k }, false),
    ]
}

/// Every valid spec for a row of `n` elements with the given eps: each (kind, centring) pair,
/// each `ConstMode` for the kinds that have a constant (Code needs n >= 2), and Top-k with
/// k = 1, a middle k and k = n. The middle k is n/3, except for n > 5000 where it is 16:
/// `constants::c_topk(65536, 21846)` takes 80 s of quadrature, too slow for a test.
pub fn all_specs(n: usize, eps: f64) -> Vec<NormSpec> {
    let mid = if n > 5000 { 16 } else { n.div_ceil(3) };
    let mut ks = vec![1, mid, n];
    ks.dedup();
    let mut out = Vec::new();
    for (i, &k) in ks.iter().enumerate() {
        for (kind, centred) in kinds(k) {
            let is_topk = matches!(kind, NormKind::TopK { .. });
            if i > 0 && !is_topk {
                continue;
            }
            let modes: &[ConstMode] = if kind.centring_is_optional() {
                &[ConstMode::Exact, ConstMode::Code, ConstMode::One]
            } else {
                &[ConstMode::Exact]
            };
            for &m in modes {
                if m == ConstMode::Code && n < 2 && !matches!(kind, NormKind::L1) {
                    continue;
                }
                out.push(NormSpec { kind, centred, eps, constant: m });
            }
        }
    }
    out
}

/// The crate's reference path: f64 storage, f64 accumulator. Returns y, stats, counters.
pub fn crate_f64_forward(
    spec: &NormSpec,
    x: &[f64],
    n: usize,
    w: Option<&[f64]>,
    b: Option<&[f64]>,
) -> (Vec<f64>, Vec<RowStats>, Counters) {
    let rows = x.len() / n;
    let mut y = vec![0.0; x.len()];
    let mut st = vec![RowStats::default(); rows];
    let c = row::forward(spec, Accum::F64, x, n, w, b, &mut y, Some(&mut st)).expect("valid f64 forward");
    (y, st, c)
}

/// Run the crate's forward in storage `T` with accumulator `accum`.
pub fn crate_forward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    x: &[T],
    n: usize,
    w: Option<&[T]>,
    b: Option<&[T]>,
) -> (Vec<T>, Vec<RowStats>, Counters) {
    let rows = x.len() / n;
    let mut y = vec![T::default(); x.len()];
    let mut st = vec![RowStats::default(); rows];
    let c = row::forward(spec, accum, x, n, w, b, &mut y, Some(&mut st)).expect("valid forward");
    (y, st, c)
}

/// The independent f64 implementation, formula by formula.
pub mod textbook {
    use normlab_norms::{NormKind, NormSpec};

    /// What the textbook forward finds for one row.
    #[derive(Clone, Copy, Debug)]
    pub struct Row {
        pub mean: f64,
        /// The denominator `D` (after the eps rule of the kind).
        pub d: f64,
        /// Unit-L2 only: `max(‖z‖, eps)` took eps.
        pub clamped: bool,
    }

    /// Neumaier's compensated sum: the oracle's sums are accurate to a few ulps whatever n
    /// and the offset, so the comparison measures the crate's error, not the oracle's.
    pub fn sum(v: impl IntoIterator<Item = f64>) -> f64 {
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for x in v {
            let t = s + x;
            c += if s.abs() >= x.abs() { (s - t) + x } else { (x - t) + s };
            s = t;
        }
        s + c
    }

    fn mean(v: &[f64]) -> f64 {
        sum(v.iter().copied()) / v.len() as f64
    }

    /// Mean of the k largest values (sorted descending, then summed).
    pub fn topk_mean(a: &[f64], k: usize) -> f64 {
        let mut s: Vec<f64> = a.to_vec();
        s.sort_by(|p, q| q.partial_cmp(p).unwrap());
        sum(s[..k].iter().copied()) / k as f64
    }

    /// Statistics of one row: `z = x - mean` (centred) or `x`, then the denominator
    /// `D` as in the table of `normlab_norms::spec` with the given constant `c`.
    pub fn row_stats(spec: &NormSpec, c: f64, x: &[f64]) -> Row {
        let n = x.len() as f64;
        let mu = if spec.centred { mean(x) } else { 0.0 };
        let z: Vec<f64> = x.iter().map(|&v| v - mu).collect();
        let abs: Vec<f64> = z.iter().map(|v| v.abs()).collect();
        let sumsq = sum(z.iter().map(|v| v * v));
        let (d, clamped) = match spec.kind {
            NormKind::Rms | NormKind::Layer => ((sumsq / n + spec.eps).sqrt(), false),
            NormKind::UnitL2 => {
                let norm = sumsq.sqrt();
                if norm >= spec.eps {
                    (norm, false)
                } else {
                    (spec.eps, true)
                }
            }
            NormKind::L1 => (c * sum(abs.iter().copied()) / n + spec.eps, false),
            NormKind::LInf => (c * abs.iter().cloned().fold(0.0, f64::max) + spec.eps, false),
            NormKind::TopK { k } => (c * topk_mean(&abs, k) + spec.eps, false),
        };
        Row { mean: mu, d, clamped }
    }

    /// `y = (x - mean) / D * w + b` for every row of `x` (`[rows, n]`).
    pub fn forward(spec: &NormSpec, c: f64, x: &[f64], n: usize, w: Option<&[f64]>, b: Option<&[f64]>) -> (Vec<f64>, Vec<Row>) {
        let mut y = Vec::with_capacity(x.len());
        let mut rows = Vec::new();
        for xr in x.chunks(n) {
            let r = row_stats(spec, c, xr);
            for (j, &v) in xr.iter().enumerate() {
                let mut o = (v - r.mean) / r.d;
                if let Some(w) = w {
                    o *= w[j];
                }
                if let Some(b) = b {
                    o += b[j];
                }
                y.push(o);
            }
            rows.push(r);
        }
        (y, rows)
    }

    /// sign with sign(0) = 0.
    fn sign(v: f64) -> f64 {
        if v > 0.0 {
            1.0
        } else if v < 0.0 {
            -1.0
        } else {
            0.0
        }
    }

    /// Indices of the k largest |z|, ties broken to the lowest index (a stable sort by
    /// descending |z| keeps equal values in index order).
    pub fn topk_indices(z: &[f64], k: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..z.len()).collect();
        idx.sort_by(|&a, &b| z[b].abs().partial_cmp(&z[a].abs()).unwrap());
        idx.truncate(k);
        idx
    }

    /// The analytic gradient of one row, written from the formulas: with `x̂ = z/D`,
    /// `g = dy * w`, `dL/dz_j = (g_j - (g · x̂) dD/dz_j) / D`, then `dL/dx = dL/dz - mean(dL/dz)`
    /// for centred kinds. `dD/dz_j`: Rms/Layer `x̂_j / n`; UnitL2 `x̂_j` (0 when clamped); L1
    /// `C sign(z_j)/n` with sign(0) = 0; L-inf `C sign(z_m)` at the lowest index m of the largest
    /// |z|; Top-k `C sign(z_j)/k` on the k largest |z| (lowest indices on ties).
    /// Returns `(dx, dy * x̂)` (the second is this row's share of the weight gradient).
    pub fn backward_row(spec: &NormSpec, c: f64, x: &[f64], dy: &[f64], w: Option<&[f64]>) -> (Vec<f64>, Vec<f64>) {
        let n = x.len();
        let r = row_stats(spec, c, x);
        let z: Vec<f64> = x.iter().map(|&v| v - r.mean).collect();
        let xh: Vec<f64> = z.iter().map(|v| v / r.d).collect();
        let g: Vec<f64> = (0..n).map(|j| dy[j] * w.map_or(1.0, |w| w[j])).collect();
        let dot: f64 = g.iter().zip(&xh).map(|(a, b)| a * b).sum();
        let mut dd = vec![0.0; n];
        match spec.kind {
            NormKind::Rms | NormKind::Layer => (0..n).for_each(|j| dd[j] = xh[j] / n as f64),
            NormKind::UnitL2 => {
                if !r.clamped {
                    dd.copy_from_slice(&xh)
                }
            }
            NormKind::L1 => (0..n).for_each(|j| dd[j] = c * sign(z[j]) / n as f64),
            NormKind::LInf => {
                let m = topk_indices(&z, 1)[0];
                dd[m] = c * sign(z[m]);
            }
            NormKind::TopK { k } => {
                for m in topk_indices(&z, k) {
                    dd[m] = c * sign(z[m]) / k as f64;
                }
            }
        }
        let mut dz: Vec<f64> = (0..n).map(|j| (g[j] - dot * dd[j]) / r.d).collect();
        if spec.centred {
            let m = dz.iter().sum::<f64>() / n as f64;
            dz.iter_mut().for_each(|v| *v -= m);
        }
        let dw = (0..n).map(|j| dy[j] * xh[j]).collect();
        (dz, dw)
    }

    /// `L = sum(r * y)`, the scalar the finite-difference checks differentiate.
    pub fn functional(spec: &NormSpec, c: f64, x: &[f64], n: usize, w: Option<&[f64]>, b: Option<&[f64]>, r: &[f64]) -> f64 {
        let (y, _) = forward(spec, c, x, n, w, b);
        y.iter().zip(r).map(|(a, b)| a * b).sum()
    }

    /// The smallest gap that decides a non-differentiable choice in the row, in units of |z|:
    /// L1: min |z_j|; L-inf: largest minus second largest |z|; Top-k: the smaller of the k-th
    /// largest |z| and its gap to the (k+1)-th; other kinds: infinite.
    pub fn kink_margin(spec: &NormSpec, x: &[f64]) -> f64 {
        let mu = if spec.centred { mean(x) } else { 0.0 };
        let mut a: Vec<f64> = x.iter().map(|&v| (v - mu).abs()).collect();
        a.sort_by(|p, q| q.partial_cmp(p).unwrap());
        match spec.kind {
            NormKind::L1 => a.last().copied().unwrap_or(f64::INFINITY),
            NormKind::LInf => {
                if a.len() < 2 {
                    f64::INFINITY
                } else {
                    a[0] - a[1]
                }
            }
            // The selection changes at a tie between the k-th and (k+1)-th largest, and the
            // sign of a selected z_j changes at 0 (k = n is L1).
            NormKind::TopK { k } => {
                if k >= a.len() {
                    a[k - 1]
                } else {
                    (a[k - 1] - a[k]).min(a[k - 1])
                }
            }
            _ => f64::INFINITY,
        }
    }
}

/// Rows x n of N(offset, scale) values.
pub fn gaussian(rng: &mut Rng, len: usize, scale: f64, offset: f64) -> Vec<f64> {
    (0..len).map(|_| offset + scale * rng.normal()).collect()
}

/// Affine parameters: weights in [0.5, 2) with random sign, biases N(0, 0.5).
pub fn affine(rng: &mut Rng, n: usize) -> (Vec<f64>, Vec<f64>) {
    let w = (0..n).map(|_| if rng.below(2) == 0 { 1.0 } else { -1.0 } * rng.range(0.5, 2.0)).collect();
    let b = (0..n).map(|_| 0.5 * rng.normal()).collect();
    (w, b)
}

/// The affine combinations every check runs: none, weight only, bias only, both.
pub const AFFINE_MODES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];
