//! Gradients of the row forms by central finite differences of `L = sum(r * y)`, in f64
//! (f64 storage, `Accum::F64`), for every kind, centring and constant mode, with weight and
//! bias: `dx`, `dweight` and `dbias` from `row::backward` against
//! `(L(p + h) - L(p - h)) / 2h` of the independent textbook forward, and against the textbook's
//! analytic gradient.
//!
//! Step and bound: `h = 1e-6 * max(1, |p|)` for inputs of unit scale. The central difference
//! has truncation error `h^2 |L'''| / 6` (about 1e-12 here) and rounding error about
//! `1e-16 |L| / h` (about 1e-10 |L|); the check is
//! `|fd - analytic| <= 1e-6 * (1 + max |analytic|)`, four orders above both.
//! Points where the function is not differentiable are avoided: rows whose L1 zeros, L-inf
//! maximum or Top-k boundary are closer than 1e-3 (in |z|) are regenerated (those choices
//! move by at most 2h under the perturbation); the tie rules are tested in `row_edge.rs`.

use crate::common;

use common::{all_specs, textbook, Rng};
use normlab_norms::{row, Accum, NormSpec, RowStats};
use proptest::prelude::*;

fn check_spec(spec: &NormSpec, x: &[f64], n: usize, w: &[f64], b: &[f64], r: &[f64]) -> Result<(), String> {
    let rows = x.len() / n;
    let c = spec.scale_constant(n).unwrap();
    let mut y = vec![0.0; x.len()];
    let mut st = vec![RowStats::default(); rows];
    row::forward(spec, Accum::F64, x, n, Some(w), Some(b), &mut y, Some(&mut st)).unwrap();
    let (mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; n], vec![0.0; n]);
    let cnt = row::backward(spec, Accum::F64, x, r, n, &st, Some(w), &mut dx, Some(&mut dw), Some(&mut db)).unwrap();
    if !cnt.is_clean() {
        return Err(format!("{spec:?}: backward counters {cnt:?}"));
    }
    let scale = 1.0 + dx.iter().chain(&dw).chain(&db).fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = 1e-6 * scale;
    let l_row = |xr: &[f64], w: &[f64], b: &[f64], rr: &[f64]| textbook::functional(spec, c, xr, n, Some(w), Some(b), rr);
    // dx, row by row (L restricted to the row: the other rows do not depend on it).
    let mut tw = vec![0.0; n];
    for i in 0..rows {
        let (xr, rr) = (&x[i * n..(i + 1) * n], &r[i * n..(i + 1) * n]);
        let (tdx, tdw) = textbook::backward_row(spec, c, xr, rr, Some(w));
        // The textbook's own rounding: terms of size |r w| / D cancel (a centred pair has a
        // zero gradient made of two such terms).
        let d = textbook::row_stats(spec, c, xr).d;
        let terms = (0..n).fold(0.0f64, |m, j| m.max((rr[j] * w[j]).abs() / d));
        tdw.iter().zip(tw.iter_mut()).for_each(|(a, t)| *t += a);
        let mut p = xr.to_vec();
        for j in 0..n {
            let h = 1e-6 * p[j].abs().max(1.0);
            let v = p[j];
            p[j] = v + h;
            let lp = l_row(&p, w, b, rr);
            p[j] = v - h;
            let lm = l_row(&p, w, b, rr);
            p[j] = v;
            let fd = (lp - lm) / (2.0 * h);
            let an = dx[i * n + j];
            if (fd - an).abs() > tol || (tdx[j] - an).abs() > 1e-10 * (scale + terms) {
                return Err(format!("{spec:?} n={n} row {i} dx[{j}]: backward {an:e}, finite difference {fd:e}, textbook {:e}", tdx[j]));
            }
        }
    }
    // dweight and dbias over all rows.
    let l_all = |w: &[f64], b: &[f64]| textbook::functional(spec, c, x, n, Some(w), Some(b), r);
    let (mut wp, mut bp) = (w.to_vec(), b.to_vec());
    for j in 0..n {
        let h = 1e-6 * w[j].abs().max(1.0);
        wp[j] = w[j] + h;
        let lp = l_all(&wp, b);
        wp[j] = w[j] - h;
        let lm = l_all(&wp, b);
        wp[j] = w[j];
        let fd = (lp - lm) / (2.0 * h);
        if (fd - dw[j]).abs() > tol || (tw[j] - dw[j]).abs() > 1e-10 * scale {
            return Err(format!("{spec:?} n={n} dweight[{j}]: backward {:e}, finite difference {fd:e}, textbook {:e}", dw[j], tw[j]));
        }
        let h = 1e-6 * b[j].abs().max(1.0);
        bp[j] = b[j] + h;
        let lp = l_all(w, &bp);
        bp[j] = b[j] - h;
        let lm = l_all(w, &bp);
        bp[j] = b[j];
        let fd = (lp - lm) / (2.0 * h);
        if (fd - db[j]).abs() > tol {
            return Err(format!("{spec:?} n={n} dbias[{j}]: backward {:e}, finite difference {fd:e}", db[j]));
        }
    }
    Ok(())
}

const NS: [usize; 7] = [1, 2, 3, 7, 17, 33, 64];

/// A row set far from every kink of `spec` (regenerated up to 200 times; None if not found).
fn smooth_rows(spec: &NormSpec, rng: &mut Rng, rows: usize, n: usize, offset: f64) -> Option<Vec<f64>> {
    for _ in 0..200 {
        let x = common::gaussian(rng, rows * n, 1.0, offset);
        if x.chunks(n).all(|xr| textbook::kink_margin(spec, xr) > 1e-3) {
            return Some(x);
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(24)))]

    #[test]
    fn backward_matches_finite_differences(
        seed in any::<u64>(),
        ni in 0usize..NS.len(),
        rows in 1usize..4,
        offset in prop_oneof![Just(0.0), -3.0f64..3.0],
        eps in prop_oneof![Just(0.0), Just(1e-5), Just(0.1)],
    ) {
        let n = NS[ni];
        let mut rng = Rng::new(seed);
        let (w, b) = common::affine(&mut rng, n);
        let r = common::gaussian(&mut rng, rows * n, 1.0, 0.0);
        let mut checked = 0;
        for spec in all_specs(n, eps) {
            if spec.centred && n == 1 && eps == 0.0 {
                continue; // 0/0
            }
            let Some(x) = smooth_rows(&spec, &mut rng, rows, n, offset) else { continue };
            let res = check_spec(&spec, &x, n, &w, &b, &r);
            prop_assert!(res.is_ok(), "{}", res.unwrap_err());
            checked += 1;
        }
        prop_assert!(checked >= all_specs(n, eps).len() / 2, "too few smooth rows found ({checked})");
    }
}

/// The unit-L2 clamp: with the norm below eps the function is x / eps, gradient r / eps.
#[test]
fn unit_l2_clamped_gradient() {
    let spec = NormSpec::unit_l2(10.0);
    let x = [0.5, -1.0, 2.0];
    let r = [1.0, 2.0, -3.0];
    let w = [1.0; 3];
    let b = [0.0; 3];
    check_spec(&spec, &x, 3, &w, &b, &r).unwrap();
    let mut st = [RowStats::default()];
    let mut y = [0.0; 3];
    row::forward(&spec, Accum::F64, &x, 3, None, None, &mut y, Some(&mut st)).unwrap();
    assert!(st[0].clamped);
    let mut dx = [0.0; 3];
    row::backward(&spec, Accum::F64, &x, &r, 3, &st, None, &mut dx, None, None).unwrap();
    assert_eq!(dx, [0.1, 0.2, -0.30000000000000004]);
}
