//! A digest of the row-norm forward over many cases (every kind and centring, f32/f16/bf16
//! storage with each accumulator, with and without weight and bias, odd lengths, edge values):
//! outputs, statistics and counters, bit for bit. Run it before and after a change to the row
//! kernels: equal digests mean identical results through the public API.
//!
//! `cargo run --release -p normlab-norms --example forward_digest` prints one line per dtype x
//! accumulator and a total.

use normlab_norms::{bf16, f16, row, Accum, Element, NormKind, NormSpec, RowStats};

/// FNV-1a over 64-bit words.
struct Digest(u64);

impl Digest {
    fn add(&mut self, v: u64) {
        for b in v.to_le_bytes() {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (1.0 - self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Row `r` of a case: mostly Gaussian rows with an offset and a scale, plus edge rows.
fn row_values(rng: &mut Rng, r: usize, n: usize, max: f64) -> Vec<f64> {
    let scale = [1.0, 1e-3, 30.0, 1e-6, 1e4, 1e-30, 1e30][r % 7];
    let offset = [0.0, 0.0, 5.0, -100.0][r % 4];
    let mut v: Vec<f64> = (0..n).map(|_| offset + scale * rng.normal()).collect();
    match r % 11 {
        3 => v.iter_mut().for_each(|x| *x = 0.0),
        5 => v[(rng.next() as usize) % n] = f64::NAN,
        6 => v[(rng.next() as usize) % n] = f64::INFINITY,
        7 => v.iter_mut().for_each(|x| *x = max * (1.0 - 2.0 * rng.uniform())),
        8 => v.iter_mut().for_each(|x| *x = if rng.uniform() < 0.5 { 1.0 } else { -1.0 }),
        9 => v.iter_mut().for_each(|x| *x = (x.abs() * 4.0).round() / 4.0),
        _ => {}
    }
    v
}

fn specs(n: usize) -> Vec<NormSpec> {
    let mut out = Vec::new();
    for k in [1, 8, 16, 17, n.div_ceil(3), n] {
        if k > n {
            continue;
        }
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
            if k != 1 && !matches!(kind, NormKind::TopK { .. }) {
                continue;
            }
            for eps in [1e-5, 0.0, 1e-30] {
                out.push(NormSpec { kind, centred, eps, constant: Default::default() });
            }
        }
    }
    out
}

fn digest_case<T: Element>(d: &mut Digest, accum: Accum, rows: usize, n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let max = T::DTYPE.max_finite().min(1e300);
    let x: Vec<T> = (0..rows).flat_map(|r| row_values(&mut rng, r, n, max)).map(T::from_f64).collect();
    let w: Vec<T> = (0..n).map(|_| T::from_f64(1.0 + 0.1 * rng.normal())).collect();
    let b: Vec<T> = (0..n).map(|_| T::from_f64(0.1 * rng.normal())).collect();
    for spec in specs(n) {
        for (wo, bo) in [(None, None), (Some(&w[..]), None), (None, Some(&b[..])), (Some(&w[..]), Some(&b[..]))] {
            let mut y = vec![T::default(); x.len()];
            let mut st = vec![RowStats::default(); rows];
            let c = row::forward(&spec, accum, &x, n, wo, bo, &mut y, Some(&mut st)).expect("forward");
            y.iter().for_each(|v| d.add(v.to_f64().to_bits()));
            for s in &st {
                for v in [s.mean_hi, s.mean_lo, s.rscale] {
                    d.add(v.to_bits());
                }
                d.add(s.exp2 as u64);
                d.add(s.clamped as u64);
            }
            for v in [c.nonfinite_in, c.nonfinite_out, c.acc_overflow] {
                d.add(v);
            }
        }
    }
}

fn digest<T: Element>(accum: Accum) -> u64 {
    let mut d = Digest(0xCBF2_9CE4_8422_2325);
    for (i, n) in [1usize, 2, 7, 15, 16, 17, 31, 33, 64, 65, 100, 255, 1000, 1024, 4097].into_iter().enumerate() {
        let rows = (2000 / n).clamp(3, 60);
        digest_case::<T>(&mut d, accum, rows, n, 1000 + i as u64);
    }
    println!("{:>5} {:>9}: {:016x}", T::DTYPE.name(), accum.name(), d.0);
    d.0
}

fn main() {
    let mut total = Digest(0);
    for accum in [Accum::F32, Accum::F64, Accum::PureF16, Accum::PureBf16] {
        total.add(digest::<f32>(accum));
        total.add(digest::<f16>(accum));
        total.add(digest::<bf16>(accum));
    }
    println!("total: {:016x}", total.0);
}
