//! Bounded weight normalisation: forward values, rho at init, gradients against central finite
//! differences (f64 storage), one rounding for 16-bit storage, typed errors.

use half::{bf16, f16};
use normlab_norms::weight::{BoundedWeightNorm, GainPinnedWeightNorm, LpNorm, MatShape, RhoInit};
use normlab_norms::{Element, NormError};

/// Deterministic pseudo-random values in (-1, 1) away from 0 and without ties in |.|.
fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let s = if u < 0.5 { -1.0 } else { 1.0 };
            s * (0.1 + 0.9 * (2.0 * u - 1.0).abs()) + 1e-9 * i as f64
        })
        .collect()
}

const PS: [LpNorm; 3] = [LpNorm::L1, LpNorm::L2, LpNorm::LInf];

#[test]
fn forward_rows_have_norm_rho_and_rho_inits() {
    let s = MatShape::new(4, 9);
    let v0 = vals(36, 1);
    for p in PS {
        let bwn = BoundedWeightNorm::init(&v0, s, p, RhoInit::PaperFrobenius).unwrap();
        let fro = v0.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((bwn.rho - fro / 2.0).abs() < 1e-14);
        let mut w = vec![0.0; 36];
        bwn.forward(&v0, &mut w).unwrap();
        for r in w.chunks(9) {
            assert!((p.norm(r) - bwn.rho).abs() < 1e-13);
        }
        let mean = BoundedWeightNorm::init(&v0, s, p, RhoInit::MeanLineNorm).unwrap();
        let want = v0.chunks(9).map(|r| p.norm(r)).sum::<f64>() / 4.0;
        assert!((mean.rho - want).abs() < 1e-14);
        // Gain-pinned: W(0) = V_0 for every p.
        let (gp, g0) = GainPinnedWeightNorm::init(&v0, s, p).unwrap();
        gp.forward(&v0, &g0, &mut w).unwrap();
        for (a, b) in w.iter().zip(&v0) {
            assert!((a - b).abs() < 1e-15, "{p:?}");
        }
    }
}

/// L(v, g) = sum dw . W(v, g) for a fixed random dw; central differences with step h.
#[test]
fn gradients_match_finite_differences() {
    let s = MatShape::new(3, 7);
    let v = vals(21, 2);
    let dw = vals(21, 3);
    let h = 1e-6;
    for p in PS {
        let bwn = BoundedWeightNorm::init(&v, s, p, RhoInit::Given(1.7)).unwrap();
        let loss = |v: &[f64]| {
            let mut w = vec![0.0; 21];
            bwn.forward(v, &mut w).unwrap();
            w.iter().zip(&dw).map(|(a, b)| a * b).sum::<f64>()
        };
        let mut dv = vec![0.0; 21];
        bwn.backward(&v, &dw, &mut dv).unwrap();
        for k in 0..21 {
            let (mut a, mut b) = (v.clone(), v.clone());
            a[k] += h;
            b[k] -= h;
            let fd = (loss(&a) - loss(&b)) / (2.0 * h);
            assert!((fd - dv[k]).abs() < 1e-7 * (1.0 + fd.abs()), "{p:?} v[{k}]: fd {fd} vs {}", dv[k]);
        }

        let (gp, g0) = GainPinnedWeightNorm::init(&v, s, p).unwrap();
        let g: Vec<f64> = g0.iter().zip([0.9, 1.3, 0.7]).map(|(a, b)| a * b).collect();
        let loss = |v: &[f64], g: &[f64]| {
            let mut w = vec![0.0; 21];
            gp.forward(v, g, &mut w).unwrap();
            w.iter().zip(&dw).map(|(a, b)| a * b).sum::<f64>()
        };
        let (mut dv, mut dg) = (vec![0.0; 21], vec![0.0; 3]);
        gp.backward(&v, &g, &dw, &mut dv, &mut dg).unwrap();
        for k in 0..21 {
            let (mut a, mut b) = (v.clone(), v.clone());
            a[k] += h;
            b[k] -= h;
            let fd = (loss(&a, &g) - loss(&b, &g)) / (2.0 * h);
            assert!((fd - dv[k]).abs() < 1e-7 * (1.0 + fd.abs()), "gain-pinned {p:?} v[{k}]: fd {fd} vs {}", dv[k]);
        }
        for k in 0..3 {
            let (mut a, mut b) = (g.clone(), g.clone());
            a[k] += h;
            b[k] -= h;
            let fd = (loss(&v, &a) - loss(&v, &b)) / (2.0 * h);
            assert!((fd - dg[k]).abs() < 1e-7 * (1.0 + fd.abs()), "gain-pinned {p:?} g[{k}]: fd {fd} vs {}", dg[k]);
        }
        // The pinned gain norm makes L invariant to scaling g: dg . g = 0.
        let dot: f64 = dg.iter().zip(&g).map(|(a, b)| a * b).sum();
        assert!(dot.abs() < 1e-12, "{dot}");
    }
}

fn one_rounding<T: Element>() {
    let s = MatShape::new(5, 11);
    let v64 = vals(55, 4);
    let vt: Vec<T> = v64.iter().map(|x| T::from_f64(*x)).collect();
    let vw: Vec<f64> = vt.iter().map(|x| x.to_f64()).collect();
    let dw64 = vals(55, 5);
    let dwt: Vec<T> = dw64.iter().map(|x| T::from_f64(*x)).collect();
    let dww: Vec<f64> = dwt.iter().map(|x| x.to_f64()).collect();
    for p in PS {
        let b = BoundedWeightNorm::init(&vt, s, p, RhoInit::PaperFrobenius).unwrap();
        let mut w = vec![T::default(); 55];
        b.forward(&vt, &mut w).unwrap();
        let mut wr = vec![0.0f64; 55];
        b.forward(&vw, &mut wr).unwrap();
        let mut dv = vec![T::default(); 55];
        b.backward(&vt, &dwt, &mut dv).unwrap();
        let mut dvr = vec![0.0f64; 55];
        b.backward(&vw, &dww, &mut dvr).unwrap();
        for k in 0..55 {
            // Reference on the same (widened) inputs in f64: the result differs by one rounding.
            assert!((w[k].to_f64() - wr[k]).abs() <= 0.5 * T::DTYPE.ulp(wr[k]) * (1.0 + 1e-9), "{:?} {p:?} w[{k}]", T::DTYPE);
            assert!((dv[k].to_f64() - dvr[k]).abs() <= 0.5 * T::DTYPE.ulp(dvr[k]) * (1.0 + 1e-9), "{:?} {p:?} dv[{k}]", T::DTYPE);
        }
    }
}

#[test]
fn storage_types_round_once() {
    one_rounding::<f32>();
    one_rounding::<f16>();
    one_rounding::<bf16>();
}

#[test]
fn bad_input_is_a_typed_error() {
    assert!(matches!(LpNorm::from_p(3.0), Err(NormError::OutOfRange { value, .. }) if value == 3.0));
    let s = MatShape::new(2, 3);
    let v = vec![1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0];
    let b = BoundedWeightNorm::init(&v, s, LpNorm::L2, RhoInit::PaperFrobenius).unwrap();
    let mut w = vec![0.0f32; 6];
    match b.forward(&v, &mut w) {
        Err(NormError::Shape(m)) => assert!(m.contains("row 1"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(BoundedWeightNorm::init(&v[..5], s, LpNorm::L2, RhoInit::MeanLineNorm), Err(NormError::Length { expected: 6, got: 5, .. })));
    assert!(matches!(BoundedWeightNorm::init(&v, s, LpNorm::L2, RhoInit::Given(-1.0)), Err(NormError::OutOfRange { .. })));
    assert!(GainPinnedWeightNorm::init(&v, s, LpNorm::L1).is_err());
    let ok = vec![1.0f32; 6];
    let (gp, _) = GainPinnedWeightNorm::init(&ok, s, LpNorm::L1).unwrap();
    assert!(matches!(gp.forward(&ok, &[1.0f32], &mut w), Err(NormError::Length { what: "gains g", .. })));
    assert!(matches!(gp.forward(&ok, &[0.0f32, 0.0], &mut w), Err(NormError::OutOfRange { .. })));
}
