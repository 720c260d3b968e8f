//! Reductions in several independent lanes, so the compiler vectorises them, combined in a
//! fixed pairwise order: the result depends only on the input, never on threads or timing.

use crate::accum::Real;

/// Number of independent accumulators (two AVX registers of f32; four SSE registers).
pub const LANES: usize = 16;

/// Sum of the lanes, combined pairwise (lane j with lane j + w for w = 8, 4, 2, 1). Every lane
/// reduction of the crate ends here, the explicit-SIMD ones of `row::fused` included, so they
/// all give the same value for the same lanes.
#[inline(always)]
pub(crate) fn combine<A: Real>(mut acc: [A; LANES]) -> A {
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            acc[j] = acc[j] + acc[j + w];
        }
    }
    acc[0]
}

/// `sum f(v_i)` in lanes.
#[inline(always)]
pub fn sum_map<A: Real>(v: &[A], f: impl Fn(A) -> A) -> A {
    let mut acc = [A::zero(); LANES];
    let chunks = v.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            acc[j] = acc[j] + f(c[j]);
        }
    }
    for (j, &x) in rem.iter().enumerate() {
        acc[j] = acc[j] + f(x);
    }
    combine(acc)
}

/// `(sum f(v_i), sum g(v_i))`. Fused in one loop, the two accumulator arrays defeat LLVM's
/// vectoriser inside the large row kernels (measured: 7.7 vs 5.3 instructions per element for
/// LayerNorm), so this makes two passes over the (cache-resident) row.
#[inline(always)]
pub fn sum_map2<A: Real>(v: &[A], f: impl Fn(A) -> A, g: impl Fn(A) -> A) -> (A, A) {
    (sum_map(v, f), sum_map(v, g))
}

/// `sum f(u_i, v_i)` in lanes.
#[inline(always)]
pub fn sum_zip<A: Real>(u: &[A], v: &[A], f: impl Fn(A, A) -> A) -> A {
    let mut acc = [A::zero(); LANES];
    let n = u.len().min(v.len());
    let full = n - n % LANES;
    for (cu, cv) in u[..full].chunks_exact(LANES).zip(v[..full].chunks_exact(LANES)) {
        for j in 0..LANES {
            acc[j] = acc[j] + f(cu[j], cv[j]);
        }
    }
    for j in full..n {
        acc[j - full] = acc[j - full] + f(u[j], v[j]);
    }
    combine(acc)
}

/// The maximum of each lane (`v_j, v_{j+16}, ...`), 0 for empty lanes.
#[inline(always)]
pub fn lane_max<A: Real>(v: &[A]) -> [A; LANES] {
    let mut m = [A::zero(); LANES];
    let chunks = v.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            m[j] = if c[j] > m[j] { c[j] } else { m[j] };
        }
    }
    for (j, &x) in rem.iter().enumerate() {
        m[j] = if x > m[j] { x } else { m[j] };
    }
    m
}

/// `max f(v_i)` in lanes (0 for an empty slice; NaN is not propagated: pair it with a sum).
#[inline(always)]
pub fn max_map<A: Real>(v: &[A], f: impl Fn(A) -> A) -> A {
    let mut m = [A::zero(); LANES];
    let chunks = v.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            let a = f(c[j]);
            m[j] = if a > m[j] { a } else { m[j] };
        }
    }
    for (j, &x) in rem.iter().enumerate() {
        let a = f(x);
        m[j] = if a > m[j] { a } else { m[j] };
    }
    max_of(m)
}

/// The largest lane maximum (lanes in order, a later lane wins only if strictly greater).
#[inline(always)]
pub(crate) fn max_of<A: Real>(m: [A; LANES]) -> A {
    let mut best = m[0];
    for &v in &m[1..] {
        if v > best {
            best = v;
        }
    }
    best
}

/// `(max f(v_i), sum f(v_i))`: the sum makes a NaN visible (a max alone would drop it).
/// Two separate lane loops: fused, the two accumulator arrays defeat the vectoriser.
#[inline(always)]
pub fn max_and_sum<A: Real>(v: &[A], f: impl Fn(A) -> A + Copy) -> (A, A) {
    (max_map(v, f), sum_map(v, f))
}
