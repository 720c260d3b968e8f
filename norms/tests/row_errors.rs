//! Bad input to the row forms: a typed `NormError` naming the offending value, never a panic.
//! (Storage-type mismatches cannot be expressed: x, y, weight, bias, dy and dx share one
//! element type `T` by signature; an accumulator is any `Accum`.)
//!
//! Decision: an empty batch (x of length 0 with n >= 1) is not an error, it has zero rows;
//! an empty normalized dimension (n = 0) is.

use normlab_norms::{row, Accum, ConstMode, Counters, NormError, NormKind, NormSpec, Result, RowStats};
use proptest::prelude::*;

fn fwd(spec: &NormSpec, x: &[f32], n: usize, w: Option<&[f32]>, b: Option<&[f32]>, y_len: usize, st_len: Option<usize>) -> Result<Counters> {
    let mut y = vec![0f32; y_len];
    let mut st = vec![RowStats::default(); st_len.unwrap_or(0)];
    row::forward(spec, Accum::F32, x, n, w, b, &mut y, st_len.map(|_| &mut st[..]))
}

#[allow(clippy::too_many_arguments)]
fn bwd(spec: &NormSpec, x: &[f32], dy_len: usize, n: usize, st_len: usize, w: Option<&[f32]>, dx_len: usize, dw: Option<usize>, db: Option<usize>) -> Result<Counters> {
    let dy = vec![1f32; dy_len];
    let st = vec![RowStats { rscale: 1.0, ..Default::default() }; st_len];
    let mut dx = vec![0f32; dx_len];
    let mut dwv = vec![0f32; dw.unwrap_or(0)];
    let mut dbv = vec![0f32; db.unwrap_or(0)];
    row::backward(spec, Accum::F32, x, &dy, n, &st, w, &mut dx, dw.map(|_| &mut dwv[..]), db.map(|_| &mut dbv[..]))
}

/// The error and its message, which must name `value`.
fn expect(r: Result<Counters>, want: NormError, value: &str) {
    let e = r.expect_err("expected an error");
    assert_eq!(e, want);
    let msg = e.to_string();
    assert!(msg.contains(value), "message {msg:?} does not name {value}");
}

#[test]
fn topk_k_out_of_range() {
    let x = [1f32; 12];
    for (k, n) in [(0usize, 4usize), (5, 4), (13, 12), (2, 1)] {
        let spec = NormSpec::topk(k, 1e-5);
        let x = &x[..n * (12 / n)];
        expect(fwd(&spec, x, n, None, None, x.len(), None), NormError::InvalidK { k, n }, &format!("k = {k}"));
        expect(bwd(&spec, x, x.len(), n, x.len() / n, None, x.len(), None, None), NormError::InvalidK { k, n }, &format!("n = {n}"));
    }
    // The boundary values are valid.
    for (k, n) in [(1usize, 4usize), (4, 4), (1, 1)] {
        assert!(fwd(&NormSpec::topk(k, 1e-5), &x[..n], n, None, None, n, None).is_ok());
    }
}

#[test]
fn empty_dimension() {
    for spec in [NormSpec::rms(1e-5), NormSpec::l1(1e-5), NormSpec::topk(1, 1e-5)] {
        let e = fwd(&spec, &[], 0, None, None, 0, None).unwrap_err();
        assert!(matches!(e, NormError::Empty { value: 0, .. }), "{spec:?}: {e:?}");
        assert!(e.to_string().contains('0'));
        let e = bwd(&spec, &[], 0, 0, 0, None, 0, None, None).unwrap_err();
        assert!(matches!(e, NormError::Empty { value: 0, .. }), "{spec:?}: {e:?}");
        // n = 0 with a non-empty x is the same error, not a division by zero.
        let e = fwd(&spec, &[1.0, 2.0], 0, None, None, 2, None).unwrap_err();
        assert!(matches!(e, NormError::Empty { value: 0, .. }), "{spec:?}: {e:?}");
    }
    // Zero rows of a valid n: nothing to do, clean.
    let mut st: [RowStats; 0] = [];
    assert_eq!(row::forward(&NormSpec::rms(1e-5), Accum::F32, &[] as &[f32], 8, None, None, &mut [], Some(&mut st)), Ok(Counters::default()));
    assert!(bwd(&NormSpec::rms(1e-5), &[], 0, 8, 0, None, 0, Some(8), Some(8)).is_ok());
}

#[test]
fn bad_eps() {
    let x = [1f32, 2.0, 3.0, 4.0];
    for eps in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1e-5, -0.5] {
        for kind in [NormKind::Rms, NormKind::Layer, NormKind::UnitL2, NormKind::L1, NormKind::LInf, NormKind::TopK { k: 2 }] {
            let spec = NormSpec::new(kind, eps);
            for r in [fwd(&spec, &x, 4, None, None, 4, None), bwd(&spec, &x, 4, 4, 1, None, 4, None, None)] {
                let e = r.unwrap_err();
                match e {
                    NormError::InvalidEps { eps: got } => assert!(got.to_bits() == eps.to_bits(), "{got} vs {eps}"),
                    other => panic!("{spec:?}: expected InvalidEps, got {other:?}"),
                }
                let shown = format!("{eps}");
                assert!(e.to_string().contains(&shown), "{e} does not name {shown}");
            }
        }
    }
    // -0.0 and 0.0 are fine.
    assert!(fwd(&NormSpec::rms(-0.0), &x, 4, None, None, 4, None).is_ok());
}

#[test]
fn x_not_whole_rows() {
    let x = [1f32; 10];
    for spec in [NormSpec::rms(1e-5), NormSpec::topk(2, 1e-5)] {
        for r in [fwd(&spec, &x, 3, None, None, 10, None), bwd(&spec, &x, 10, 3, 3, None, 10, None, None)] {
            match r.unwrap_err() {
                NormError::Shape(msg) => assert!(msg.contains("10") && msg.contains('3'), "{msg}"),
                other => panic!("expected Shape, got {other:?}"),
            }
        }
    }
}

#[test]
fn wrong_lengths_forward() {
    let x = [1f32, -2.0, 3.0, 0.5, 4.0, -1.0]; // 2 rows of 3
    let w3 = [1f32; 3];
    let w2 = [1f32; 2];
    let spec = NormSpec::l1(1e-5);
    expect(fwd(&spec, &x, 3, None, None, 5, None), NormError::Length { what: "output", expected: 6, got: 5 }, "5");
    expect(fwd(&spec, &x, 3, None, None, 7, None), NormError::Length { what: "output", expected: 6, got: 7 }, "7");
    expect(fwd(&spec, &x, 3, Some(&w2), None, 6, None), NormError::Length { what: "weight", expected: 3, got: 2 }, "2");
    expect(fwd(&spec, &x, 3, None, Some(&[0f32; 4]), 6, None), NormError::Length { what: "bias", expected: 3, got: 4 }, "4");
    expect(fwd(&spec, &x, 3, Some(&w3), None, 6, Some(1)), NormError::Length { what: "stats", expected: 2, got: 1 }, "1");
    expect(fwd(&spec, &x, 3, Some(&w3), None, 6, Some(3)), NormError::Length { what: "stats", expected: 2, got: 3 }, "3");
    assert!(fwd(&spec, &x, 3, Some(&w3), Some(&w3), 6, Some(2)).is_ok());
}

#[test]
fn wrong_lengths_backward() {
    let x = [1f32, -2.0, 3.0, 0.5, 4.0, -1.0];
    let w3 = [1f32; 3];
    let spec = NormSpec::linf(1e-5);
    expect(bwd(&spec, &x, 5, 3, 2, None, 6, None, None), NormError::Length { what: "dy", expected: 6, got: 5 }, "5");
    expect(bwd(&spec, &x, 6, 3, 2, None, 9, None, None), NormError::Length { what: "dx", expected: 6, got: 9 }, "9");
    expect(bwd(&spec, &x, 6, 3, 4, None, 6, None, None), NormError::Length { what: "stats", expected: 2, got: 4 }, "4");
    expect(bwd(&spec, &x, 6, 3, 2, Some(&[1f32; 6]), 6, None, None), NormError::Length { what: "weight", expected: 3, got: 6 }, "6");
    expect(bwd(&spec, &x, 6, 3, 2, Some(&w3), 6, Some(2), None), NormError::Length { what: "dweight", expected: 3, got: 2 }, "2");
    expect(bwd(&spec, &x, 6, 3, 2, Some(&w3), 6, Some(3), Some(7)), NormError::Length { what: "dbias", expected: 3, got: 7 }, "7");
    assert!(bwd(&spec, &x, 6, 3, 2, Some(&w3), 6, Some(3), Some(3)).is_ok());
}

#[test]
fn invalid_centring_and_constants() {
    let x = [1f32, 2.0, 3.0, 4.0];
    for spec in [NormSpec::layer(1e-5).with_centred(false), NormSpec::rms(1e-5).with_centred(true), NormSpec::unit_l2(1e-5).with_centred(true)] {
        let e = fwd(&spec, &x, 4, None, None, 4, None).unwrap_err();
        assert!(matches!(e, NormError::Unsupported { .. }), "{spec:?}: {e:?}");
        let e = bwd(&spec, &x, 4, 4, 1, None, 4, None, None).unwrap_err();
        assert!(matches!(e, NormError::Unsupported { .. }), "{spec:?}: {e:?}");
    }
    // The authors' c(n) needs n >= 2 (ln 1 = 0).
    for spec in [NormSpec::linf(1e-5), NormSpec::topk(1, 1e-5)] {
        let spec = spec.with_constant(ConstMode::Code);
        let e = fwd(&spec, &x[..1], 1, None, None, 1, None).unwrap_err();
        assert!(matches!(e, NormError::OutOfRange { value, .. } if value == 1.0), "{spec:?}: {e:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary lengths and parameters: forward and backward return Ok or a NormError,
    /// and never panic.
    #[test]
    fn arbitrary_arguments_never_panic(
        x_len in 0usize..40, n in 0usize..9, y_len in 0usize..40, w_len in prop::option::of(0usize..10),
        b_len in prop::option::of(0usize..10), st_len in prop::option::of(0usize..12), dx_len in 0usize..40,
        kind_i in 0usize..6, k in 0usize..10, centred in any::<bool>(), mode_i in 0usize..3,
        eps in prop_oneof![Just(0.0), Just(1e-5), Just(-1.0), Just(f64::NAN), Just(f64::INFINITY)],
        accum_i in 0usize..4,
    ) {
        let kind = [NormKind::Rms, NormKind::Layer, NormKind::UnitL2, NormKind::L1, NormKind::LInf, NormKind::TopK { k }][kind_i];
        let spec = NormSpec { kind, centred, eps, constant: [ConstMode::Exact, ConstMode::Code, ConstMode::One][mode_i] };
        let accum = [Accum::F32, Accum::F64, Accum::PureF16, Accum::PureBf16][accum_i];
        let x: Vec<f32> = (0..x_len).map(|i| (i as f32 * 0.37).sin()).collect();
        let w = w_len.map(|l| vec![1f32; l]);
        let b = b_len.map(|l| vec![0f32; l]);
        let mut y = vec![0f32; y_len];
        let mut st = vec![RowStats::default(); st_len.unwrap_or(0)];
        let r = row::forward(&spec, accum, &x, n, w.as_deref(), b.as_deref(), &mut y, st_len.map(|_| &mut st[..]));
        let well_formed = n > 0 && x_len % n == 0 && y_len == x_len;
        if r.is_ok() {
            prop_assert!(well_formed);
        }
        let mut dx = vec![0f32; dx_len];
        let mut dw = w_len.map(|l| vec![0f32; l]);
        let mut db = b_len.map(|l| vec![0f32; l]);
        let dy = vec![1f32; x_len];
        let _ = row::backward(&spec, accum, &x, &dy, n, &st, w.as_deref(), &mut dx, dw.as_deref_mut(), db.as_deref_mut());
    }
}
