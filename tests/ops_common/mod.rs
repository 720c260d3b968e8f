//! Helpers shared by the tests/ops_*.rs suites: specs of every kind, deterministic data,
//! tensors from element vectors and the reference calls.
#![allow(dead_code)]

use candle_core::{Device, Result, Tensor, WithDType};
use normlab::norms::{row, Accum, ConstMode, Counters, Element, NormSpec, RowStats};

/// Every kind, with the centring and constant variants worth covering.
pub fn specs() -> Vec<NormSpec> {
    vec![
        NormSpec::rms(1e-6),
        NormSpec::layer(1e-5),
        NormSpec::unit_l2(1e-12),
        NormSpec::l1(1e-5),
        NormSpec::l1(1e-5).with_centred(false).with_constant(ConstMode::One),
        NormSpec::linf(1e-5),
        NormSpec::linf(1e-5).with_centred(false).with_constant(ConstMode::Code),
        NormSpec::topk(3, 1e-5),
        NormSpec::topk(2, 1e-5).with_centred(false).with_constant(ConstMode::One),
    ]
}

/// Small deterministic generator (xorshift64*), so every test is reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    /// Roughly Gaussian (sum of 4 uniforms), scaled.
    pub fn normal(&mut self, scale: f64) -> f64 {
        (self.uniform() + self.uniform() + self.uniform() + self.uniform()) * 0.866 * scale
    }
    pub fn vec(&mut self, len: usize, scale: f64) -> Vec<f64> {
        (0..len).map(|_| self.normal(scale)).collect()
    }
}

pub fn cast<T: Element>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

pub fn tensor<T: WithDType>(v: &[T], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape, &Device::Cpu)
}

pub fn values<T: WithDType>(t: &Tensor) -> Result<Vec<T>> {
    t.flatten_all()?.to_vec1::<T>()
}

/// Equal values, NaN equal to NaN, +0 equal to -0 (candle adds gradients into zeros).
pub fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// Bitwise equal, NaN payloads aside.
pub fn bitwise(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

pub fn assert_all<T: Element>(what: &str, got: &[T], want: &[T], eq: fn(f64, f64) -> bool) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(eq(g.to_f64(), w.to_f64()), "{what}[{i}]: got {g:?}, want {w:?}");
    }
}

/// The reference forward.
pub fn ref_forward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    x: &[T],
    n: usize,
    w: Option<&[T]>,
    b: Option<&[T]>,
) -> (Vec<T>, Vec<RowStats>, Counters) {
    let mut y = vec![T::default(); x.len()];
    let mut st = vec![RowStats::default(); x.len() / n];
    let c = row::forward(spec, accum, x, n, w, b, &mut y, Some(&mut st)).expect("reference forward");
    (y, st, c)
}

/// The reference backward: (dx, dweight, dbias).
#[allow(clippy::too_many_arguments)]
pub fn ref_backward<T: Element>(
    spec: &NormSpec,
    accum: Accum,
    x: &[T],
    dy: &[T],
    n: usize,
    w: Option<&[T]>,
    want_dw: bool,
    want_db: bool,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let (_, st, _) = ref_forward(spec, accum, x, n, None, None);
    let mut dx = vec![T::default(); x.len()];
    let mut dw = vec![T::default(); if want_dw { n } else { 0 }];
    let mut db = vec![T::default(); if want_db { n } else { 0 }];
    row::backward(
        spec,
        accum,
        x,
        dy,
        n,
        &st,
        w,
        &mut dx,
        want_dw.then_some(&mut dw[..]),
        want_db.then_some(&mut db[..]),
    )
    .expect("reference backward");
    (dx, dw, db)
}
