//! nGPT unit projection and anGPT ball projection: norms after rounding into storage,
//! idempotence, agreement with the f64 reference, axis handling, special lines, typed errors.

use half::{bf16, f16};
use normlab_norms::weight::{project_ball, project_unit, unit_tolerance, Axis, Bound, MatShape};
use normlab_norms::{DType, Element, NormError};
use proptest::prelude::*;

fn line_norms<T: Element>(w: &[T], s: MatShape, axis: Axis) -> Vec<f64> {
    let (n, len) = s.lines(axis);
    (0..n)
        .map(|l| {
            (0..len)
                .map(|k| {
                    let idx = match axis {
                        Axis::Rows => l * s.inp + k,
                        Axis::Cols => k * s.inp + l,
                    };
                    let v = w[idx].to_f64();
                    v * v
                })
                .sum::<f64>()
                .sqrt()
        })
        .collect()
}

fn unit_roundoff<T: Element>() -> f64 {
    2f64.powi(-(T::DTYPE.mantissa_digits() as i32))
}

fn matrix<T: Element>(vals: &[f64], scale: f64) -> Vec<T> {
    vals.iter().map(|v| T::from_f64(v * scale)).collect()
}

/// Checks of one projection of one matrix in storage type T.
fn check_unit<T: Element>(vals: &[f64], scale: f64, s: MatShape, axis: Axis) {
    let w0: Vec<T> = matrix(vals, scale);
    let mut w = w0.clone();
    let rep = project_unit(&mut w, s, axis).unwrap();
    let before = line_norms(&w0, s, axis);
    let after = line_norms(&w, s, axis);
    let u = unit_roundoff::<T>();
    let (_, len) = s.lines(axis);
    for (l, (b, a)) in before.iter().zip(&after).enumerate() {
        if *b == 0.0 {
            assert_eq!(*a, 0.0);
            continue;
        }
        // After rounding into storage: |norm - 1| <= u + 1e-12.
        assert!((a - 1.0).abs() <= unit_tolerance::<T>(), "{:?} line {l}: norm {a}", T::DTYPE);
        assert!(unit_tolerance::<T>() < 1.001 * u || T::DTYPE == DType::F64);
        // Against the f64 reference x/||x||: one rounding, so within half an ulp of the storage type
        // (here: one ulp, the ulp taken at the reference value).
        for k in 0..len {
            let idx = match axis {
                Axis::Rows => l * s.inp + k,
                Axis::Cols => k * s.inp + l,
            };
            let exact = w0[idx].to_f64() / b;
            let got = w[idx].to_f64();
            // f64 storage: the norm and the scale themselves round in f64, so allow 4 ulps there.
            let k = if T::DTYPE == DType::F64 { 4.0 } else { 1.0 };
            assert!((got - exact).abs() <= k * T::DTYPE.ulp(exact), "{:?}: {got} vs {exact}", T::DTYPE);
        }
    }
    assert_eq!(rep.lines, before.len());
    // Idempotent: a second pass changes no bit.
    let mut w2 = w.clone();
    let rep2 = project_unit(&mut w2, s, axis).unwrap();
    assert_eq!(w2, w);
    assert_eq!(rep2.projected, 0);
}

fn check_ball<T: Element>(vals: &[f64], scale: f64, s: MatShape, bound: Bound) {
    let w0: Vec<T> = matrix(vals, scale);
    let mut w = w0.clone();
    project_ball(&mut w, s, bound, 1.0).unwrap();
    let (axis, whole) = match bound {
        Bound::PerLine(a) => (a, false),
        Bound::Frobenius => (Axis::Rows, true),
    };
    let u = unit_roundoff::<T>();
    if whole {
        let n0: f64 = w0.iter().map(|v| v.to_f64().powi(2)).sum::<f64>();
        let n1: f64 = w.iter().map(|v| v.to_f64().powi(2)).sum::<f64>();
        assert!(n1 <= 1.0, "Frobenius norm^2 {n1}");
        if n0 <= 1.0 {
            assert_eq!(w, w0);
        } else {
            assert!(n1.sqrt() >= 1.0 - 4.0 * u - 1e-12, "{n1}");
        }
    } else {
        let before = line_norms(&w0, s, axis);
        let after = line_norms(&w, s, axis);
        for (b, a) in before.iter().zip(&after) {
            // Exactly inside the unit ball in f64 over the stored values.
            assert!(*a <= 1.0, "{:?} norm {a}", T::DTYPE);
            if *b <= 1.0 {
                assert_eq!(a, b, "a line inside the ball must not change");
            } else {
                // Projected onto the sphere up to rounding (the retry shrinks by at most a few u).
                assert!(*a >= 1.0 - 4.0 * u - 1e-12, "{:?}: {a}", T::DTYPE);
            }
        }
    }
    let mut w2 = w.clone();
    project_ball(&mut w2, s, bound, 1.0).unwrap();
    assert_eq!(w2, w, "idempotent");
}

fn shapes() -> impl Strategy<Value = (usize, usize, Vec<f64>)> {
    (prop_oneof![Just(1usize), 1usize..9, Just(33usize)], prop_oneof![Just(1usize), 1usize..40, Just(257usize)]).prop_flat_map(|(o, i)| {
        (Just(o), Just(i), proptest::collection::vec(prop_oneof![-3.0f64..3.0, Just(0.0)], o * i))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn unit_projection_all_types((o, i, vals) in shapes(), scale in prop_oneof![Just(1e-3f64), Just(0.37), Just(1.0), Just(30.0)]) {
        let s = MatShape::new(o, i);
        for axis in [Axis::Rows, Axis::Cols] {
            check_unit::<f32>(&vals, scale, s, axis);
            check_unit::<f16>(&vals, scale, s, axis);
            check_unit::<bf16>(&vals, scale, s, axis);
            check_unit::<f64>(&vals, scale, s, axis);
        }
    }

    #[test]
    fn ball_projection_all_types((o, i, vals) in shapes(), scale in prop_oneof![Just(1e-3f64), Just(0.37), Just(1.0), Just(30.0)]) {
        let s = MatShape::new(o, i);
        for bound in [Bound::PerLine(Axis::Rows), Bound::PerLine(Axis::Cols), Bound::Frobenius] {
            check_ball::<f32>(&vals, scale, s, bound);
            check_ball::<f16>(&vals, scale, s, bound);
            check_ball::<bf16>(&vals, scale, s, bound);
            check_ball::<f64>(&vals, scale, s, bound);
        }
    }
}

#[test]
fn near_f16_max_and_tiny_values() {
    // Lines near the f16 maximum (their squared norm overflows f16 but not the f64 accumulator).
    let s = MatShape::new(2, 4);
    let mut w: Vec<f16> = [65504.0, -60000.0, 1.0, 0.5, 1e-7, -2e-7, 3e-7, 0.0].iter().map(|v| f16::from_f64(*v)).collect();
    let rep = project_unit(&mut w, s, Axis::Rows).unwrap();
    assert_eq!(rep.projected, 2);
    for n in line_norms(&w, s, Axis::Rows) {
        // The tiny line has subnormal inputs (f16 min subnormal 6e-8), so its direction is coarse,
        // but the output is normal and its norm within u of 1.
        assert!((n - 1.0).abs() <= 2f64.powi(-11) * 1.000001, "{n}");
    }
}

#[test]
fn columns_equal_rows_of_the_transpose() {
    let (o, i) = (5, 7);
    let vals: Vec<f32> = (0..o * i).map(|k| ((k * 7919) % 23) as f32 * 0.3 - 3.0).collect();
    let t: Vec<f32> = (0..i * o).map(|k| vals[(k % o) * i + k / o]).collect();
    let mut a = vals.clone();
    let mut b = t.clone();
    project_unit(&mut a, MatShape::new(o, i), Axis::Cols).unwrap();
    project_unit(&mut b, MatShape::new(i, o), Axis::Rows).unwrap();
    for r in 0..o {
        for c in 0..i {
            assert_eq!(a[r * i + c], b[c * o + r]);
        }
    }
}

#[test]
fn special_lines_are_reported_not_fatal() {
    let s = MatShape::new(3, 3);
    let mut w = vec![0.0f32, 0.0, 0.0, f32::NAN, 1.0, 2.0, 3.0, 4.0, 0.0];
    let rep = project_unit(&mut w, s, Axis::Rows).unwrap();
    assert_eq!((rep.zero, rep.nonfinite, rep.projected), (1, 1, 1));
    assert_eq!(&w[..3], &[0.0, 0.0, 0.0]);
    assert!(w[3].is_nan() && w[4] == 1.0 && w[5] == 2.0);
    assert_eq!(&w[6..], &[0.6, 0.8, 0.0]);
    let rep = project_ball(&mut w, s, Bound::PerLine(Axis::Rows), 1.0).unwrap();
    assert_eq!(rep.nonfinite, 1);
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut w = vec![1.0f32; 6];
    assert!(matches!(project_unit(&mut w, MatShape::new(2, 4), Axis::Rows), Err(NormError::Length { expected: 8, got: 6, .. })));
    assert!(matches!(project_unit(&mut w, MatShape::new(0, 6), Axis::Rows), Err(NormError::Empty { .. })));
    assert!(matches!(project_ball(&mut w, MatShape::new(2, 3), Bound::Frobenius, 0.0), Err(NormError::OutOfRange { value, .. }) if value == 0.0));
    assert!(matches!(project_ball(&mut w, MatShape::new(2, 3), Bound::Frobenius, f64::NAN), Err(NormError::OutOfRange { .. })));
    assert!(Axis::parse("diagonal").is_err());
}
