//! The fused backward against the generic one, bit for bit: `dx`, the weight and bias
//! gradients and the counters, for every kind and centring, f32/f16/bf16 storage, with and
//! without weight, at every explicit-SIMD level this CPU has, on rows of many lengths (tails
//! of every size, rows shorter than one 16-lane group) and edge rows (zeros, constants, ties
//! at Top-k's threshold, huge and tiny magnitudes, NaN and infinities in `x` or `dy`, gradients
//! that overflow the storage type).

use half::{bf16, f16};

use super::{rows_at, Block, FUSED_ROWS};
use crate::element::Element;
use crate::row::fused::tests::{self as fused_tests, Rng};
use crate::row::fused::Level;
use crate::row::kernel::Scratch;
use crate::row::simd::{F32x16, Storage};
use crate::row::stats::RowStats;
use crate::spec::{ConstMode, NormKind, NormSpec};

/// The forward's test levels (those this CPU runs) but `Level::Avx512Bf16`, whose backward is
/// `Level::Avx512`'s code ([`rows_at`]).
fn levels() -> Vec<Level> {
    fused_tests::levels().into_iter().filter(|&l| l != Level::Avx512Bf16).collect()
}

/// Row `r` of `x` (even rows of a case are Gaussian, so that most rows take the fused path).
fn x_row(rng: &mut Rng, r: usize, n: usize, max: f64) -> Vec<f64> {
    let mut v: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    match r % 24 {
        1 => v.iter_mut().for_each(|x| *x = 0.0),
        3 => v.iter_mut().for_each(|x| *x = 3.25),
        5 => v.iter_mut().for_each(|x| *x = 1000.0 + *x * 1e-3),
        7 => v.iter_mut().for_each(|x| *x *= 1e-6),
        9 => v.iter_mut().for_each(|x| *x = max * (2.0 * rng.uniform() - 1.0)),
        11 => v[rng.below(n)] = f64::NAN,
        13 => v[rng.below(n)] = f64::INFINITY,
        15 => v.iter_mut().for_each(|x| *x = (x.abs() * 2.0).round() * 0.5), // ties for Top-k and L-inf
        17 => v.iter_mut().for_each(|x| *x = if rng.uniform() < 0.5 { 1.0 } else { -1.0 }),
        19 => v[rng.below(n)] = 3e4,
        21 => v.iter_mut().for_each(|x| *x = (*x * 8.0).round() / 8.0), // coarse values: ties below the top
        _ => {}
    }
    v
}

/// Row `r` of `dy`.
fn dy_row(rng: &mut Rng, r: usize, n: usize, max: f64) -> Vec<f64> {
    let mut v: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    match r % 10 {
        2 => v[rng.below(n)] = f64::NAN,
        4 => v[rng.below(n)] = f64::NEG_INFINITY,
        6 => v.iter_mut().for_each(|x| *x *= max / 4.0), // gradients past the type's range
        8 => v.iter_mut().for_each(|x| *x = 0.0),
        _ => {}
    }
    v
}

fn specs(n: usize) -> Vec<NormSpec> {
    let mut ks = vec![1, 2, 8, 16, 17, n];
    ks.retain(|&k| k <= n);
    ks.dedup();
    let mut out = Vec::new();
    for (kind, centred) in [
        (NormKind::Rms, false),
        (NormKind::Layer, true),
        (NormKind::UnitL2, false),
        (NormKind::L1, true),
        (NormKind::L1, false),
        (NormKind::LInf, true),
        (NormKind::LInf, false),
    ] {
        out.push(NormSpec { kind, centred, eps: 1e-5, constant: ConstMode::Exact });
    }
    // A clamped unit norm: eps above most rows' norms.
    out.push(NormSpec { kind: NormKind::UnitL2, centred: false, eps: 1e3, constant: ConstMode::Exact });
    for &k in &ks {
        let constant = if n > 300 { ConstMode::One } else { ConstMode::Exact };
        for centred in [true, false] {
            out.push(NormSpec { kind: NormKind::TopK { k }, centred, eps: 1e-5, constant });
        }
    }
    out
}

fn bits<S: Element>(v: &[S]) -> Vec<u64> {
    v.iter().map(|a| a.to_f64().to_bits()).collect()
}

/// Every spec and weight choice on `x`, `dy` (`rows` rows of n): the generic backward against
/// every level's. Returns (comparisons, rows the fused path computed).
fn compare<S: Storage>(x: &[S], dy: &[S], n: usize, w: &[f32], what: &str) -> (usize, usize) {
    let rows = x.len() / n;
    let (mut checked, mut fused) = (0, 0);
    for spec in specs(n) {
        let ctx = crate::row::ctx::<f32>(&spec, n).unwrap();
        let mut scr = Scratch::<f32>::new(n);
        let mut y = vec![S::default(); x.len()];
        let mut st = vec![RowStats::default(); rows];
        crate::row::forward_rows::<S, f32>(&ctx, x, &mut y, &mut st, Some(w), None, &mut scr);
        for (wo, want_dw, want_db) in [(None, false, false), (Some(w), true, false), (Some(w), true, true), (None, false, true)] {
            let mut mask = vec![false; n];
            let mut dx0 = vec![S::default(); x.len()];
            let (mut dw0, mut db0) = (vec![0.0f32; n], vec![0.0f32; n]);
            let c0 = crate::row::backward_rows::<S, f32>(
                &ctx,
                x,
                dy,
                &mut dx0,
                &st,
                wo,
                want_dw.then_some(&mut dw0[..]),
                want_db.then_some(&mut db0[..]),
                &mut scr,
                &mut mask,
            );
            for level in levels() {
                let mut scr = Scratch::<f32>::new(n);
                let mut dx1 = vec![S::default(); x.len()];
                let (mut dw1, mut db1) = (vec![0.0f32; n], vec![0.0f32; n]);
                let before = FUSED_ROWS.with(|q| q.get());
                let block = Block {
                    ctx: &ctx,
                    x,
                    dy,
                    dx: &mut dx1,
                    stats: &st,
                    w: wo,
                    dw: want_dw.then_some(&mut dw1[..]),
                    db: want_db.then_some(&mut db1[..]),
                };
                let c1 = rows_at::<S>(level, block, &mut scr, &mut mask);
                fused += FUSED_ROWS.with(|q| q.get()) - before;
                let at = || format!("{what} {} n={n} {spec:?} w={} dw={want_dw} db={want_db} {level:?}", S::DTYPE, wo.is_some());
                assert_eq!(c0, c1, "{}: counters", at());
                for (j, (a, e)) in bits(&dx1).iter().zip(bits(&dx0)).enumerate() {
                    assert!(*a == e, "{}: dx[{j}] (row {}) = {:?}, generic {:?}", at(), j / n, dx1[j], dx0[j]);
                }
                assert_eq!(bits(&dw1), bits(&dw0), "{}: dweight", at());
                assert_eq!(bits(&db1), bits(&db0), "{}: dbias", at());
                checked += 1;
            }
        }
    }
    (checked, fused)
}

fn case<S: Storage>(n: usize, seed: u64) -> (usize, usize) {
    let mut rng = Rng(seed);
    let rows = 24;
    let max = S::DTYPE.max_finite().min(1e300);
    let x: Vec<S> = (0..rows).flat_map(|r| x_row(&mut rng, r, n, max)).map(S::from_f64).collect();
    let dy: Vec<S> = (0..rows).flat_map(|r| dy_row(&mut rng, r, n, max)).map(S::from_f64).collect();
    let w: Vec<f32> = (0..n).map(|_| S::from_f64(1.0 + 0.1 * rng.normal()).to_f32()).collect();
    compare(&x, &dy, n, &w, "edge rows")
}

fn fused_backward_equals_generic_on_every_length() {
    let (mut checked, mut fused) = (0, 0);
    for (i, n) in [1usize, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 100, 255, 1000, 1031].into_iter().enumerate() {
        for (c, f) in [case::<f32>(n, 10 + i as u64), case::<f16>(n, 100 + i as u64), case::<bf16>(n, 1000 + i as u64)] {
            checked += c;
            fused += f;
        }
    }
    if !levels().is_empty() {
        assert!(checked > 1000, "{checked} comparisons");
        // Most rows are ordinary: the fused path must have computed them, not the fallback.
        assert!(fused > checked * 24 / 3, "{fused} rows fused in {checked} comparisons of 24 rows");
    }
}

/// A non-finite weight sends the whole call to the generic kernel (`level_for`), and the
/// fused backward computes the rows of a finite one.
fn a_nan_weight_declines_the_block() {
    let n = 64;
    let mut rng = Rng(5);
    let x: Vec<f32> = (0..2 * n).map(|_| rng.normal() as f32).collect();
    let dy: Vec<f32> = (0..2 * n).map(|_| rng.normal() as f32).collect();
    let mut w = vec![1.0f32; n];
    w[9] = f32::NAN;
    let spec = NormSpec { kind: NormKind::L1, centred: true, eps: 1e-5, constant: ConstMode::Exact };
    let ctx = crate::row::ctx::<f32>(&spec, n).unwrap();
    let mut st = vec![RowStats::default(); 2];
    let mut scr = Scratch::<f32>::new(n);
    let mut y = vec![0.0f32; 2 * n];
    crate::row::forward_rows::<f32, f32>(&ctx, &x, &mut y, &mut st, None, None, &mut scr);
    let mut dx = vec![0.0f32; 2 * n];
    let mut mask = vec![false; n];
    assert_eq!(super::level_for(Some(&w[..])), Level::Generic, "a NaN weight must go to the generic kernel");
    let r = super::backward_rows::<f32, f32>(Level::Generic, &ctx, &x, &dy, &mut dx, &st, Some(&w), None, None, &mut scr, &mut mask);
    assert!(r.is_none(), "the generic level declines");
    w[9] = 1.5;
    assert_eq!(super::level_for(Some(&w[..])), Level::detect());
    assert_eq!(super::level_for::<f32>(None), Level::detect());
    for level in levels() {
        let before = FUSED_ROWS.with(|q| q.get());
        let r = super::backward_rows::<f32, f32>(level, &ctx, &x, &dy, &mut dx, &st, Some(&w), None, None, &mut scr, &mut mask);
        assert!(r.is_some(), "{level:?}: a finite weight takes the fused path");
        assert_eq!(FUSED_ROWS.with(|q| q.get()) - before, 2, "{level:?}: both rows fused");
    }
}

/// `F32x16::sign` against the scalar sign on zeros of both signs, NaN, infinities and
/// subnormals, in every layout this CPU runs.
fn sign_is_the_scalar_sign() {
    let v: [f32; 16] = [0.0, -0.0, f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-45, -1e-45, 1.0, -1.0, 3.4e38, -2.0, 0.5, -0.25, f32::MIN_POSITIVE, -7.0];
    let want: Vec<u32> = v.iter().map(|&x| super::sign(x).to_bits()).collect();
    fn got<V: F32x16>(v: &[f32; 16]) -> Vec<u32> {
        // SAFETY: called only where the layout's instruction set was detected.
        unsafe { V::load_f32(v.as_ptr()).sign().to_array().iter().map(|x| x.to_bits()).collect() }
    }
    #[cfg(target_arch = "x86_64")]
    for level in levels() {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2(v: &[f32; 16]) -> Vec<u32> {
            got::<crate::row::simd::avx2::Avx2>(v)
        }
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn avx512(v: &[f32; 16]) -> Vec<u32> {
            got::<crate::row::simd::avx512::Avx512>(v)
        }
        // SAFETY: the level's features were detected.
        let g = unsafe {
            match level {
                Level::Avx2 => avx2(&v),
                _ => avx512(&v),
            }
        };
        assert_eq!(g, want, "{level:?}");
    }
    let _ = want;
}

pub(crate) const TESTS: &[crate::unit_tests::UnitTest] =
    crate::unit_tests::register![fused_backward_equals_generic_on_every_length, a_nan_weight_declines_the_block, sign_is_the_scalar_sign];
