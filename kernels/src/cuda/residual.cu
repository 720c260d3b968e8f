#line 2 "residual.cu"  // line 1 is this directive (NVRTC compiles nl_common.cuh + this file)
// residual.cu: the fused residual updates of nGPT and anGPT, forward and backward, for fp16 and
// bf16 storage with fp32 math and one rounding on store.
//
// Compiled by NVRTC for the GPU (compute_80/compute_90) and, unmodified, as C++20 against
// simt_cpu.h for the CPU emulator (src/cpu/residual_launch.cpp). The reference is
// normlab_norms::residual (f64), whose doc has the formulas and their gradients:
//
//   nGPT   y = Norm(r),  r = h + a (B - h) = (1 - a) h + a B,  B = Norm(b),  Norm(x) = x / max(||x||, eps)
//   anGPT  y = nu(a) (h + a (b - h)) = c_h h + c_b b,  c_h = nu (1 - a),  c_b = nu a,  nu = (1 - 2a + 2a^2)^(-1/2)
//
// Rows of width d: h (residual stream), b (block output), y (may be h itself: in place). `a` is
// fp32, one value per dimension (a_len = d) or one for all (a_len = 1); the block copies it into
// shared memory once (a scalar is broadcast there), so both cases run the same code.
//
// Backward (g = dy; k, e exponents of the scaled rows, see below):
//   nGPT   dr = s_r (g - y (y . g))  [s_r g if ||r|| was clamped]    dh = (1 - a) dr
//          dB = a dr,  db = s_b (dB - B (B . dB))  [s_b dB if clamped],  da_j += dr_j (B_j - h_j)
//   anGPT  dh = c_h g,  db = c_b g,  da_j += g_j nu_j^2 (c_h,j b_j - c_b,j h_j)
// da: fp32 accumulators per row group in shared memory (each column is touched by one thread of
// the group per row, rows in grid-stride order), one fp32 partial row per block (groups added in
// group order; a scalar a: the block's columns summed in a fixed tree), and nl_update_finalize
// adds the partials in block order. No atomics: bitwise reproducible for a given grid.
//
// Numerics (nGPT). All statistics are fp32; every row is read from DRAM once:
// * pass 1 (the global read, staged into shared memory): max|b| (Inf if h or b holds a NaN/Inf:
//   the row is written as NaN), M = max|(1 - a) h|, sum b^2. A row whose max|b| is outside
//   [2^-30, 2^40] is rescaled by an exact power of two 2^-eb before its sum of squares (as
//   rownorm.cu: bf16 reaches 3e38, whose squares overflow fp32; tiny rows would underflow);
//   then s_b = 1/max(||b||, eps) of the scaled row (eps scaled with it) and B = (b 2^-eb) s_b, the
//   same value as b / max(||b||, eps).
// * r = fma(a, B, (1 - a) h) cannot overflow for a in [0, 1] (|r| <= max(|h|, 1)). Only when
//   M >= 2^100 (|a| > 1 with bf16 h near its limit) is r formed as r 2^-q, q = max(0, e(max|h|) +
//   e(max|1 - a|) + 2 - 100), which bounds it by 2^100 (|a| < 2^120 assumed; elements of B below
//   2^(q-149) then lose bits, far below the output's resolution). Pass 2: max|r| and sum r^2,
//   with the same power-of-two rescue 2^-er; s_r = 1/max(||r||, eps) of the scaled row.
// * pass 3: y = (r 2^-q 2^-er) s_r, rounded once.
// Saved per row (16 B): {s_b, s_r, eb * 2 + clamped_b, ((er * 256 + q) * 2 + clamped_r)} (ints as
// float bits). The backward recomputes B, r and y with the same operations (same bits) from the
// staged h, b and the statistics; it keeps s_b, s_r as mantissas in [1, 2) and dr in units of
// 2^kr (kr = q + er - e(s_r)) until the one rounding of each output (dh by 2^-kr, db by
// 2^-(eb + kr - e(s_b))), so the per-row factors never over- or underflow fp32 together.
//
// anGPT has no reduction: y = fma(c_b, b, c_h h) per element (|c_h|, |c_b| <= 1: no intermediate
// overflow), non-finite values propagate elementwise (IEEE), as the reference.
//
// Memory: global rows are read with 16-byte vectors (8 elements) on the 16-byte-aligned body and
// scalar head and tail, 64-bit indices. The vector path needs h, b, y (dy, dh, db) congruent
// modulo 16 AND d % 8 == 0 (then every row has the same head, so `a` and the da accumulators are
// laid out in shared memory with the same offset and read as 16-byte vectors too); otherwise the
// whole row is scalar (correct, slower; d_model is a multiple of 8 in practice).
//
// Thread mapping: `warp` kernels give a row to a warp (d <= 1024; 4 warps per block), `block`
// kernels a row to the block (d > 1024), both with a grid-stride loop over rows (persistent
// grid). Reductions are fixed trees (xor butterflies, warp partials in warp order): results do
// not depend on scheduling.
//
// Per-row reciprocals and square roots use the hardware approximations (rcp/rsqrt.approx, <= 2
// ulp of fp32, invisible after the rounding to 16 bits): the IEEE-rounded division and sqrt add
// slow-path calls whose ABI spills registers, and the compile gate requires zero local memory.

#ifndef NL_COMMON_CUH
#include "nl_common.cuh"  // helpers shared by the kernel files (Cvt, lanef, Group, RowMap, ...)
#endif

namespace nlr {

using namespace nl;

/// Elements of 16-bit storage in one 16-byte vector.
constexpr int VEC = VEC_LANES;
/// Rows with max |x| inside [2^RESCUE_LO, 2^RESCUE_HI] are not rescaled.
constexpr int RESCUE_LO = -30;
constexpr int RESCUE_HI = 40;
/// nGPT: r is formed scaled by 2^-q only when max |(1 - a) h| >= 2^PRESCALE.
constexpr int PRESCALE = 100;

struct UpdFwdParams {
  const void* h;
  const void* b;
  const float* a;  // a_len values
  void* y;         // may equal h (in place)
  float4* stats;   // nGPT only, optional (null): one per row
  i64 rows;
  int d;
  int a_len;  // 1 or d
  float eps;  // nGPT only
  int vec_ok;  // h, b, y congruent modulo 16 (the kernel also requires d % 8 == 0)
};

struct UpdBwdParams {
  const void* h;
  const void* b;
  const float* a;
  const void* dy;
  const float4* stats;  // nGPT: the forward's
  void* dh;             // may equal dy or h
  void* db;             // may equal b
  float* da_part;       // optional: [gridDim.x][a_len] fp32 partials
  i64 rows;
  int d;
  int a_len;
  int vec_ok;  // h, b, dy, dh, db congruent modulo 16
};

struct UpdFinalizeParams {
  const float* part;  // [nparts][n]
  float* out;         // [n]
  int nparts;
  int n;
};

// ------------------------------------------------------------------ 16-byte vectors
template <class T>
__device__ __forceinline__ uint4 load16(const T* p) { return *reinterpret_cast<const uint4*>(p); }

__device__ __forceinline__ void load8f(const float* p, float (&f)[VEC]) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  const float4 y = *reinterpret_cast<const float4*>(p + 4);
  f[0] = x.x; f[1] = x.y; f[2] = x.z; f[3] = x.w;
  f[4] = y.x; f[5] = y.y; f[6] = y.z; f[7] = y.w;
}

__device__ __forceinline__ void add8f(float* p, const float (&t)[VEC]) {
  float4 x = *reinterpret_cast<const float4*>(p);
  float4 y = *reinterpret_cast<const float4*>(p + 4);
  x.x += t[0]; x.y += t[1]; x.z += t[2]; x.w += t[3];
  y.x += t[4]; y.y += t[5]; y.z += t[6]; y.w += t[7];
  *reinterpret_cast<float4*>(p) = x;
  *reinterpret_cast<float4*>(p + 4) = y;
}

// ------------------------------------------------------------------ reductions (warp or block)
/// K values reduced at once across the warp: value k by max if bit k of MAXMASK is set, else
/// by sum. Xor butterflies: every lane ends with the same bits.
template <int K, unsigned MAXMASK>
__device__ __forceinline__ void warp_reduce(float (&v)[K]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int k = 0; k < K; k++) {
      const float t = __shfl_xor_sync(0xffffffffu, v[k], o);
      v[k] = ((MAXMASK >> k) & 1u) ? fmaxf(v[k], t) : v[k] + t;
    }
  }
}

/// The same over the block: warp butterflies, then every thread combines the warp partials in
/// warp order.
template <int K, unsigned MAXMASK>
__device__ __forceinline__ void block_reduce(float (&v)[K]) {
  __shared__ float red[K * 32];
  warp_reduce<K, MAXMASK>(v);
  const int w = (int)(threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int k = 0; k < K; k++) red[k * 32 + w] = v[k];
  }
  __syncthreads();
  const int nw = (int)(blockDim.x >> 5);
#pragma unroll
  for (int k = 0; k < K; k++) {
    float s = red[k * 32];
    for (int j = 1; j < nw; j++) s = ((MAXMASK >> k) & 1u) ? fmaxf(s, red[k * 32 + j]) : s + red[k * 32 + j];
    v[k] = s;
  }
  __syncthreads();
}

template <bool BLOCK, int K, unsigned MAXMASK>
__device__ __forceinline__ void group_reduce(float (&v)[K]) {
  if (BLOCK) block_reduce<K, MAXMASK>(v);
  else warp_reduce<K, MAXMASK>(v);
}

// ------------------------------------------------------------------ row layout and passes
/// Shared-memory slots (elements) per staged row or column vector: column i lives at slot
/// i + VEC - head, so the vector body is 16-byte aligned there too.
__device__ __forceinline__ i64 row_slots(int n) { return (i64)((n + 2 * VEC - 1) / VEC) * VEC; }

/// One pass over this thread's elements of a row. Sources `src[k]` (global rows, or staged rows
/// pre-offset so that column i is `src[k][i]`) are read; when STAGE, copied to `stg[k]` (same
/// indexing); `f(i, x, a, o)` gets the NI input values and a_i, writes NO outputs (rounded once
/// into `dst[k]`, global rows) and returns a term added to `acc[i]` (if acc is not null). The
/// vector body uses 16-byte accesses for every row, `a` and `acc`.
template <class T, int NI, int NO, bool STAGE, class F>
__device__ __forceinline__ void row_pass(const T* const (&src)[NI], T* const (&stg)[NI], T* const (&dst)[NO > 0 ? NO : 1],
                                         const float* ab, float* acc, const RowMap& m, int G, int r, F&& f) {
  constexpr int NOA = NO > 0 ? NO : 1;
  auto scalar = [&](i64 i) {
    float x[NI];
#pragma unroll
    for (int k = 0; k < NI; k++) {
      const T v = src[k][i];
      if (STAGE) stg[k][i] = v;
      x[k] = Cvt<T>::to(v);
    }
    float o[NOA];
    const float t = f(i, x, ab[i], o);
#pragma unroll
    for (int k = 0; k < NO; k++) dst[k][i] = Cvt<T>::from(o[k]);
    if (acc) acc[i] += t;
  };
  if (r < m.head) scalar((i64)r);
  for (int v = r; v < m.nvec; v += G) {
    const i64 i0 = (i64)m.head + (i64)v * VEC;
    uint4 u[NI];
#pragma unroll
    for (int k = 0; k < NI; k++) {
      u[k] = load16<T>(src[k] + i0);
      if (STAGE) *reinterpret_cast<uint4*>(stg[k] + i0) = u[k];
    }
    float av[VEC];
    load8f(ab + i0, av);
    float o[NOA][VEC];
    float t[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      float x[NI];
#pragma unroll
      for (int k = 0; k < NI; k++) x[k] = lanef<T>(u[k], j);
      float oj[NOA];
      t[j] = f(i0 + j, x, av[j], oj);
#pragma unroll
      for (int k = 0; k < NO; k++) o[k][j] = oj[k];
    }
#pragma unroll
    for (int k = 0; k < NO; k++) store16(dst[k] + i0, pack8<T>(o[k]));
    if (acc) add8f(acc + i0, t);
  }
  for (i64 i = (i64)m.head + (i64)m.nvec * VEC + r; i < m.n; i += G) scalar(i);
}

// ------------------------------------------------------------------ rescue, eps, statistics
/// Multiplication by 2^-e as two in-range factors, |e| clamped to 252 (beyond it the product of
/// any fp32 value of the kernels' magnitudes is 0 or Inf anyway). Exact unless the result is
/// subnormal; e = 0 multiplies by 1 twice.
struct Scale {
  float f1, f2;
  __device__ __forceinline__ explicit Scale(int e) {
    e = e < -252 ? -252 : (e > 252 ? 252 : e);
    f1 = pow2(-(e / 2));
    f2 = pow2(-(e - e / 2));
  }
  __device__ __forceinline__ float operator()(float v) const { return (v * f1) * f2; }
};

/// 1/max(||x||, eps) of a row scaled by 2^-e, from its sum of squares: returns the reciprocal
/// (for the scaled row) and whether the clamp applied. If eps 2^-e overflows (a tiny row scaled
/// up), eps dominates: the reciprocal is 2^e / eps so that (x 2^-e) s = x / eps.
__device__ __forceinline__ float unit_rscale(float sumsq, int e, float eps, bool& clamped) {
  const float eps_s = Scale(e)(eps);
  if (!isfinite(eps_s)) {
    clamped = true;
    return Scale(-e)(recip(eps));
  }
  const float nrm = norm_from_sumsq(sumsq);
  clamped = !(nrm >= eps_s);
  return recip(clamped ? eps_s : nrm);
}

__device__ __forceinline__ int meta_b(int eb, bool clamped) { return eb * 2 + (clamped ? 1 : 0); }
__device__ __forceinline__ int meta_r(int q, int er, bool clamped) { return (er * 256 + q) * 2 + (clamped ? 1 : 0); }

// ------------------------------------------------------------------ a in shared memory
struct ABlock {
  bool bad;   // some a_j is NaN or Inf
  int e_oma;  // floor(log2(max_j |1 - a_j|)), 0 if that is 0
};

/// The whole block copies `a` (a_len = 1: broadcast) to ab[0, d) and reduces its facts.
__device__ __forceinline__ ABlock stage_a(const float* a, int a_len, int d, float* ab) {
  float v[2] = {0.0f, 0.0f};
  for (int i = (int)threadIdx.x; i < d; i += (int)blockDim.x) {
    const float x = a[a_len == 1 ? 0 : i];
    ab[i] = x;
    if (!isfinite(x)) v[1] = 1.0f;
    v[0] = fmaxf(v[0], fabsf(1.0f - x));
  }
  block_reduce<2, 3u>(v);  // also publishes ab to the block
  ABlock r;
  r.bad = v[1] != 0.0f;
  r.e_oma = (v[0] > 0.0f && isfinite(v[0])) ? floor_log2(v[0]) : 0;
  return r;
}

/// Whether the row layout allows 16-byte vectors (see the header). With d % 8 == 0 every row has
/// the head of row 0 (row strides are multiples of 16 bytes); otherwise every row is scalar
/// (head 0). Either way a thread owns the same columns in every row.
__device__ __forceinline__ int vec_allowed(int vec_ok, int d) { return vec_ok && (d % VEC) == 0; }

// ------------------------------------------------------------------ nGPT forward
template <class T, bool BLOCK>
__device__ __forceinline__ void ngpt_fwd(const UpdFwdParams& p) {
  NL_DYNAMIC_SMEM(smem);
  typedef Group<BLOCK> Gr;
  const int d = p.d;
  const int G = Gr::size(), r = Gr::rank(), gi = Gr::index_in_block();
  const int vec_ok = vec_allowed(p.vec_ok, d);
  const i64 slots = row_slots(d);
  const int head0 = row_map(p.h, d, vec_ok).head;
  float* ab = reinterpret_cast<float*>(smem) + VEC - head0;
  const ABlock ac = stage_a(p.a, p.a_len, d, ab);
  T* s_h = reinterpret_cast<T*>(smem + 4 * slots) + (i64)gi * 2 * slots;
  T* s_b = s_h + slots;
  const float eps = p.eps;
  const i64 stride = (i64)gridDim.x * Gr::per_block();
  for (i64 row = (i64)blockIdx.x * Gr::per_block() + gi; row < p.rows; row += stride) {
    const T* hr = static_cast<const T*>(p.h) + row * d;
    const T* br = static_cast<const T*>(p.b) + row * d;
    T* yr = static_cast<T*>(p.y) + row * d;
    const RowMap m = row_map(hr, d, vec_ok);
    T* const sh = s_h + VEC - m.head;
    T* const sb_ = s_b + VEC - m.head;
    const T* const st2[2] = {sh, sb_};
    T* const out[1] = {yr};
    T* const no[1] = {nullptr};
    T* const no2[2] = {nullptr, nullptr};
    // Pass 1: the global read, staged. max|b| (Inf for a non-finite h or b), max|(1-a) h|, sum b^2.
    float v1[3] = {0.0f, 0.0f, 0.0f};
    {
      const T* const g2[2] = {hr, br};
      T* const stg[2] = {sh, sb_};
      row_pass<T, 2, 0, true>(g2, stg, no, ab, nullptr, m, G, r, [&](i64, const float (&x)[2], float a, float (&)[1]) {
        v1[0] = fmaxf(v1[0], (isfinite(x[0]) && isfinite(x[1])) ? fabsf(x[1]) : f_inf());
        v1[1] = fmaxf(v1[1], fabsf((1.0f - a) * x[0]));
        v1[2] += x[1] * x[1];
        return 0.0f;
      });
    }
    group_reduce<BLOCK, 3, 3u>(v1);
    float sb = f_nan(), sr = f_nan();
    int mb = 0, mr = 0;
    if (!ac.bad && v1[0] < f_inf()) {
      // Norm(b): power-of-two rescue, then the clamp at eps.
      const int eb = rescue_exponent<RESCUE_LO, RESCUE_HI>(v1[0]);
      const Scale scb(eb);
      float qb[1] = {v1[2]};
      if (eb != 0) {
        qb[0] = 0.0f;
        row_pass<T, 2, 0, false>(st2, no2, no, ab, nullptr, m, G, r, [&](i64, const float (&x)[2], float, float (&)[1]) {
          const float t = scb(x[1]);
          qb[0] += t * t;
          return 0.0f;
        });
        group_reduce<BLOCK, 1, 0u>(qb);
      }
      bool cb;
      sb = unit_rscale(qb[0], eb, eps, cb);
      // Pre-scale of r (only for |1 - a| max|h| >= 2^100).
      int q = 0;
      if (!(v1[1] < 0x1p100f)) {
        float hm[1] = {0.0f};
        row_pass<T, 2, 0, false>(st2, no2, no, ab, nullptr, m, G, r, [&](i64, const float (&x)[2], float, float (&)[1]) {
          hm[0] = fmaxf(hm[0], fabsf(x[0]));
          return 0.0f;
        });
        group_reduce<BLOCK, 1, 1u>(hm);
        q = hm[0] > 0.0f ? floor_log2(hm[0]) + ac.e_oma + 2 - PRESCALE : 0;
        q = q > 0 ? q : 0;
      }
      const Scale sq(q);
      auto rs_of = [&](float h, float b, float a) { return fmaf(a, sq(scb(b) * sb), (1.0f - a) * sq(h)); };
      // Pass 2: max|r| and sum r^2 of r 2^-q.
      float v2[2] = {0.0f, 0.0f};
      row_pass<T, 2, 0, false>(st2, no2, no, ab, nullptr, m, G, r, [&](i64, const float (&x)[2], float a, float (&)[1]) {
        const float rs = rs_of(x[0], x[1], a);
        v2[0] = fmaxf(v2[0], fabsf(rs));
        v2[1] += rs * rs;
        return 0.0f;
      });
      group_reduce<BLOCK, 2, 1u>(v2);
      const int er = rescue_exponent<RESCUE_LO, RESCUE_HI>(v2[0]);
      const Scale scr(er);
      float qr[1] = {v2[1]};
      if (er != 0) {
        qr[0] = 0.0f;
        row_pass<T, 2, 0, false>(st2, no2, no, ab, nullptr, m, G, r, [&](i64, const float (&x)[2], float a, float (&)[1]) {
          const float t = scr(rs_of(x[0], x[1], a));
          qr[0] += t * t;
          return 0.0f;
        });
        group_reduce<BLOCK, 1, 0u>(qr);
      }
      bool cr;
      sr = unit_rscale(qr[0], q + er, eps, cr);
      // Pass 3: y = (r 2^-q 2^-er) s_r, one rounding.
      row_pass<T, 2, 1, false>(st2, no2, out, ab, nullptr, m, G, r, [&](i64, const float (&x)[2], float a, float (&o)[1]) {
        o[0] = scr(rs_of(x[0], x[1], a)) * sr;
        return 0.0f;
      });
      mb = meta_b(eb, cb);
      mr = meta_r(q, er, cr);
    } else {
      row_pass<T, 2, 1, false>(st2, no2, out, ab, nullptr, m, G, r, [&](i64, const float (&)[2], float, float (&o)[1]) {
        o[0] = f_nan();
        return 0.0f;
      });
    }
    if (p.stats && r == 0) p.stats[row] = make_float4(sb, sr, __int_as_float(mb), __int_as_float(mr));
    // No barrier before the next row: every row has the same head (see vec_allowed), so each
    // thread stages and re-reads the same slots in every row; nothing crosses threads but the
    // reductions, which synchronise themselves.
  }
}

// ------------------------------------------------------------------ da partials
/// Shared-memory bytes of one group's staged rows plus its da accumulator.
__device__ __forceinline__ i64 group_bytes(int staged_rows, int elem_bytes, i64 slots, bool want_da) {
  return (i64)staged_rows * elem_bytes * slots + (want_da ? 4 * slots : 0);
}

/// Zero this group's accumulator (columns 0..d).
template <bool BLOCK>
__device__ __forceinline__ void zero_acc(float* acc, int d) {
  typedef Group<BLOCK> Gr;
  for (int i = Gr::rank(); i < d; i += Gr::size()) acc[i] = 0.0f;
  Gr::sync();
}

/// One fp32 partial per block: column sums over the groups in group order (per-dimension a), or
/// for a scalar a their sum over the columns (thread-strided, then a fixed block tree).
/// `acc0` is group 0's accumulator (column-indexed); group g's is at acc0 + g * stride_floats.
__device__ __forceinline__ void write_partials(const float* acc0, i64 stride_floats, int groups, int d, int a_len, float* part) {
  __syncthreads();
  if (a_len != 1) {
    for (int i = (int)threadIdx.x; i < d; i += (int)blockDim.x) {
      float s = 0.0f;
      for (int g = 0; g < groups; g++) s += acc0[g * stride_floats + i];
      part[(i64)blockIdx.x * d + i] = s;
    }
  } else {
    float t[1] = {0.0f};
    for (int i = (int)threadIdx.x; i < d; i += (int)blockDim.x) {
      float s = 0.0f;
      for (int g = 0; g < groups; g++) s += acc0[g * stride_floats + i];
      t[0] += s;
    }
    block_reduce<1, 0u>(t);
    if (threadIdx.x == 0) part[blockIdx.x] = t[0];
  }
}

// ------------------------------------------------------------------ nGPT backward
template <class T, bool BLOCK>
__device__ __forceinline__ void ngpt_bwd(const UpdBwdParams& p) {
  NL_DYNAMIC_SMEM(smem);
  typedef Group<BLOCK> Gr;
  const int d = p.d;
  const int G = Gr::size(), r = Gr::rank(), gi = Gr::index_in_block();
  const int vec_ok = vec_allowed(p.vec_ok, d);
  const bool want_da = p.da_part != nullptr;
  const i64 slots = row_slots(d);
  const int head0 = row_map(p.h, d, vec_ok).head;
  float* ab = reinterpret_cast<float*>(smem) + VEC - head0;
  stage_a(p.a, p.a_len, d, ab);
  const i64 gbytes = group_bytes(3, (int)sizeof(T), slots, want_da);
  unsigned char* mine = smem + 4 * slots + gi * gbytes;
  T* s_h = reinterpret_cast<T*>(mine);
  T* s_b = s_h + slots;
  T* s_g = s_b + slots;
  // Group g's da accumulator, column-indexed (after its three staged rows).
  auto acc_of = [&](int g) { return reinterpret_cast<float*>(smem + 4 * slots + g * gbytes + 3 * (i64)sizeof(T) * slots) + VEC - head0; };
  float* acc = want_da ? acc_of(gi) : nullptr;
  if (want_da) zero_acc<BLOCK>(acc, d);
  const i64 stride = (i64)gridDim.x * Gr::per_block();
  for (i64 row = (i64)blockIdx.x * Gr::per_block() + gi; row < p.rows; row += stride) {
    const i64 off = row * d;
    const T* hr = static_cast<const T*>(p.h) + off;
    const RowMap m = row_map(hr, d, vec_ok);
    T* const sh = s_h + VEC - m.head;
    T* const sbb = s_b + VEC - m.head;
    T* const sg = s_g + VEC - m.head;
    const T* const st3[3] = {sh, sbb, sg};
    T* const no3[3] = {nullptr, nullptr, nullptr};
    T* const no[1] = {nullptr};
    {
      const T* const g3[3] = {hr, static_cast<const T*>(p.b) + off, static_cast<const T*>(p.dy) + off};
      T* const stg[3] = {sh, sbb, sg};
      row_pass<T, 3, 0, true>(g3, stg, no, ab, nullptr, m, G, r, [](i64, const float (&)[3], float, float (&)[1]) { return 0.0f; });
    }
    const float4 st = p.stats[row];
    const float sb = st.x, sr = st.y;
    const int mb = __float_as_int(st.z), mr = __float_as_int(st.w);
    const int eb = mb >> 1;
    const bool cb = (mb & 1) != 0;
    const bool cr = (mr & 1) != 0;
    const int qe = mr >> 1;  // er * 256 + q
    const int q = qe & 255, er = qe >> 8;
    const Scale scb(eb), sq(q), scr(er);
    auto B_of = [&](float b) { return scb(b) * sb; };
    auto rs_of = [&](float h, float B, float a) { return fmaf(a, sq(B), (1.0f - a) * sq(h)); };
    // Pass 1: y . g
    float dot1[1] = {0.0f};
    row_pass<T, 3, 0, false>(st3, no3, no, ab, nullptr, m, G, r, [&](i64, const float (&x)[3], float a, float (&)[1]) {
      const float y = scr(rs_of(x[0], B_of(x[1]), a)) * sr;
      dot1[0] += y * x[2];
      return 0.0f;
    });
    group_reduce<BLOCK, 1, 0u>(dot1);
    // The reciprocals as mantissa in [1, 2) times 2^e, the exponents carried to the final scale:
    // products of two small (or large) per-row factors (a tiny b's s_b with a clamped r's s_r)
    // would otherwise underflow (overflow) fp32 before the one scale that brings them back.
    const int esb = (sb > 0.0f && isfinite(sb)) ? floor_log2(sb) : 0;
    const int esr = (sr > 0.0f && isfinite(sr)) ? floor_log2(sr) : 0;
    const float sbn = Scale(esb)(sb), srn = Scale(esr)(sr);
    // dr_n = dr_true 2^kr, kr = q + er - e(s_r).
    const int kr = q + er - esr;
    // Clamped norms have the plain s g form: their dot products are replaced by 0 (y and B are
    // finite in a valid row, so y * 0 = 0 and the result is bitwise s g), branch free.
    const float dot1e = cr ? 0.0f : dot1[0];
    auto dr_of = [&](float y, float g) { return srn * (g - y * dot1e); };
    // Pass 2: B . dB (in units of 2^kr)
    float dot2[1] = {0.0f};
    row_pass<T, 3, 0, false>(st3, no3, no, ab, nullptr, m, G, r, [&](i64, const float (&x)[3], float a, float (&)[1]) {
      const float B = B_of(x[1]);
      const float y = scr(rs_of(x[0], B, a)) * sr;
      dot2[0] += B * (a * dr_of(y, x[2]));
      return 0.0f;
    });
    group_reduce<BLOCK, 1, 0u>(dot2);
    // Pass 3: dh = (1 - a) dr, db = s_b (dB - B (B . dB)) (one rounding each) and the da terms.
    const Scale sk(kr), sbk(eb + kr - esb);
    const float dot2e = cb ? 0.0f : dot2[0];
    T* const out[2] = {static_cast<T*>(p.dh) + off, static_cast<T*>(p.db) + off};
    row_pass<T, 3, 2, false>(st3, no3, out, ab, acc, m, G, r, [&](i64, const float (&x)[3], float a, float (&o)[2]) {
      const float h = x[0];
      const float B = B_of(x[1]);
      const float y = scr(rs_of(h, B, a)) * sr;
      const float dr = dr_of(y, x[2]);
      const float dB = a * dr;
      o[0] = sk((1.0f - a) * dr);
      o[1] = sbk(sbn * (dB - B * dot2e));
      const float bh = B - h;
      // Scale first where it shrinks (kr > 0: B - h may be huge), last where it grows.
      return kr >= 0 ? dr * sk(bh) : sk(dr * bh);
    });
    // No barrier before the next row (as the forward): the slots and da columns a thread
    // touches are the same in every row.
  }
  if (want_da) write_partials(acc_of(0), gbytes / 4, Gr::per_block(), d, p.a_len, p.da_part);
}

// ------------------------------------------------------------------ anGPT forward and backward
/// c_h = nu (1 - a), c_b = nu a, and nu^2.
struct Coefs {
  float ch, cb, nu2;
};
__device__ __forceinline__ Coefs angpt_coefs(float a) {
  const float om = 1.0f - a;
  const float nu = rsqrtf(fmaf(a, a, om * om));  // (1-a)^2 + a^2 >= 1/2: no cancellation
  Coefs c;
  c.ch = nu * om;
  c.cb = nu * a;
  c.nu2 = nu * nu;
  return c;
}

template <class T, bool BLOCK>
__device__ __forceinline__ void angpt_fwd(const UpdFwdParams& p) {
  NL_DYNAMIC_SMEM(smem);
  typedef Group<BLOCK> Gr;
  const int d = p.d;
  const int G = Gr::size(), r = Gr::rank(), gi = Gr::index_in_block();
  const int vec_ok = vec_allowed(p.vec_ok, d);
  const int head0 = row_map(p.h, d, vec_ok).head;
  float* ab = reinterpret_cast<float*>(smem) + VEC - head0;
  stage_a(p.a, p.a_len, d, ab);
  const i64 stride = (i64)gridDim.x * Gr::per_block();
  for (i64 row = (i64)blockIdx.x * Gr::per_block() + gi; row < p.rows; row += stride) {
    const i64 off = row * d;
    const T* hr = static_cast<const T*>(p.h) + off;
    const RowMap m = row_map(hr, d, vec_ok);
    const T* const g2[2] = {hr, static_cast<const T*>(p.b) + off};
    T* const no2[2] = {nullptr, nullptr};
    T* const out[1] = {static_cast<T*>(p.y) + off};
    row_pass<T, 2, 1, false>(g2, no2, out, ab, nullptr, m, G, r, [&](i64, const float (&x)[2], float a, float (&o)[1]) {
      const Coefs c = angpt_coefs(a);
      o[0] = fmaf(c.cb, x[1], c.ch * x[0]);
      return 0.0f;
    });
  }
}

template <class T, bool BLOCK>
__device__ __forceinline__ void angpt_bwd(const UpdBwdParams& p) {
  NL_DYNAMIC_SMEM(smem);
  typedef Group<BLOCK> Gr;
  const int d = p.d;
  const int G = Gr::size(), r = Gr::rank(), gi = Gr::index_in_block();
  const int vec_ok = vec_allowed(p.vec_ok, d);
  const bool want_da = p.da_part != nullptr;
  const i64 slots = row_slots(d);
  const int head0 = row_map(p.h, d, vec_ok).head;
  float* ab = reinterpret_cast<float*>(smem) + VEC - head0;
  stage_a(p.a, p.a_len, d, ab);
  const i64 gbytes = group_bytes(0, (int)sizeof(T), slots, want_da);
  auto acc_of = [&](int g) { return reinterpret_cast<float*>(smem + 4 * slots + g * gbytes) + VEC - head0; };
  float* acc = want_da ? acc_of(gi) : nullptr;
  if (want_da) zero_acc<BLOCK>(acc, d);
  const i64 stride = (i64)gridDim.x * Gr::per_block();
  for (i64 row = (i64)blockIdx.x * Gr::per_block() + gi; row < p.rows; row += stride) {
    const i64 off = row * d;
    const T* hr = static_cast<const T*>(p.h) + off;
    const RowMap m = row_map(hr, d, vec_ok);
    const T* const g3[3] = {hr, static_cast<const T*>(p.b) + off, static_cast<const T*>(p.dy) + off};
    T* const no3[3] = {nullptr, nullptr, nullptr};
    T* const out[2] = {static_cast<T*>(p.dh) + off, static_cast<T*>(p.db) + off};
    row_pass<T, 3, 2, false>(g3, no3, out, ab, acc, m, G, r, [&](i64, const float (&x)[3], float a, float (&o)[2]) {
      const Coefs c = angpt_coefs(a);
      const float g = x[2];
      o[0] = c.ch * g;
      o[1] = c.cb * g;
      // d y / d a = nu^2 (c_h b - c_b h)
      return g * (c.nu2 * fmaf(c.ch, x[1], -(c.cb * x[0])));
    });
  }
  if (want_da) write_partials(acc_of(0), gbytes / 4, Gr::per_block(), d, p.a_len, p.da_part);
}

/// da: the per-block partials summed in block order (fp32 out).
__device__ __forceinline__ void finalize(const UpdFinalizeParams& p) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int b = 0; b < p.nparts; b++) s += p.part[(i64)b * p.n + i];
    p.out[i] = s;
  }
}

}  // namespace nlr

// ------------------------------------------------------------------ the kernel list
// nl_update_<ngpt|angpt>_<fwd|bwd>_<f16|bf16>_<warp|block> and nl_update_finalize;
// normlab_kernels::list::update_names() builds the same names, the compile gate checks them.
#define NL_UPD_WARP_THREADS 128
#define NL_UPD_BLOCK_THREADS_MAX 512
#define NL_UPD_FINALIZE_THREADS 256

#define NL_UPDATE_FOR_EACH_KIND(X, ...) \
  X(ngpt, __VA_ARGS__)                  \
  X(angpt, __VA_ARGS__)

#define NL_UPDATE_KERNELS_KIND(kind, tn, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(NL_UPD_WARP_THREADS) nl_update_##kind##_fwd_##tn##_warp(nlr::UpdFwdParams p) { \
    nlr::kind##_fwd<T, false>(p);                                                                                  \
  }                                                                                                                \
  extern "C" __global__ void __launch_bounds__(NL_UPD_BLOCK_THREADS_MAX) nl_update_##kind##_fwd_##tn##_block(nlr::UpdFwdParams p) { \
    nlr::kind##_fwd<T, true>(p);                                                                                   \
  }                                                                                                                \
  extern "C" __global__ void __launch_bounds__(NL_UPD_WARP_THREADS) nl_update_##kind##_bwd_##tn##_warp(nlr::UpdBwdParams p) { \
    nlr::kind##_bwd<T, false>(p);                                                                                  \
  }                                                                                                                \
  extern "C" __global__ void __launch_bounds__(NL_UPD_BLOCK_THREADS_MAX) nl_update_##kind##_bwd_##tn##_block(nlr::UpdBwdParams p) { \
    nlr::kind##_bwd<T, true>(p);                                                                                   \
  }

#define NL_UPDATE_KERNELS_DTYPE(tn, T, ...) NL_UPDATE_FOR_EACH_KIND(NL_UPDATE_KERNELS_KIND, tn, T)
NL_FOR_EACH_DTYPE(NL_UPDATE_KERNELS_DTYPE, _)

extern "C" __global__ void __launch_bounds__(NL_UPD_FINALIZE_THREADS) nl_update_finalize(nlr::UpdFinalizeParams p) {
  nlr::finalize(p);
}
