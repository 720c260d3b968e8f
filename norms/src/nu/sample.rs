//! Exact samplers for random unit vectors and for random unit-row matrices applied to vectors.
//!
//! Why not draw the matrices: a linear map `W in R^{r x d}` with independent rows uniform on the
//! unit sphere, applied to a fixed vector `x`, gives coordinates `w_i . x` that are independent and
//! distributed as `||x|| * t_i`, where `t_i` is one coordinate of a uniform unit vector in `R^d`:
//!
//! `t = g_1 / sqrt(g_1^2 + chi^2_{d-1})`, `g_1 ~ N(0, 1)` (density `∝ (1 - t^2)^{(d-3)/2}`).
//!
//! So `W x` costs `r` draws instead of `r * d`. The same `W` applied to `m` vectors `x_1..x_m`
//! only sees their span: in an orthonormal basis of it, the projection of a uniform unit row is
//! the first `m` coordinates of a uniform unit vector of `R^d`, i.e.
//! `(g_1..g_m) / sqrt(g_1^2 + .. + g_m^2 + chi^2_{d-m})` (`SphereHead`). And `m` independent
//! uniform unit vectors, in the Gram-Schmidt basis of their own span, are the normalised rows of
//! the Bartlett factor `L` of a Gaussian matrix: `L_jj = sqrt(chi^2_{d-j})` (j from 0),
//! `L_jk ~ N(0, 1)` for `k < j` (`bartlett_unit_rows`). Both are exact in distribution.

use rand::Rng;
use rand_distr::{ChiSquared, Distribution, StandardNormal};

/// Standard normal draw.
#[inline]
pub fn normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    rng.sample(StandardNormal)
}

/// Chi-squared draws with `k >= 0` degrees of freedom (`k = 0` is the constant 0).
#[derive(Debug, Clone)]
pub struct ChiSq {
    dist: Option<ChiSquared<f64>>,
}

impl ChiSq {
    pub fn new(k: usize) -> Self {
        // k >= 1 is always a valid parameter for ChiSquared.
        ChiSq { dist: if k == 0 { None } else { ChiSquared::new(k as f64).ok() } }
    }
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match &self.dist {
            Some(d) => d.sample(rng),
            None => 0.0,
        }
    }
}

/// The first `m` coordinates of a uniform unit vector of `R^d` (`m <= d`).
#[derive(Debug, Clone)]
pub struct SphereHead {
    m: usize,
    rest: ChiSq,
    /// For one coordinate and `d >= REJECTION_MIN_D`: the exponent `k = (d - 3)/2` of the
    /// density `(1 - t^2)^k` and the proposal's standard deviation `1/sqrt(2k)`.
    reject: Option<(f64, f64)>,
}

/// From this dimension on, one sphere coordinate is drawn by rejection from a Gaussian
/// proposal (acceptance `>= 0.9` from d = 16, `> 0.99` from d = 128).
pub const REJECTION_MIN_D: usize = 16;

impl SphereHead {
    pub fn new(d: usize, m: usize) -> Self {
        debug_assert!(m <= d && m >= 1);
        let reject = if m == 1 && d >= REJECTION_MIN_D {
            let k = (d as f64 - 3.0) / 2.0;
            Some((k, 1.0 / (2.0 * k).sqrt()))
        } else {
            None
        };
        SphereHead { m, rest: ChiSq::new(d - m), reject }
    }

    /// Writes the `m` coordinates, multiplied by `scale`, into `out[..m]`.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R, scale: f64, out: &mut [f64]) {
        let mut ss = 0.0;
        for o in out[..self.m].iter_mut() {
            let g = normal(rng);
            *o = g;
            ss += g * g;
        }
        ss += self.rest.sample(rng);
        let k = scale / ss.sqrt();
        for o in out[..self.m].iter_mut() {
            *o *= k;
        }
    }

    /// One coordinate (`m = 1`), multiplied by `scale`.
    ///
    /// Small `d`: `g / sqrt(g^2 + chi^2_{d-1})`. From [`REJECTION_MIN_D`] on, exact rejection
    /// sampling, which needs no chi-squared draw, square root or division: the target density is
    /// `∝ (1 - t^2)^k`, `k = (d-3)/2`; the proposal `t ~ N(0, 1/(2k))` has kernel `exp(-k t^2)`,
    /// and `(1 - t^2)^k <= exp(-k t^2)` because `ln(1 - x) <= -x`, so `t` is accepted with
    /// probability `exp(k (ln(1 - t^2) + t^2))` (`|t| < 1`). Squeeze: with `x = t^2`,
    /// `ln(1 - x) + x >= -x^2 / (2 (1 - x))` and `ln u <= u - 1`, so `u - 1 < -k x^2/(2(1-x))`
    /// accepts without a logarithm (almost always, for large `d`).
    #[inline]
    pub fn sample_one<R: Rng + ?Sized>(&self, rng: &mut R, scale: f64) -> f64 {
        match self.reject {
            None => {
                let g = normal(rng);
                scale * g / (g * g + self.rest.sample(rng)).sqrt()
            }
            Some((k, sd)) => loop {
                let t = sd * normal(rng);
                let x = t * t;
                if x >= 1.0 {
                    continue;
                }
                let u: f64 = rng.gen();
                if u - 1.0 < -k * x * x / (2.0 * (1.0 - x)) || u.ln() < k * ((-x).ln_1p() + x) {
                    return scale * t;
                }
            },
        }
    }
}

/// A uniform unit vector of `R^d` (Gaussian, normalised) into `out[..d]`.
pub fn unit_vector<R: Rng + ?Sized>(rng: &mut R, out: &mut [f64]) {
    loop {
        let mut ss = 0.0;
        for o in out.iter_mut() {
            let g = normal(rng);
            *o = g;
            ss += g * g;
        }
        if ss > 0.0 {
            let k = 1.0 / ss.sqrt();
            out.iter_mut().for_each(|o| *o *= k);
            return;
        }
    }
}

/// `m` independent uniform unit vectors of `R^d` (`m <= d`), as the rows of an `m x m`
/// row-major matrix of coordinates in an orthonormal basis of their span (Bartlett).
pub fn bartlett_unit_rows<R: Rng + ?Sized>(rng: &mut R, d: usize, m: usize, chis: &[ChiSq], out: &mut [f64]) {
    debug_assert!(m <= d && chis.len() >= m && out.len() >= m * m);
    for j in 0..m {
        let row = &mut out[j * m..(j + 1) * m];
        let mut ss = 0.0;
        for (k, v) in row.iter_mut().enumerate() {
            *v = if k < j {
                normal(rng)
            } else if k == j {
                loop {
                    let c = chis[j].sample(rng);
                    if c > 0.0 {
                        break c.sqrt();
                    }
                }
            } else {
                0.0
            };
            ss += *v * *v;
        }
        let s = 1.0 / ss.sqrt();
        row.iter_mut().for_each(|v| *v *= s);
    }
}

/// The chi-squared samplers `bartlett_unit_rows` needs for `(d, m)`: degrees of freedom `d - j`.
pub fn bartlett_chis(d: usize, m: usize) -> Vec<ChiSq> {
    (0..m).map(|j| ChiSq::new(d - j)).collect()
}

/// The uniform-ball radius factor `U^{1/d}` (the norm of a uniform point of the unit `d`-ball).
#[inline]
pub fn ball_radius<R: Rng + ?Sized>(rng: &mut R, d: usize) -> f64 {
    let u: f64 = rng.gen();
    u.powf(1.0 / d as f64)
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;
    use crate::nu::rng::StreamRng;

    fn sphere_coordinate_second_moment_is_one_over_d() {
        let mut rng = StreamRng::new(1, 0);
        for d in [1usize, 2, 7, 15, 16, 17, 64, 1000] {
            let h = SphereHead::new(d, 1);
            let n = 400_000;
            let (mut m2, mut m4) = (0.0, 0.0);
            for _ in 0..n {
                let t = h.sample_one(&mut rng, 1.0);
                m2 += t * t;
                m4 += t.powi(4);
            }
            let (m2, m4) = (m2 / n as f64, m4 / n as f64);
            let df = d as f64;
            // E t^2 = 1/d, E t^4 = 3/(d(d+2)); Var(t^2) <= E t^4 <= 3/d^2, Var(t^4) <= 105/d^4.
            let tol2 = 5.0 * (3.0f64).sqrt() / df / (n as f64).sqrt();
            let tol4 = 5.0 * (105.0f64).sqrt() / (df * df) / (n as f64).sqrt();
            assert!((m2 - 1.0 / df).abs() < tol2, "d={d}: {m2}");
            assert!((m4 - 3.0 / (df * (df + 2.0))).abs() < tol4, "d={d}: {m4}");
        }
    }

    fn bartlett_rows_are_unit_with_the_right_inner_products() {
        let mut rng = StreamRng::new(2, 0);
        let (d, m) = (10, 3);
        let chis = bartlett_chis(d, m);
        let mut out = vec![0.0; m * m];
        let n = 100_000;
        let mut ip2 = 0.0;
        for _ in 0..n {
            bartlett_unit_rows(&mut rng, d, m, &chis, &mut out);
            for j in 0..m {
                let s: f64 = out[j * m..(j + 1) * m].iter().map(|v| v * v).sum();
                assert!((s - 1.0).abs() < 1e-12);
            }
            let ip: f64 = (0..m).map(|k| out[k] * out[2 * m + k]).sum();
            ip2 += ip * ip;
        }
        // Two independent unit vectors of R^d: E[(x.y)^2] = 1/d.
        let v = ip2 / n as f64;
        assert!((v - 0.1).abs() < 0.003, "{v}");
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![sphere_coordinate_second_moment_is_one_over_d, bartlett_rows_are_unit_with_the_right_inner_products];
}
