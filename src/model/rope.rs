//! Rotary position embeddings on `[B, T, H, d_h]` tensors, standard or NVIDIA/ngpt's variant.
//!
//! Both act on interleaved pairs `(x[2i], x[2i+1])`, `i = 0..d_h/2`, at position `t`, with
//! `theta_i = 10000^(-2i/d_h)`:
//!
//! - standard RoPE (the default everywhere):
//!   `out[2i] = x[2i] cos(t theta_i) - x[2i+1] sin(t theta_i)`,
//!   `out[2i+1] = x[2i] sin(t theta_i) + x[2i+1] cos(t theta_i)` (a rotation, norm-preserving);
//! - NVIDIA/ngpt's code (algorithms.md 1.3.1, NVIDIA/ngpt#10), behind `ngpt_code_interop`:
//!   with `E[t, 2j] = sin(t theta_j)`, `E[t, 2j+1] = cos(t theta_j)`,
//!   `out[2i] = -x[2i+1] E[t, d_h/2 + i]`, `out[2i+1] = x[2i] E[t, i]` (not a rotation; at
//!   `t = 0` it zeroes the pairs with even `i`).
//!
//! The tables are built in f64 and rounded once into the compute dtype.

use candle_core::{DType, Device, Result, Tensor};

/// Which rotary map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RopeKind {
    Standard,
    NgptCode,
}

/// `out[2i] = x[2i] a0 + x[2i+1] b0`, `out[2i+1] = x[2i] a1 + x[2i+1] b1`; tables `(T, 1, d_h/2)`
/// (broadcast over batch and heads). The NVIDIA/ngpt map has `a0 = b1 = 0` and skips them.
pub(crate) struct RopeTables {
    kind: RopeKind,
    a0: Tensor,
    b0: Tensor,
    a1: Tensor,
    b1: Tensor,
}

impl RopeTables {
    pub fn new(kind: RopeKind, t: usize, d_h: usize, dtype: DType, device: &Device) -> Result<Self> {
        let half = d_h / 2;
        let theta = |i: usize| 10000f64.powf(-2.0 * i as f64 / d_h as f64);
        let mut a0 = Vec::with_capacity(t * half);
        let mut b0 = Vec::with_capacity(t * half);
        let mut a1 = Vec::with_capacity(t * half);
        let mut b1 = Vec::with_capacity(t * half);
        for pos in 0..t {
            let p = pos as f64;
            // NVIDIA/ngpt's interleaved sinusoid table E[t, c].
            let e = |c: usize| if c.is_multiple_of(2) { (p * theta(c / 2)).sin() } else { (p * theta(c / 2)).cos() };
            for i in 0..half {
                match kind {
                    RopeKind::Standard => {
                        let (s, c) = (p * theta(i)).sin_cos();
                        a0.push(c);
                        b0.push(-s);
                        a1.push(s);
                        b1.push(c);
                    }
                    RopeKind::NgptCode => {
                        a0.push(0.0);
                        b0.push(-e(half + i));
                        a1.push(e(i));
                        b1.push(0.0);
                    }
                }
            }
        }
        let mk = |v: Vec<f64>| Tensor::from_vec(v, (t, 1, half), device)?.to_dtype(dtype);
        Ok(RopeTables { kind, a0: mk(a0)?, b0: mk(b0)?, a1: mk(a1)?, b1: mk(b1)? })
    }

    /// Apply to `x` `[B, T, H, d_h]`.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, h, d_h) = x.dims4()?;
        let pairs = x.reshape((b, t, h, d_h / 2, 2))?;
        let x0 = pairs.narrow(4, 0, 1)?.squeeze(4)?;
        let x1 = pairs.narrow(4, 1, 1)?.squeeze(4)?;
        let (o0, o1) = match self.kind {
            RopeKind::Standard => (
                (x0.broadcast_mul(&self.a0)? + x1.broadcast_mul(&self.b0)?)?,
                (x0.broadcast_mul(&self.a1)? + x1.broadcast_mul(&self.b1)?)?,
            ),
            RopeKind::NgptCode => (x1.broadcast_mul(&self.b0)?, x0.broadcast_mul(&self.a1)?),
        };
        Tensor::stack(&[o0, o1], 4)?.reshape((b, t, h, d_h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(t: usize, d_h: usize) -> (Tensor, Vec<f64>) {
        let v: Vec<f64> = (0..t * d_h).map(|i| (0.37 * i as f64 + 0.1).sin()).collect();
        (Tensor::from_vec(v.clone(), (1, t, 1, d_h), &Device::Cpu).unwrap(), v)
    }

    #[test]
    fn standard_rope_rotates_pairs_and_keeps_the_norm() {
        let (t, d_h) = (5, 8);
        let (x, v) = input(t, d_h);
        let y = RopeTables::new(RopeKind::Standard, t, d_h, DType::F64, &Device::Cpu).unwrap().apply(&x).unwrap();
        let y: Vec<f64> = y.flatten_all().unwrap().to_vec1().unwrap();
        for pos in 0..t {
            for i in 0..d_h / 2 {
                let th = pos as f64 * 10000f64.powf(-2.0 * i as f64 / d_h as f64);
                let (x0, x1) = (v[pos * d_h + 2 * i], v[pos * d_h + 2 * i + 1]);
                assert!((y[pos * d_h + 2 * i] - (x0 * th.cos() - x1 * th.sin())).abs() < 1e-14);
                assert!((y[pos * d_h + 2 * i + 1] - (x0 * th.sin() + x1 * th.cos())).abs() < 1e-14);
            }
            let n = |s: &[f64]| s.iter().map(|a| a * a).sum::<f64>();
            assert!((n(&y[pos * d_h..(pos + 1) * d_h]) - n(&v[pos * d_h..(pos + 1) * d_h])).abs() < 1e-13);
        }
    }

    #[test]
    fn ngpt_code_rope_follows_the_python_ops() {
        // NVIDIA/ngpt: E[:, 0::2] = sin(pos * div), E[:, 1::2] = cos(pos * div),
        // div = exp(arange(0, d_h, 2) * -ln(10000)/d_h); sin, cos = E.chunk(2, -1);
        // out = stack((-q[1::2], q[::2]), -1) * stack((cos, sin), -1).
        let (t, d_h) = (4, 8);
        let (x, v) = input(t, d_h);
        let y = RopeTables::new(RopeKind::NgptCode, t, d_h, DType::F64, &Device::Cpu).unwrap().apply(&x).unwrap();
        let y: Vec<f64> = y.flatten_all().unwrap().to_vec1().unwrap();
        for pos in 0..t {
            let e: Vec<f64> = (0..d_h)
                .map(|c| {
                    let div = ((c / 2 * 2) as f64 * -(10000f64.ln()) / d_h as f64).exp();
                    if c % 2 == 0 { (pos as f64 * div).sin() } else { (pos as f64 * div).cos() }
                })
                .collect();
            let (sin, cos) = e.split_at(d_h / 2);
            for i in 0..d_h / 2 {
                let q = &v[pos * d_h..(pos + 1) * d_h];
                assert!((y[pos * d_h + 2 * i] - (-q[2 * i + 1] * cos[i])).abs() < 1e-14);
                assert!((y[pos * d_h + 2 * i + 1] - q[2 * i] * sin[i]).abs() < 1e-14);
                if pos == 0 && i % 2 == 0 {
                    // algorithms.md 1.3.1: at t = 0 the pairs with even i are zeroed.
                    assert_eq!((y[2 * i], y[2 * i + 1]), (0.0, 0.0));
                }
            }
        }
    }
}
