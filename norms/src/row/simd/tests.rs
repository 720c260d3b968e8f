//! Each [`F32x16`] implementation against the scalar definitions: conversions of every f16
//! and bf16 bit pattern (and the rounding-critical f32 values) as `convert` does them, and the
//! lane semantics the reductions rely on.

use half::{bf16, f16};

use super::{F32x16, W};

/// f32 probes: every widened f16 and bf16 value, their midpoints and neighbours, scattered bit
/// patterns (NaNs with payloads, subnormals), the extremes.
fn probes() -> Vec<f32> {
    let mut p: Vec<f32> = (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect();
    p.extend((0..=u16::MAX).map(|b| f32::from_bits((b as u32) << 16)));
    let finite: Vec<f32> = p.iter().copied().filter(|v| v.is_finite()).collect();
    for w in finite.windows(2) {
        let m = 0.5 * (w[0] + w[1]);
        p.extend([m, f32::from_bits(m.to_bits().wrapping_add(1)), f32::from_bits(m.to_bits().wrapping_sub(1))]);
    }
    p.extend((0..300_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))));
    p.extend([f32::MAX, -f32::MAX, f32::INFINITY, f32::NEG_INFINITY, 65519.99, 65520.0, 1e-45, -0.0, 0.0]);
    p.extend([f32::from_bits(0x7FFF_FFFF), f32::from_bits(0xFFFF_FFFF), f32::from_bits(0x7F80_0001), f32::from_bits(0x7FC0_0000)]);
    let pad = (W - p.len() % W) % W;
    p.extend(std::iter::repeat_n(1.0, pad));
    p
}

/// Checks a 16-key descending sort (`sorted`, the keys as i32) against `sort_unstable_by`: on
/// every 0/1 input, which by the zero-one principle proves a comparator network sorts
/// everything, and on 20,000 inputs of many ties (keys -1..=5). For the networks of
/// `sort16` (AVX2) and `sort16_avx512`.
pub(super) fn assert_sorts_16_desc(sorted: impl Fn([i32; W]) -> [i32; W]) {
    let check = |keys: [i32; W]| {
        let mut want = keys;
        want.sort_unstable_by(|x, y| y.cmp(x));
        assert_eq!(sorted(keys), want, "{keys:?}");
    };
    for bits in 0..1u32 << W {
        check(std::array::from_fn(|i| (bits >> i & 1) as i32));
    }
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..20_000 {
        check(std::array::from_fn(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 7) as i32 - 1
        }));
    }
}

/// 20,000 selection cases for the networks' k-th largest and top-k (`sort16`, `sort16_avx512`):
/// 16 magnitudes, alternately spread out and with ties (a few distinct values), a k in 1..=16,
/// and a random word for anything else a test draws.
pub(super) fn selection_cases(mut each: impl FnMut([f32; W], usize, u64)) {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for round in 0..20_000 {
        let spread = round % 2 == 0;
        let keys: [f32; W] = std::array::from_fn(|_| {
            let r = next();
            if spread {
                f32::from_bits((r as u32) & 0x7F7F_FFFF)
            } else {
                (r % 5) as f32 * 0.5
            }
        });
        let k = 1 + (next() as usize) % W;
        each(keys, k, next());
    }
}

/// A buffer aligned for the streaming stores.
#[repr(align(64))]
struct Aligned<T>(T);

/// # Safety
/// The CPU has V's instruction set.
unsafe fn conversions<V: F32x16>() {
    // Widening every bit pattern, as the generic kernel's `Element::load_f32` does (`convert`;
    // signalling NaNs stay signalling there, unlike `half::bf16::to_f32`).
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let mut want_h = vec![0f32; all.len()];
    crate::convert::f16_to_f32(&all.iter().map(|&b| f16::from_bits(b)).collect::<Vec<_>>(), &mut want_h);
    let mut want_b = vec![0f32; all.len()];
    crate::convert::bf16_to_f32(&all.iter().map(|&b| bf16::from_bits(b)).collect::<Vec<_>>(), &mut want_b);
    for (i, c) in all.chunks(W).enumerate() {
        let h = V::load_f16(c.as_ptr()).to_array();
        let b = V::load_bf16(c.as_ptr()).to_array();
        for j in 0..W {
            assert_eq!(h[j].to_bits(), want_h[i * W + j].to_bits(), "f16 {:#06x}", c[j]);
            assert_eq!(b[j].to_bits(), want_b[i * W + j].to_bits(), "bf16 {:#06x}", c[j]);
        }
    }
    // Narrowing: the same bits as `convert` (which is tested against `half`).
    let p = probes();
    let mut want_h = vec![f16::ZERO; p.len()];
    crate::convert::f32_to_f16(&p, &mut want_h);
    let mut want_b = vec![bf16::ZERO; p.len()];
    crate::convert::f32_to_bf16(&p, &mut want_b);
    for (i, c) in p.chunks(W).enumerate() {
        let v = V::load_f32(c.as_ptr());
        let (mut h, mut b, mut bn) = ([0u16; W], [0u16; W], [0u16; W]);
        v.store_f16(h.as_mut_ptr());
        v.store_bf16(b.as_mut_ptr());
        v.store_bf16_non_nan(bn.as_mut_ptr());
        // The streaming forms write the same bits (to aligned buffers, as they require).
        let (mut f_nt, mut h_nt, mut b_nt, mut bn_nt) = (Aligned([0f32; W]), Aligned([0u16; W]), Aligned([0u16; W]), Aligned([0u16; W]));
        v.store_f32_nt(f_nt.0.as_mut_ptr());
        v.store_f16_nt(h_nt.0.as_mut_ptr());
        v.store_bf16_nt(b_nt.0.as_mut_ptr());
        v.store_bf16_non_nan_nt(bn_nt.0.as_mut_ptr());
        super::sfence();
        assert_eq!(f_nt.0.map(f32::to_bits), v.to_array().map(f32::to_bits), "store_f32_nt");
        assert_eq!(f_nt.0.map(f32::to_bits), std::array::from_fn(|j| c[j].to_bits()), "f32 round trip");
        assert_eq!((h_nt.0, b_nt.0), (h, b), "streaming f16/bf16 stores");
        for j in 0..W {
            let k = i * W + j;
            assert_eq!(h[j], want_h[k].to_bits(), "f16 of {:e} ({:#x})", c[j], c[j].to_bits());
            assert_eq!(b[j], want_b[k].to_bits(), "bf16 of {:e} ({:#x})", c[j], c[j].to_bits());
            if !c[j].is_nan() {
                assert_eq!(bn[j], want_b[k].to_bits(), "bf16 (non-NaN form) of {:e}", c[j]);
                assert_eq!(bn_nt.0[j], want_b[k].to_bits(), "bf16 (streaming non-NaN form) of {:e}", c[j]);
            }
        }
    }
}

/// # Safety
/// The CPU has V's instruction set.
unsafe fn lane_semantics<V: F32x16>() {
    let a: [f32; W] = [1.0, -2.0, f32::NAN, 0.0, -0.0, 5.0, f32::INFINITY, -3.0, 7.0, 8.0, 9.0, 1e-40, 11.0, 12.0, 13.0, 14.0];
    let m: [f32; W] = [0.5, 0.0, 1.0, -0.0, 0.0, 6.0, 1.0, 0.0, 7.0, 9.0, f32::NAN, 0.0, 0.0, 0.0, 0.0, 20.0];
    let (va, vm) = (V::load_f32(a.as_ptr()), V::load_f32(m.as_ptr()));
    // A vector stored in register order and read back with plain loads is the same vector.
    let mut ordered = [0f32; W];
    va.store_lanes(ordered.as_mut_ptr());
    assert_eq!(V::load_lanes(ordered.as_ptr()).to_array().map(f32::to_bits), a.map(f32::to_bits), "load_lanes(store_lanes)");
    assert_eq!(V::REORDERS, ordered.map(f32::to_bits) != a.map(f32::to_bits), "REORDERS says whether store_lanes moves values");
    let mx = V::max_gt(va, vm).to_array();
    let mn = V::min_lt(va, vm).to_array();
    let ab = va.abs().to_array();
    let ge = va.ge_mask(vm);
    // Two groups' masks in one word: `a` then `m` itself (its NaN lane, and lanes equal to
    // the bound, among them) against `m`.
    assert_eq!(V::ge_mask_2(va, vm, vm), ge | vm.ge_mask(vm) << 16, "ge_mask_2");
    let rev: [f32; W] = std::array::from_fn(|j| a[W - 1 - j]);
    let vr = V::load_f32(rev.as_ptr());
    assert_eq!(V::ge_mask_2(vr, va, vm), vr.ge_mask(vm) | ge << 16, "ge_mask_2 of other groups");
    let bits = V::splat(0.0).max_abs_bits(va).to_array();
    for j in 0..W {
        let want = if a[j] > m[j] { a[j] } else { m[j] };
        assert_eq!(mx[j].to_bits(), want.to_bits(), "max_gt lane {j}");
        let want = if a[j] < m[j] { a[j] } else { m[j] };
        assert_eq!(mn[j].to_bits(), want.to_bits(), "min_lt lane {j}");
        assert_eq!(ab[j].to_bits(), a[j].abs().to_bits(), "abs lane {j}");
        assert_eq!(ge >> j & 1 == 1, a[j] >= m[j], "ge_mask lane {j}");
        assert_eq!(bits[j].to_bits(), a[j].to_bits() & 0x7FFF_FFFF, "max_abs_bits lane {j}");
    }
    for count in 0..=W {
        let s = V::select_first(count, va, vm).to_array();
        for j in 0..W {
            let want = if j < count { a[j] } else { m[j] };
            assert_eq!(s[j].to_bits(), want.to_bits(), "select_first({count}) lane {j}");
        }
    }
    let (s, d, p) = ((va + vm).to_array(), (va - vm).to_array(), (va * vm).to_array());
    for j in 0..W {
        let same = |x: f32, y: f32| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        assert!(same(s[j], a[j] + m[j]) && same(d[j], a[j] - m[j]) && same(p[j], a[j] * m[j]), "arithmetic lane {j}");
    }
}

/// The selections of the fused Top-k (`kth_largest_magnitude`, `top_k_of_few`) against the
/// sort they replace, on magnitudes with many ties, zeros, subnormals and infinities.
/// # Safety
/// The CPU has V's instruction set.
unsafe fn selections<V: F32x16>() {
    use crate::row::rank_select::{tests::magnitudes, FEW};
    for seed in 0..4000u64 {
        let v = magnitudes(seed, FEW);
        let lanes = V::load_f32(v.as_ptr());
        for k in 1..=W {
            let want = crate::row::stats::kth_largest_lane_max::<f32>(v[..W].try_into().unwrap(), k);
            assert_eq!(lanes.kth_largest_magnitude(k).to_bits(), want.to_bits(), "kth_largest_magnitude k {k}: {:?}", &v[..W]);
        }
        let m = 1 + seed as usize % FEW;
        for k in 1..=m {
            let mut got = v.clone();
            V::top_k_of_few(&mut got, m, k);
            let mut want = v.clone();
            crate::row::stats::top_k_of_candidates(&mut want, m, k);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got[..k]), bits(&want[..k]), "top_k_of_few m {m} k {k}: {:?}", &v[..m]);
        }
    }
}

/// The xorshift64 generator from `seed` (nonzero): the random inputs of the tests below.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// `F32x16::ge_mask_2` against the definition of each bit, on random lanes (NaN, signed zeros
/// and ties with the bound among them): a permutation of the packed masks that is wrong for
/// any quarter of either group fails it.
/// # Safety
/// The CPU has V's instruction set.
unsafe fn masks_2<V: F32x16>() {
    let mut next = xorshift(0x2545_F491_4F6C_DD1Du64);
    let pick = |r: u64| match r % 6 {
        0 => [f32::NAN, 0.0, -0.0, 1.0, -1.0, f32::INFINITY][(r >> 8) as usize % 6],
        _ => ((r >> 8) % 5) as f32 - 2.0,
    };
    for case in 0..2000 {
        let v: [f32; 3 * W] = std::array::from_fn(|_| pick(next()));
        let (a, b, t) = (V::load_f32(v.as_ptr()), V::load_f32(v.as_ptr().add(W)), V::load_f32(v.as_ptr().add(2 * W)));
        let want = (0..2 * W).fold(0u32, |m, j| m | ((v[j] >= v[2 * W + j % W]) as u32) << j);
        assert_eq!(V::ge_mask_2(a, b, t), want, "case {case}: {v:?}");
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_matches_the_scalar_definitions() {
    if !crate::row::has_avx2() {
        eprintln!("no AVX2: skipped");
        return;
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run() {
        conversions::<super::avx2::Avx2>();
        lane_semantics::<super::avx2::Avx2>();
        selections::<super::avx2::Avx2>();
        conversions::<super::avx2_even_odd::Avx2EvenOdd>();
        lane_semantics::<super::avx2_even_odd::Avx2EvenOdd>();
        selections::<super::avx2_even_odd::Avx2EvenOdd>();
        masks_2::<super::avx2::Avx2>();
        masks_2::<super::avx2_even_odd::Avx2EvenOdd>();
    }
    // SAFETY: detected above.
    unsafe { run() }
}

#[cfg(target_arch = "x86_64")]
fn avx512_matches_the_scalar_definitions() {
    if !(crate::row::has_avx2() && is_x86_feature_detected!("avx512f")) {
        eprintln!("no AVX-512F: skipped");
        return;
    }
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn run() {
        conversions::<super::avx512::Avx512>();
        lane_semantics::<super::avx512::Avx512>();
        selections::<super::avx512::Avx512>();
        masks_2::<super::avx512::Avx512>();
    }
    // SAFETY: detected above.
    unsafe { run() }
}

/// The layout whose bf16 stores round by `vcvtneps2bf16`: the same checks. The probes hold
/// registers of subnormals (bf16 bit patterns shifted into f32, and random bits), which take
/// the integer rounding, and registers of values the instruction rounds (all the others).
#[cfg(target_arch = "x86_64")]
fn avx512_bf16_matches_the_scalar_definitions() {
    if !(crate::row::has_avx2() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16") && is_x86_feature_detected!("avx512dq")) {
        eprintln!("no AVX-512F with AVX512_BF16 and AVX512DQ: skipped");
        return;
    }
    #[target_feature(enable = "avx512f,avx512bf16,avx512dq,avx2,fma,f16c")]
    unsafe fn run() {
        conversions::<super::avx512::Avx512Bf16>();
        lane_semantics::<super::avx512::Avx512Bf16>();
        selections::<super::avx512::Avx512Bf16>();
        masks_2::<super::avx512::Avx512Bf16>();
    }
    // SAFETY: detected above.
    unsafe { run() }
}


pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![avx2_matches_the_scalar_definitions, avx512_matches_the_scalar_definitions, avx512_bf16_matches_the_scalar_definitions];
