//! # residual: the fused residual updates of nGPT and anGPT (CPU reference)
//!
//! Rows of width `d` (the model width), `[rows, d]` row-major; `a` holds one coefficient per
//! dimension (length `d`) or one for every dimension (length 1):
//!
//! ```text
//! nGPT  (algorithms.md 1.3 steps 6, 10):  y = Norm(r),  r = h + a ⊙ (B − h),  B = Norm(b)
//!                                          Norm(x) = x / max(‖x‖₂, eps)   (PyTorch F.normalize)
//! anGPT (algorithms.md 2.4):               y = ν(a) ⊙ (h + a ⊙ (b − h)),  ν(a) = (1 − 2a + 2a²)^(−1/2)
//! ```
//!
//! `h` is the residual stream, `b` the block output (attention or MLP), `a` nGPT's eigen learning
//! rate `|alpha_eff|` or anGPT's `alpha` (any real value is accepted: `1 − 2a + 2a² ≥ 1/2`).
//! For a scalar `a` (length 1) the same formulas hold with `a` broadcast, and `da` is one value.
//!
//! # Backward
//! With `g = dL/dy`, per row (nGPT, `s_r = 1/max(‖r‖, eps)`, `s_b = 1/max(‖b‖, eps)`; a clamped
//! norm (below eps) has the plain `s g` form, as unit L2 in [`crate::row`]):
//!
//! ```text
//! nGPT   dr = s_r (g − y (y · g))      dh = (1 − a) ⊙ dr
//!        dB = a ⊙ dr                   db = s_b (dB − B (B · dB))
//!        da_j = Σ_rows dr_j (B_j − h_j)            (scalar a: also summed over j)
//! anGPT  c_h = ν(a)(1 − a), c_b = ν(a) a           y = c_h ⊙ h + c_b ⊙ b
//!        dh = c_h ⊙ g                  db = c_b ⊙ g
//!        da_j = Σ_rows g_j ν_j² (c_h,j b_j − c_b,j h_j)   (= g ν³ ((1 − a) b − a h): dν/da = (1 − 2a) ν³)
//! ```
//!
//! # Reference path and rounding
//! Every value is widened exactly to f64; the norms are those of [`crate::row`]'s unit L2 with
//! f64 storage and `Accum::F64` (the project's reference: power-of-two rescue of rows whose
//! squares would overflow or underflow, the clamp at eps, a non-finite input giving an all-NaN
//! row); the results are rounded once into the storage type `T`. `da` is returned in f64, summed
//! over rows in row order (deterministic).
//!
//! # Non-finite input
//! nGPT couples a row through its norms: a NaN or ±Inf in `h` or `b` (or in `a`) makes the whole
//! output row NaN (the row's `dh`, `db` too, and `da` NaN), counted in `nonfinite_in`. anGPT is
//! elementwise: IEEE propagation per element (`y_j` is NaN or ±Inf where `h_j`, `b_j` or `a_j`
//! is), no row is touched beyond its own non-finite elements.

use crate::accum::Accum;
use crate::counters::Counters;
use crate::element::Element;
use crate::error::{NormError, Result};
use crate::row::{self, RowStats};
use crate::spec::NormSpec;

/// anGPT's residual factor `ν(a) = (1 − 2a + 2a²)^(−1/2) = ((1 − a)² + a²)^(−1/2)`, for any
/// real `a` (the quadratic is at least 1/2). [`crate::nu::closed::residual_factor`] is the same
/// value restricted to `a ∈ [0, 1]` with a typed error.
pub fn lerp_nu(a: f64) -> f64 {
    let om = 1.0 - a;
    1.0 / (om * om + a * a).sqrt()
}

/// The per-row statistics of the nGPT update: those of the two unit-L2 norms (f64 path), the
/// `RowStats` of [`crate::row`] (`rscale` = `1/max(‖·‖, eps)` of the rescaled row, `exp2`,
/// `clamped`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NgptRowStats {
    /// `Norm(b)`.
    pub b: RowStats,
    /// `Norm(r)`, `r = h + a (B − h)`.
    pub r: RowStats,
}

/// Rows of `len` elements of width `d`, with `a` of length 1 or `d`. Errors name the value.
fn check_shape(len: usize, d: usize, a_len: usize) -> Result<usize> {
    if d == 0 {
        return Err(NormError::Empty { what: "the update width d", value: d });
    }
    if !len.is_multiple_of(d) {
        return Err(NormError::Shape(format!("h of {len} elements is not a whole number of rows of d = {d}")));
    }
    if a_len != 1 && a_len != d {
        return Err(NormError::Length { what: "a (one value, or one per dimension)", expected: d, got: a_len });
    }
    Ok(len / d)
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(NormError::Length { what, expected, got });
    }
    Ok(())
}

fn widen<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

fn count_nonfinite<T: Element>(v: &[T]) -> u64 {
    T::count_nonfinite(v)
}

/// `a` for column `j`.
#[inline]
fn coef(a: &[f64], j: usize) -> f64 {
    if a.len() == 1 {
        a[0]
    } else {
        a[j]
    }
}

/// Unit L2 of every row in f64 (the reference): output and statistics.
fn unit_rows(spec: &NormSpec, x: &[f64], d: usize) -> Result<(Vec<f64>, Vec<RowStats>)> {
    let mut y = vec![0.0; x.len()];
    let mut st = vec![RowStats::default(); x.len() / d];
    row::forward(spec, Accum::F64, x, d, None, None, &mut y, Some(&mut st))?;
    Ok((y, st))
}

/// The nGPT forward in f64: `(B, r, y, statistics)` for every row.
#[allow(clippy::type_complexity)]
fn ngpt_f64(h: &[f64], b: &[f64], a: &[f64], d: usize, eps: f64) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>, Vec<NgptRowStats>)> {
    let spec = NormSpec::unit_l2(eps);
    let (bn, bst) = unit_rows(&spec, b, d)?;
    let r: Vec<f64> = (0..h.len()).map(|i| h[i] + coef(a, i % d) * (bn[i] - h[i])).collect();
    let (y, rst) = unit_rows(&spec, &r, d)?;
    let st = bst.iter().zip(&rst).map(|(&b, &r)| NgptRowStats { b, r }).collect();
    Ok((bn, r, y, st))
}

/// nGPT forward `y = Norm(h + a (Norm(b) − h))`, rounded once into `T`; `stats` (one per row),
/// if given, receives the f64 statistics of both norms.
#[allow(clippy::too_many_arguments)]
pub fn ngpt_forward<T: Element>(
    h: &[T],
    b: &[T],
    a: &[f64],
    d: usize,
    eps: f64,
    y: &mut [T],
    stats: Option<&mut [NgptRowStats]>,
) -> Result<Counters> {
    let rows = check_shape(h.len(), d, a.len())?;
    check_len("b", h.len(), b.len())?;
    check_len("output", h.len(), y.len())?;
    if let Some(s) = stats.as_deref() {
        check_len("stats", rows, s.len())?;
    }
    NormSpec::unit_l2(eps).validate(d)?;
    let (_, _, y64, st) = ngpt_f64(&widen(h), &widen(b), a, d, eps)?;
    for (o, v) in y.iter_mut().zip(&y64) {
        *o = T::from_f64(*v);
    }
    if let Some(s) = stats {
        s.copy_from_slice(&st);
    }
    Ok(Counters { nonfinite_in: count_nonfinite(h) + count_nonfinite(b), acc_overflow: 0, nonfinite_out: count_nonfinite(y) })
}

/// nGPT backward from `dy`: `dh`, `db` rounded once into `T`, and `da` (length of `a`) in f64
/// if given. Recomputes the forward from `h`, `b`, `a` (no saved state needed).
#[allow(clippy::too_many_arguments)]
pub fn ngpt_backward<T: Element>(
    h: &[T],
    b: &[T],
    a: &[f64],
    d: usize,
    eps: f64,
    dy: &[T],
    dh: &mut [T],
    db: &mut [T],
    da: Option<&mut [f64]>,
) -> Result<Counters> {
    let rows = check_shape(h.len(), d, a.len())?;
    for (what, len) in [("b", b.len()), ("dy", dy.len()), ("dh", dh.len()), ("db", db.len())] {
        check_len(what, h.len(), len)?;
    }
    if let Some(g) = da.as_deref() {
        check_len("da", a.len(), g.len())?;
    }
    let spec = NormSpec::unit_l2(eps);
    spec.validate(d)?;
    let (h64, b64, g64) = (widen(h), widen(b), widen(dy));
    let (bn, r, _, st) = ngpt_f64(&h64, &b64, a, d, eps)?;
    let rst: Vec<RowStats> = st.iter().map(|s| s.r).collect();
    let bst: Vec<RowStats> = st.iter().map(|s| s.b).collect();
    // dr = d Norm(r) / dr applied to g (unit L2 backward of crate::row, f64 path).
    let mut dr = vec![0.0; h.len()];
    row::backward(&spec, Accum::F64, &r, &g64, d, &rst, None, &mut dr, None, None)?;
    let dbn: Vec<f64> = (0..h.len()).map(|i| coef(a, i % d) * dr[i]).collect();
    let mut db64 = vec![0.0; h.len()];
    row::backward(&spec, Accum::F64, &b64, &dbn, d, &bst, None, &mut db64, None, None)?;
    for i in 0..h.len() {
        dh[i] = T::from_f64((1.0 - coef(a, i % d)) * dr[i]);
        db[i] = T::from_f64(db64[i]);
    }
    if let Some(g) = da {
        g.fill(0.0);
        for row in 0..rows {
            for j in 0..d {
                let i = row * d + j;
                g[if a.len() == 1 { 0 } else { j }] += dr[i] * (bn[i] - h64[i]);
            }
        }
    }
    Ok(Counters {
        nonfinite_in: count_nonfinite(h) + count_nonfinite(b) + count_nonfinite(dy),
        acc_overflow: 0,
        nonfinite_out: count_nonfinite(dh) + count_nonfinite(db),
    })
}

/// anGPT's coefficients `(c_h, c_b, ν)` for one `a`: `y = c_h h + c_b b`.
#[inline]
pub fn angpt_coefs(a: f64) -> (f64, f64, f64) {
    let nu = lerp_nu(a);
    (nu * (1.0 - a), nu * a, nu)
}

/// anGPT forward `y = ν(a) (h + a (b − h))` (computed as `c_h h + c_b b`, the same value in
/// exact arithmetic, without the intermediate overflow of `b − h`), rounded once into `T`.
pub fn angpt_forward<T: Element>(h: &[T], b: &[T], a: &[f64], d: usize, y: &mut [T]) -> Result<Counters> {
    check_shape(h.len(), d, a.len())?;
    check_len("b", h.len(), b.len())?;
    check_len("output", h.len(), y.len())?;
    for i in 0..h.len() {
        let (ch, cb, _) = angpt_coefs(coef(a, i % d));
        y[i] = T::from_f64(ch * h[i].to_f64() + cb * b[i].to_f64());
    }
    Ok(Counters { nonfinite_in: count_nonfinite(h) + count_nonfinite(b), acc_overflow: 0, nonfinite_out: count_nonfinite(y) })
}

/// anGPT backward from `dy`: `dh`, `db` rounded once into `T`, `da` (length of `a`) in f64.
#[allow(clippy::too_many_arguments)]
pub fn angpt_backward<T: Element>(
    h: &[T],
    b: &[T],
    a: &[f64],
    d: usize,
    dy: &[T],
    dh: &mut [T],
    db: &mut [T],
    da: Option<&mut [f64]>,
) -> Result<Counters> {
    check_shape(h.len(), d, a.len())?;
    for (what, len) in [("b", b.len()), ("dy", dy.len()), ("dh", dh.len()), ("db", db.len())] {
        check_len(what, h.len(), len)?;
    }
    if let Some(g) = da.as_deref() {
        check_len("da", a.len(), g.len())?;
    }
    let mut acc = da;
    if let Some(g) = acc.as_deref_mut() {
        g.fill(0.0);
    }
    for i in 0..h.len() {
        let j = i % d;
        let (ch, cb, nu) = angpt_coefs(coef(a, j));
        let g = dy[i].to_f64();
        dh[i] = T::from_f64(ch * g);
        db[i] = T::from_f64(cb * g);
        if let Some(da) = acc.as_deref_mut() {
            da[if a.len() == 1 { 0 } else { j }] += g * nu * nu * (ch * b[i].to_f64() - cb * h[i].to_f64());
        }
    }
    Ok(Counters {
        nonfinite_in: count_nonfinite(h) + count_nonfinite(b) + count_nonfinite(dy),
        acc_overflow: 0,
        nonfinite_out: count_nonfinite(dh) + count_nonfinite(db),
    })
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn nu_values_of_algorithms_md_4_5() {
        for (a, want) in [(0.01, 1.010049), (0.05, 1.051177), (0.1, 1.104315), (0.2, 1.212678), (0.5, std::f64::consts::SQRT_2)] {
            assert!((lerp_nu(a) - want).abs() < 1e-6, "nu({a}) = {}", lerp_nu(a));
            assert!((lerp_nu(a) - crate::nu::closed::residual_factor(a).unwrap()).abs() < 1e-15);
        }
        assert_eq!(lerp_nu(0.0), 1.0);
        assert_eq!(lerp_nu(1.0), 1.0);
    }

    fn typed_errors_name_the_value() {
        let h = [0.0f64; 6];
        let mut y = [0.0f64; 6];
        let e = ngpt_forward(&h, &h, &[0.1; 2], 3, 1e-12, &mut y, None).unwrap_err();
        assert!(e.to_string().contains("expected length 3, got 2"), "{e}");
        let e = angpt_forward(&h, &h, &[0.1], 4, &mut y).unwrap_err();
        assert!(e.to_string().contains("d = 4"), "{e}");
        let e = ngpt_forward(&h, &h, &[0.1], 0, 1e-12, &mut y, None).unwrap_err();
        assert!(matches!(e, NormError::Empty { .. }), "{e}");
        let e = ngpt_forward(&h, &h, &[0.1], 3, -1.0, &mut y, None).unwrap_err();
        assert!(matches!(e, NormError::InvalidEps { .. }), "{e}");
        let mut short = [0.0f64; 5];
        let e = angpt_forward(&h, &h, &[0.1], 3, &mut short).unwrap_err();
        assert!(e.to_string().contains("got 5"), "{e}");
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![nu_values_of_algorithms_md_4_5, typed_errors_name_the_value];
}
