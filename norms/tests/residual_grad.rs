//! The fused residual updates (`normlab_norms::residual`): forward against an independent
//! textbook implementation, analytic backward against central finite differences of
//! `L = sum(g * y)`, in f64, for nGPT and anGPT, per-dimension and scalar `a`, inside and at the
//! clamp of the norms; one rounding into 16-bit storage; non-finite rows.
//!
//! Step and bound: `h = 1e-6 * max(1, |p|)`; truncation error ~1e-12, rounding ~1e-10 |L| / 1;
//! checked as `|fd - analytic| <= 1e-6 * (1 + max |analytic|)` (as tests/row_grad.rs).

use half::{bf16, f16};
use normlab_norms::residual::{angpt_backward, angpt_forward, lerp_nu, ngpt_backward, ngpt_forward, NgptRowStats};
use normlab_norms::Element;

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
    fn vec(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| scale * self.normal()).collect()
    }
}

fn coef(a: &[f64], j: usize) -> f64 {
    if a.len() == 1 {
        a[0]
    } else {
        a[j]
    }
}

/// Textbook `x / max(||x||, eps)` of one row.
fn norm(x: &[f64], eps: f64) -> Vec<f64> {
    let n = x.iter().map(|v| v * v).sum::<f64>().sqrt().max(eps);
    x.iter().map(|v| v / n).collect()
}

fn ngpt_textbook(h: &[f64], b: &[f64], a: &[f64], d: usize, eps: f64) -> Vec<f64> {
    let mut y = Vec::with_capacity(h.len());
    for (hr, br) in h.chunks(d).zip(b.chunks(d)) {
        let bn = norm(br, eps);
        let r: Vec<f64> = (0..d).map(|j| hr[j] + coef(a, j) * (bn[j] - hr[j])).collect();
        y.extend(norm(&r, eps));
    }
    y
}

fn angpt_textbook(h: &[f64], b: &[f64], a: &[f64], d: usize) -> Vec<f64> {
    (0..h.len())
        .map(|i| {
            let a = coef(a, i % d);
            (1.0 - 2.0 * a + 2.0 * a * a).powf(-0.5) * (h[i] + a * (b[i] - h[i]))
        })
        .collect()
}

fn loss(y: &[f64], g: &[f64]) -> f64 {
    y.iter().zip(g).map(|(a, b)| a * b).sum()
}

/// Central difference of `f` along every coordinate of `p`.
fn fd(p: &[f64], f: &dyn Fn(&[f64]) -> f64) -> Vec<f64> {
    let mut q = p.to_vec();
    (0..p.len())
        .map(|i| {
            let h = 1e-6 * p[i].abs().max(1.0);
            let v = q[i];
            q[i] = v + h;
            let lp = f(&q);
            q[i] = v - h;
            let lm = f(&q);
            q[i] = v;
            (lp - lm) / (2.0 * h)
        })
        .collect()
}

fn close(what: &str, an: &[f64], fd: &[f64]) {
    let scale = 1.0 + an.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (a, f)) in an.iter().zip(fd).enumerate() {
        assert!((a - f).abs() <= 1e-6 * scale, "{what}[{i}]: analytic {a:e}, finite difference {f:e}");
    }
}

#[derive(Clone, Copy, Debug)]
enum Which {
    Ngpt,
    Angpt,
}

#[allow(clippy::too_many_arguments)]
fn check_grad(which: Which, rows: usize, d: usize, a: &[f64], hs: f64, bs: f64, eps: f64, seed: u64) {
    let mut rng = Rng(seed | 1);
    let h = rng.vec(rows * d, hs);
    let b = rng.vec(rows * d, bs);
    let g = rng.vec(rows * d, 1.0);
    let fwd = |h: &[f64], b: &[f64], a: &[f64]| match which {
        Which::Ngpt => ngpt_textbook(h, b, a, d, eps),
        Which::Angpt => angpt_textbook(h, b, a, d),
    };
    // Forward: the reference against the textbook.
    let mut y = vec![0.0; h.len()];
    match which {
        Which::Ngpt => ngpt_forward(&h, &b, a, d, eps, &mut y, None).unwrap(),
        Which::Angpt => angpt_forward(&h, &b, a, d, &mut y).unwrap(),
    };
    let t = fwd(&h, &b, a);
    for (i, (u, v)) in y.iter().zip(&t).enumerate() {
        assert!((u - v).abs() <= 1e-13 * (1.0 + v.abs()), "{which:?} forward[{i}]: {u} vs textbook {v}");
    }
    let (mut dh, mut db, mut da) = (vec![0.0; h.len()], vec![0.0; h.len()], vec![0.0; a.len()]);
    let c = match which {
        Which::Ngpt => ngpt_backward(&h, &b, a, d, eps, &g, &mut dh, &mut db, Some(&mut da)).unwrap(),
        Which::Angpt => angpt_backward(&h, &b, a, d, &g, &mut dh, &mut db, Some(&mut da)).unwrap(),
    };
    assert!(c.is_clean(), "{c:?}");
    let what = format!("{which:?} rows={rows} d={d} a_len={}", a.len());
    close(&format!("{what} dh"), &dh, &fd(&h, &|p| loss(&fwd(p, &b, a), &g)));
    close(&format!("{what} db"), &db, &fd(&b, &|p| loss(&fwd(&h, p, a), &g)));
    close(&format!("{what} da"), &da, &fd(a, &|p| loss(&fwd(&h, &b, p), &g)));
}

#[test]
fn ngpt_gradients_match_finite_differences() {
    let mut rng = Rng(7);
    for (rows, d) in [(1, 1), (1, 2), (3, 5), (4, 16), (2, 33)] {
        let a: Vec<f64> = (0..d).map(|_| 0.02 + 0.5 * rng.uniform()).collect();
        check_grad(Which::Ngpt, rows, d, &a, 1.0 / (d as f64).sqrt(), 3.0, 1e-12, 11 + d as u64);
        check_grad(Which::Ngpt, rows, d, &[0.3], 1.0 / (d as f64).sqrt(), 0.5, 1e-12, 13 + d as u64);
        // a above 1 (nGPT's |alpha| is not clamped).
        check_grad(Which::Ngpt, rows, d, &[1.7], 1.0, 1.0, 1e-12, 17 + d as u64);
    }
}

#[test]
fn ngpt_gradients_in_the_clamped_regime() {
    // ||b|| ~ 1e-4 < eps = 1e-2: Norm(b) = b / eps. With tiny h and b, ||r|| < eps too.
    let d = 6;
    let a: Vec<f64> = (0..d).map(|j| 0.1 + 0.1 * j as f64).collect();
    check_grad(Which::Ngpt, 3, d, &a, 1.0, 1e-4, 1e-2, 5);
    check_grad(Which::Ngpt, 3, d, &a, 1e-5, 1e-5, 1e-2, 6);
    // Confirm the clamp flags are what the test means.
    let mut rng = Rng(6);
    let h = rng.vec(3 * d, 1e-5);
    let b = rng.vec(3 * d, 1e-5);
    let mut y = vec![0.0; 3 * d];
    let mut st = vec![NgptRowStats::default(); 3];
    ngpt_forward(&h, &b, &a, d, 1e-2, &mut y, Some(&mut st)).unwrap();
    assert!(st.iter().all(|s| s.b.clamped && s.r.clamped), "{st:?}");
}

#[test]
fn angpt_gradients_match_finite_differences() {
    let mut rng = Rng(9);
    for (rows, d) in [(1, 1), (2, 3), (5, 8), (3, 31)] {
        let a: Vec<f64> = (0..d).map(|_| -0.5 + 2.0 * rng.uniform()).collect();
        check_grad(Which::Angpt, rows, d, &a, 1.0, 1.0, 0.0, 21 + d as u64);
        check_grad(Which::Angpt, rows, d, &[0.2], 1.0, 2.0, 0.0, 23 + d as u64);
        check_grad(Which::Angpt, rows, d, &[3.0], 1.0, 1.0, 0.0, 29 + d as u64);
    }
}

#[test]
fn nu_is_the_inverse_square_root_of_the_expected_squared_norm() {
    for a in [-1.0, 0.0, 0.05, 0.5, 1.0, 2.5] {
        let q = (1.0 - a) * (1.0 - a) + a * a;
        assert!((lerp_nu(a) * lerp_nu(a) * q - 1.0).abs() < 1e-15);
    }
}

/// 16-bit storage: the result is the f64 value rounded once (no intermediate rounding).
fn one_rounding<T: Element>() {
    let (rows, d) = (3, 37);
    let mut rng = Rng(31);
    let h64 = rng.vec(rows * d, 0.2);
    let b64 = rng.vec(rows * d, 2.0);
    let g64 = rng.vec(rows * d, 1.0);
    let h: Vec<T> = h64.iter().map(|&v| T::from_f64(v)).collect();
    let b: Vec<T> = b64.iter().map(|&v| T::from_f64(v)).collect();
    let g: Vec<T> = g64.iter().map(|&v| T::from_f64(v)).collect();
    let w = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let a: Vec<f64> = (0..d).map(|j| 0.01 * j as f64).collect();
    let mut y = vec![T::default(); rows * d];
    let mut y64 = vec![0.0; rows * d];
    ngpt_forward(&h, &b, &a, d, 1e-12, &mut y, None).unwrap();
    ngpt_forward(&w(&h), &w(&b), &a, d, 1e-12, &mut y64, None).unwrap();
    assert!(y.iter().zip(&y64).all(|(u, v)| *u == T::from_f64(*v)));
    let (mut dh, mut db, mut dh64, mut db64) = (vec![T::default(); rows * d], vec![T::default(); rows * d], vec![0.0; rows * d], vec![0.0; rows * d]);
    let (mut da, mut da64) = (vec![0.0; d], vec![0.0; d]);
    angpt_backward(&h, &b, &a, d, &g, &mut dh, &mut db, Some(&mut da)).unwrap();
    angpt_backward(&w(&h), &w(&b), &a, d, &w(&g), &mut dh64, &mut db64, Some(&mut da64)).unwrap();
    assert!(dh.iter().zip(&dh64).all(|(u, v)| *u == T::from_f64(*v)));
    assert!(db.iter().zip(&db64).all(|(u, v)| *u == T::from_f64(*v)));
    assert_eq!(da, da64);
}

#[test]
fn sixteen_bit_storage_rounds_once() {
    one_rounding::<f16>();
    one_rounding::<bf16>();
    one_rounding::<f32>();
}

#[test]
fn non_finite_rows() {
    let d = 4;
    let mut h = vec![0.1f64; 3 * d];
    let mut b = vec![1.0f64; 3 * d];
    h[1] = f64::NAN; // row 0
    b[2 * d + 3] = f64::INFINITY; // row 2
    let a = [0.2];
    let mut y = vec![0.0; 3 * d];
    let c = ngpt_forward(&h, &b, &a, d, 1e-12, &mut y, None).unwrap();
    assert!(y[..d].iter().all(|v| v.is_nan()) && y[2 * d..].iter().all(|v| v.is_nan()), "{y:?}");
    assert!(y[d..2 * d].iter().all(|v| v.is_finite()));
    assert_eq!((c.nonfinite_in, c.nonfinite_out), (2, 2 * d as u64));
    // anGPT: elementwise.
    let c = angpt_forward(&h, &b, &a, d, &mut y).unwrap();
    let bad: Vec<usize> = (0..3 * d).filter(|&i| !y[i].is_finite()).collect();
    assert_eq!(bad, vec![1, 2 * d + 3]);
    assert_eq!((c.nonfinite_in, c.nonfinite_out), (2, 2));
    // Zero rows: Norm(0) = 0 (clamp), so h = b = 0 gives 0.
    let z = vec![0.0f64; d];
    let mut y = vec![1.0; d];
    ngpt_forward(&z, &z, &a, d, 1e-12, &mut y, None).unwrap();
    assert!(y.iter().all(|&v| v == 0.0));
}
