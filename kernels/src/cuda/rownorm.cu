#line 2 "rownorm.cu"  // line 1 is this directive (NVRTC compiles nl_common.cuh + this file)
// rownorm.cu: row-form normalizations (RMS, Layer, unit L2, L1, L-inf, Top-k), forward and
// backward, for fp16 and bf16 storage with fp32 statistics and one rounding on store.
//
// Compiled by NVRTC for the GPU (compute_80/compute_90) and, unmodified, as C++20 against
// simt_cpu.h for execution on the CPU in tests. Formulas (as normlab-norms, docs in norms/src/spec.rs
// and norms/src/row/mod.rs), with z = x - mu and D the kind's denominator:
//
//   forward   y = (z / D) * w + b
//   backward  dz_j = s (g_j - (g . x^) dD/dz_j),  s = 1/D, x^ = z s, g = dy * w
//             dx = dz - mean(dz) (centred kinds), dw = sum_rows dy x^, db = sum_rows dy
//
// Statistics are those of normlab-norms' RowStats, in fp32:
// * centred mean by the corrected two-pass algorithm: hi = sum(x)/n, lo = sum(x - hi)/n,
//   z = (x - hi) - lo; LayerNorm's variance is sum((x - hi)^2)/n - lo^2, clamped at 0.
// * a row is first scaled by an exact power of two 2^-e when its largest magnitude is outside
//   [2^-30, 2^40] (bf16 reaches 3e38, whose squares overflow fp32; tiny rows would underflow):
//   statistics describe the scaled row, eps is scaled with it, e is saved with the statistics.
// * a row with any non-finite input gets NaN statistics, so its output is all NaN.
// * L-inf and Top-k select on |z| with ties going to the lowest index.
//
// Memory: each input element is read once from DRAM. Block kernels whose rows are whole 16-byte
// vectors with a thread per vector (n a multiple of 8 up to 8 * threads, aligned buffers; every
// kind but Top-k, and the backward also not L-inf) hold the row in registers and load the next
// row's vector before this row's reductions (fwd_regs, bwd_regs). The general path stages the
// row in shared memory in its
// storage type; every thread then reads back only the elements it loaded (the same mapping is
// used for every pass), so between the load and the output no barrier is needed except inside
// the reductions. Global accesses are 16-byte vectors (8 elements) on the aligned body of a row,
// with scalar head (to reach 16-byte alignment) and tail; all indices are 64-bit. The block
// backward hints its next row (x and dy) into L2 before loading the current one (prefetch_row),
// so that its DRAM latency overlaps this row's reductions: on an H100 that made the block
// backward 2-9% faster, while the same hint left the block forward unchanged (0.995-1.012) and
// made the warp kernels 3-11% slower, so only the block backward has it (measured with
// `normlab bench --device cuda`, README "CUDA kernels on an H100").
//
// Thread mapping: `warp` kernels give one row to a warp (short rows, n <= 1024, e.g. QK-norm with
// head_dim 64..128); `block` kernels give one row to a block (wide rows). Both loop over rows with
// a grid stride (persistent grid). Reductions are fixed trees (xor butterflies, then the warp
// partials by the same butterfly), so results do not depend on scheduling.
//
// Top-k keeps, per thread, the TOPK_MAX largest |z| in registers (sorted insertion, compile-time
// indices), then merges across the warp in k rounds of a (value, lane) argmax. k > TOPK_MAX is
// rejected by the host (normlab_kernels::plan) with a typed error; a kernel launched anyway
// writes NaN rather than a wrong value.
//
// Weight and bias gradients are deterministic: each group accumulates dy*x^ and dy over its rows
// in shared memory (fp32, row order fixed by the grid), the block writes one fp32 partial row
// per block (warps added in warp order), and `nl_finalize_*` sums the partials in block order.
// No atomics.

#ifndef NL_COMMON_CUH
#include "nl_common.cuh"  // helpers shared by the kernel files (Cvt, lanef, Group, RowMap, ...)
#endif

namespace nl {

enum Kind { RMS = 0, LAYER = 1, UNIT_L2 = 2, L1 = 3, LINF = 4, TOPK = 5 };

/// Largest k the register top-k supports.
constexpr int TOPK_MAX = 32;
/// Elements of 16-bit storage in one 16-byte vector.
constexpr int VEC = VEC_LANES;
/// 16-byte vectors of a row each thread holds in the block kernels' register paths: the plan gives
/// a block 32 * ceil(n / (32 * VEC * vectors)) threads (forward 2: fwd_regs; backward 1:
/// bwd_regs, which holds x and dy of two rows and at 2 vectors needed 96 registers).
constexpr int FWD_REG_VECS = 2;
constexpr int BWD_REG_VECS = 1;
/// Rows with max |x| inside [2^RESCUE_LO, 2^RESCUE_HI] are not rescaled (fp32 sums of squares of
/// up to 2^40 elements stay finite and above the normal range).
constexpr int RESCUE_LO = -30;
constexpr int RESCUE_HI = 40;

/// Per-row statistics as saved by the forward: {mean_hi, mean_lo, rscale, meta}, meta holding
/// the int (exp2 * 2 + clamped) as float bits.
struct FwdParams {
  const void* x;
  void* y;
  const void* weight;  // optional (null)
  const void* bias;    // optional (null)
  float4* stats;       // optional (null), one per row
  i64 rows;
  int n;
  int centred;
  float eps;
  float c;  // scale constant C (1 for the L2 kinds)
  int k;    // Top-k only
  int vec_ok;  // x and y rows have the same address modulo 16: use 16-byte vectors
};

struct BwdParams {
  const void* x;
  const void* dy;
  const float4* stats;
  const void* weight;  // optional
  void* dx;
  float* dw_part;  // optional: [gridDim.x][n] fp32 partials of dweight
  float* db_part;  // optional: [gridDim.x][n] fp32 partials of dbias
  i64 rows;
  int n;
  int centred;
  float c;
  int k;
  int vec_ok;  // x, dy and dx rows congruent modulo 16
};

struct FinalizeParams {
  const float* part;  // [nparts][n]
  void* out;          // [n] in the storage type
  int nparts;
  int n;
};

// ------------------------------------------------------------------ 16-byte vectors
/// A 16-byte vector of 8 16-bit elements (nl_common.cuh's lanef reads its `.u`). The row kernels
/// hold their vector loads in this one-member struct rather than in a bare uint4: with a bare
/// uint4 NVVM forwards load_row's copy to shared memory and issues the global load after the
/// shared address arithmetic (the same instructions in another order); the struct keeps the PTX
/// as it was before the helpers moved to nl_common.cuh.
struct Vec16 {
  uint4 u;
};

// ------------------------------------------------------------------ reductions (warp or block)
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/// Largest value, ties to the lowest index (a total order, so every lane gets the same pair).
__device__ __forceinline__ void warp_argmax(float& v, i64& idx) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    i64 oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
  }
}

/// Block reductions: warp butterflies; the warp partials go through shared memory and every warp
/// combines them by the same butterfly (lane w holds warp w's partial), so every thread gets the
/// same value from a fixed tree. (Each thread adding the partials one by one, as before, cost
/// about 16 loads and adds per thread per reduction: with three reductions a row that was about
/// half of the block forward's instructions, which is what bounded it on an H100 and an H200.)
template <int SLOT>
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float red[32];
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  const int nw = (int)(blockDim.x >> 5), lane = (int)(threadIdx.x & 31);
  const float s = warp_sum(lane < nw ? red[lane] : 0.0f);
  __syncthreads();
  return s;
}

template <bool BLOCK>
__device__ __forceinline__ float group_sum(float v) {
  if (BLOCK) return block_sum<0>(v);
  return warp_sum(v);
}

template <bool BLOCK>
__device__ __forceinline__ int group_sum_int(int v) {
  v = warp_sum(v);
  if (!BLOCK) return v;
  __shared__ int red_i[32];
  if ((threadIdx.x & 31) == 0) red_i[threadIdx.x >> 5] = v;
  __syncthreads();
  const int nw = (int)(blockDim.x >> 5), lane = (int)(threadIdx.x & 31);
  const int s = warp_sum(lane < nw ? red_i[lane] : 0);
  __syncthreads();
  return s;
}

template <bool BLOCK>
__device__ __forceinline__ float group_max(float v) {
  v = warp_max(v);
  if (!BLOCK) return v;
  __shared__ float red_m[32];
  if ((threadIdx.x & 31) == 0) red_m[threadIdx.x >> 5] = v;
  __syncthreads();
  const int nw = (int)(blockDim.x >> 5), lane = (int)(threadIdx.x & 31);
  const float s = warp_max(lane < nw ? red_m[lane] : red_m[0]);
  __syncthreads();
  return s;
}

template <bool BLOCK>
__device__ __forceinline__ void group_argmax(float& v, i64& idx) {
  warp_argmax(v, idx);
  if (!BLOCK) return;
  __shared__ float red_v[32];
  __shared__ i64 red_x[32];
  if ((threadIdx.x & 31) == 0) {
    red_v[threadIdx.x >> 5] = v;
    red_x[threadIdx.x >> 5] = idx;
  }
  __syncthreads();
  v = red_v[0];
  idx = red_x[0];
  const int nw = (int)(blockDim.x >> 5);
  for (int w = 1; w < nw; w++)
    if (red_v[w] > v || (red_v[w] == v && red_x[w] < idx)) { v = red_v[w]; idx = red_x[w]; }
  __syncthreads();
}

// ------------------------------------------------------------------ row layout
/// Shared-memory slots per staged row (16-byte multiple).
__device__ __forceinline__ int row_slots(int n) { return ((n + 2 * VEC - 1) / VEC) * VEC; }

/// Copy this thread's part of a row from global to shared memory and call f(i, value) on each.
template <class T, class F>
__device__ __forceinline__ void load_row(const T* __restrict__ g, T* s, const RowMap& m, int G, int r, F&& f) {
  if (r < m.head) {
    T v = g[r];
    s[r + VEC - m.head] = v;
    f((i64)r, Cvt<T>::to(v));
  }
  for (int v = r; v < m.nvec; v += G) {
    const i64 i0 = (i64)m.head + (i64)v * VEC;
    Vec16 q;
    q.u = *reinterpret_cast<const uint4*>(g + i0);
    *reinterpret_cast<uint4*>(s + VEC + (i64)v * VEC) = q.u;
#pragma unroll
    for (int j = 0; j < VEC; j++) f(i0 + j, lanef<T>(q.u, j));
  }
  for (i64 i = (i64)m.head + (i64)m.nvec * VEC + r; i < m.n; i += G) {
    T v = g[i];
    s[i + VEC - m.head] = v;
    f(i, Cvt<T>::to(v));
  }
}

/// Elements of T in one 128-byte line.
template <class T>
__device__ __forceinline__ constexpr int line_elems() { return 128 / (int)sizeof(T); }

/// Prefetch row `g` of n elements into L2, one hint per 128-byte line spread over the group (a
/// last hint at the row's end covers a line the start's misalignment pushed past). Issued for
/// the group's NEXT row before the current row's loads, so that row's DRAM latency overlaps
/// this row's reductions instead of following them (a group holds one row at a time).
template <class T>
__device__ __forceinline__ void prefetch_row(const T* g, int n, int G, int r) {
  for (i64 i = (i64)r * line_elems<T>(); i < n; i += (i64)G * line_elems<T>()) prefetch_l2(g + i);
  if (r == 0) prefetch_l2(g + n - 1);
}

/// Call f(i, value) on this thread's elements of a staged row.
template <class T, class F>
__device__ __forceinline__ void visit_row(const T* s, const RowMap& m, int G, int r, F&& f) {
  if (r < m.head) f((i64)r, Cvt<T>::to(s[r + VEC - m.head]));
  for (int v = r; v < m.nvec; v += G) {
    const i64 i0 = (i64)m.head + (i64)v * VEC;
    Vec16 q;
    q.u = *reinterpret_cast<const uint4*>(s + VEC + (i64)v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; j++) f(i0 + j, lanef<T>(q.u, j));
  }
  for (i64 i = (i64)m.head + (i64)m.nvec * VEC + r; i < m.n; i += G) f(i, Cvt<T>::to(s[i + VEC - m.head]));
}

/// Visit two staged rows with the same map (x and dy) and call f(i, x, dy).
template <class T, class F>
__device__ __forceinline__ void visit_row2(const T* s, const T* s2, const RowMap& m, int G, int r, F&& f) {
  if (r < m.head) f((i64)r, Cvt<T>::to(s[r + VEC - m.head]), Cvt<T>::to(s2[r + VEC - m.head]));
  for (int v = r; v < m.nvec; v += G) {
    const i64 i0 = (i64)m.head + (i64)v * VEC;
    Vec16 q, q2;
    q.u = *reinterpret_cast<const uint4*>(s + VEC + (i64)v * VEC);
    q2.u = *reinterpret_cast<const uint4*>(s2 + VEC + (i64)v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; j++) f(i0 + j, lanef<T>(q.u, j), lanef<T>(q2.u, j));
  }
  for (i64 i = (i64)m.head + (i64)m.nvec * VEC + r; i < m.n; i += G)
    f(i, Cvt<T>::to(s[i + VEC - m.head]), Cvt<T>::to(s2[i + VEC - m.head]));
}

/// Store out(i, x_i, dy_i) for this thread's elements into global `o` (same map as the staged
/// rows; 16-byte vector stores on the body).
template <class T, class F>
__device__ __forceinline__ void store_row(T* __restrict__ o, const T* s, const T* s2, const RowMap& m, int G, int r,
                                          F&& out) {
  if (r < m.head) {
    const int sl = r + VEC - m.head;
    o[r] = Cvt<T>::from(out((i64)r, Cvt<T>::to(s[sl]), s2 ? Cvt<T>::to(s2[sl]) : 0.0f));
  }
  for (int v = r; v < m.nvec; v += G) {
    const i64 i0 = (i64)m.head + (i64)v * VEC;
    Vec16 q, q2;
    q.u = *reinterpret_cast<const uint4*>(s + VEC + (i64)v * VEC);
    if (s2) q2.u = *reinterpret_cast<const uint4*>(s2 + VEC + (i64)v * VEC);
    else q2.u = make_uint4(0u, 0u, 0u, 0u);
    float res[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) res[j] = out(i0 + j, lanef<T>(q.u, j), s2 ? lanef<T>(q2.u, j) : 0.0f);
    store16(reinterpret_cast<uint4*>(o + i0), pack8<T>(res));
  }
  for (i64 i = (i64)m.head + (i64)m.nvec * VEC + r; i < m.n; i += G) {
    const i64 sl = i + VEC - m.head;
    o[i] = Cvt<T>::from(out(i, Cvt<T>::to(s[sl]), s2 ? Cvt<T>::to(s2[sl]) : 0.0f));
  }
}

// ------------------------------------------------------------------ pure half arithmetic
/// Arithmetic of the pure-half variant: every result rounded to T, as normlab-norms'
/// `Accum::PureF16` / `PureBf16` compute it: the IEEE fp32 operation (exact or correctly
/// rounded; never contracted into an FMA: the _rn intrinsics forbid it) followed by one rounding
/// to T, which is the correctly rounded T operation (fp32 has more than 2p + 2 bits).
template <class T>
struct Pure {
  static __device__ __forceinline__ float r(float v) { return Cvt<T>::to(Cvt<T>::from(v)); }
  static __device__ __forceinline__ float add(float a, float b) { return r(__fadd_rn(a, b)); }
  static __device__ __forceinline__ float sub(float a, float b) { return r(__fsub_rn(a, b)); }
  static __device__ __forceinline__ float mul(float a, float b) { return r(__fmul_rn(a, b)); }
  static __device__ __forceinline__ float div(float a, float b) { return r(__fdiv_rn(a, b)); }
  static __device__ __forceinline__ float sqrt(float a) { return r(__fsqrt_rn(a)); }
};

/// The combine tree of normlab-norms' 16-lane sums (`lanes::combine`: lane j += lane j + 8,
/// then + 4, + 2, + 1) as an xor butterfly over each half-warp: lane 0 gets exactly the CPU's
/// association, and since every add is commutative, every lane of the 16 ends with that value.
template <class T>
__device__ __forceinline__ float pure_butterfly16(float acc) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) acc = Pure<T>::add(acc, __shfl_xor_sync(0xffffffffu, acc, o));
  return acc;
}

// ------------------------------------------------------------------ Top-k
/// Result of a top-k merge: the sum of the k largest (added in descending order, as the CPU
/// path), the k-th largest value and how many of the k are strictly larger than it.
struct TopkResult {
  float sum;
  float kth;
  int n_gt;
  /// PURE merges only: the CPU's 16-lane sum of the k winners in the half arithmetic (winner t
  /// in lane t mod 16, then the lanes' combine tree), as normlab-norms' `topk_mean` adds them.
  float psum;
};

/// k rounds over the warp: the largest list head wins (ties to the lowest lane) and is popped.
/// If `out` is given, lane 0 writes the winners there in order. PURE (type T): also the
/// half-arithmetic lane sum of the winners (`psum`, see TopkResult).
template <bool PURE = false, class T = __half>
__device__ __forceinline__ TopkResult warp_topk_merge(float (&a)[TOPK_MAX], int k, float* out) {
  const int lane = (int)(threadIdx.x & 31);
  TopkResult r{0.0f, 0.0f, 0, 0.0f};
  int run = 0;
  for (int t = 0; t < k; t++) {
    float v = a[0];
    int l = lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int ol = __shfl_xor_sync(0xffffffffu, l, o);
      if (ov > v || (ov == v && ol < l)) { v = ov; l = ol; }
    }
    r.sum += v;
    if constexpr (PURE) {
      if ((t & 15) == (lane & 15)) r.psum = Pure<T>::add(r.psum, v);
    }
    run = (t > 0 && v == r.kth) ? run + 1 : 1;
    r.kth = v;
    if (out && lane == 0) out[t] = v;
    if (lane == l) {
#pragma unroll
      for (int i = 0; i < TOPK_MAX - 1; i++) a[i] = a[i + 1];
      a[TOPK_MAX - 1] = -1.0f;
    }
  }
  r.n_gt = k - run;
  if constexpr (PURE) r.psum = pure_butterfly16<T>(r.psum);
  return r;
}

/// Top-k merge over the group. Block groups: every warp merges its own lists, writes its k
/// winners to shared memory, then every warp merges the warps' lists (redundantly, so no
/// broadcast is needed).
template <bool BLOCK, bool PURE = false, class T = __half>
__device__ __forceinline__ TopkResult group_topk(float (&a)[TOPK_MAX], int k) {
  if (!BLOCK) return warp_topk_merge<PURE, T>(a, k, nullptr);
  __shared__ float s_top[32 * TOPK_MAX];
  const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
  warp_topk_merge<false, T>(a, k, s_top + warp * TOPK_MAX);
  __syncthreads();
  const int nw = (int)(blockDim.x >> 5);
#pragma unroll
  for (int i = 0; i < TOPK_MAX; i++) a[i] = (lane < nw && i < k) ? s_top[lane * TOPK_MAX + i] : -1.0f;
  TopkResult r = warp_topk_merge<PURE, T>(a, k, nullptr);
  __syncthreads();
  return r;
}

/// Index of the last selected element among those with |z| == kth when only `needed` of them
/// are selected (lowest indices first): a scan of the staged row in index order.
template <class T, bool BLOCK, class Z>
__device__ __forceinline__ i64 tie_cut(const T* s, const RowMap& m, float kth, int needed, Z&& absz) {
  const int G = Group<BLOCK>::size(), r = Group<BLOCK>::rank();
  const int lane = (int)(threadIdx.x & 31), warp = r >> 5;
  __shared__ int s_cnt[32];
  __shared__ long long s_cut;
  int base = 0;
  i64 cut = -1;
  for (i64 c0 = 0; c0 < m.n; c0 += G) {
    const i64 i = c0 + r;
    const bool eq = i < m.n && absz(Cvt<T>::to(s[i + VEC - m.head])) == kth;
    const unsigned b = __ballot_sync(0xffffffffu, eq);
    int before = __popc(b & ((1u << lane) - 1u));
    int chunk_total = __popc(b);
    if (BLOCK) {
      if (lane == 0) s_cnt[warp] = chunk_total;
      __syncthreads();
      int wbefore = 0;
      chunk_total = 0;
      const int nw = (int)(blockDim.x >> 5);
      for (int w = 0; w < nw; w++) {
        if (w < warp) wbefore += s_cnt[w];
        chunk_total += s_cnt[w];
      }
      before += wbefore;
      __syncthreads();
    }
    if (eq && base + before == needed - 1) cut = i;
    base += chunk_total;
    if (base >= needed) break;  // uniform: base is the same in every thread
  }
  // Exactly one thread found the cut; share it.
  if (!BLOCK) {
    const unsigned who = __ballot_sync(0xffffffffu, cut >= 0);
    return __shfl_sync(0xffffffffu, cut, who ? __ffs((int)who) - 1 : 0);
  }
  if (r == 0) s_cut = -1;
  __syncthreads();
  if (cut >= 0) s_cut = cut;
  __syncthreads();
  cut = s_cut;
  __syncthreads();
  return cut;
}

// ------------------------------------------------------------------ rescue and eps
/// Multiplication by 2^-e as two in-range factors (|e| <= 149 would not fit one float), branch
/// free: with e = 0 both factors are 1 and the product is exact.
struct Scale {
  float f1, f2;
  __device__ __forceinline__ explicit Scale(int e) : f1(pow2(-(e / 2))), f2(pow2(-(e - e / 2))) {}
  __device__ __forceinline__ float operator()(float v) const { return (v * f1) * f2; }
};

// ------------------------------------------------------------------ the scale from the statistic
/// The row's scale s = 1 / D from the kind's statistic of the (scaled) row and eps of the scaled
/// row `eps_s`; `eps` and `c` as given, `e` the row's rescue exponent. Sets `clamped` for unit L2
/// when the norm is below eps. Shared by the staged and the register paths.
template <int KIND>
__device__ __forceinline__ float scale_of_stat(float stat, float eps_s, float eps, float c, int e, bool& clamped) {
  const bool l2 = KIND == RMS || KIND == LAYER;
  if (!isfinite(eps_s)) {
    // eps dominates completely (a tiny row scaled up): D = sqrt(eps) or eps, unscaled.
    const float d = l2 ? norm_from_sumsq(eps) : eps;
    clamped = KIND == UNIT_L2;
    return Scale(-e)(recip(d));
  }
  if (KIND == RMS || KIND == LAYER) return rsqrtf(stat + eps_s);
  if (KIND == UNIT_L2) {
    clamped = !(stat >= eps_s);
    return recip(clamped ? eps_s : stat);
  }
  return recip(c * stat + eps_s);
}

// ------------------------------------------------------------------ fp8 output
/// Output storage of the forward: the input's 16-bit type, or fp8 E4M3 with a scale.
enum Out { OUT_SAME = 0, OUT_E4M3 = 1 };

/// fp32 -> fp8 E4M3 ("fn": no infinities, largest finite 448), one rounding to nearest even, as
/// normlab-norms stores `float8::F8E4M3`: finite values beyond the range saturate to +-448
/// (|v| >= 464, the midpoint to the missing 480, ties to 448's even significand), NaN and
/// +-Inf become NaN (0x7F), so a non-finite result is never stored as a finite number.
/// Subnormals (|v| < 2^-6) have the quantum 2^-9. Integer and exact power-of-two arithmetic
/// only (rintf rounds to nearest even), so the emulator and the GPU give the same bits.
__device__ __forceinline__ unsigned e4m3_from_f32(float v) {
  const unsigned sign = (__float_as_uint(v) >> 24) & 0x80u;
  const float a = fabsf(v);
  if (!(a <= 3.402823466e38f)) return 0x7Fu;  // NaN or +-Inf
  if (a >= 464.0f) return sign | 0x7Eu;
  if (a < 0.015625f) return sign | (unsigned)rintf(a * 512.0f);  // 0..8 (8: the smallest normal)
  const int e = (int)((__float_as_uint(a) >> 23) & 0xffu) - 127;  // -6..8
  const int q = (int)rintf(a * pow2(3 - e));                      // 8..16 (16 carries into e)
  return sign | (unsigned)(((e + 7) << 3) + q - 8);
}

/// 8-byte global store (st.global.wb.v2), as store16.
__device__ __forceinline__ void store8(uint2* p, uint2 v) {
#ifdef SIMT_CPU
  *p = v;
#else
  __stwb(p, v);
#endif
}

/// Store round_e4m3(out(i, x_i) * scale) for this thread's elements of a staged row into the byte
/// row `o` (same map as the staged row; 8-byte vector stores on the body: with `vec_ok` the host
/// guarantees the fp8 row is 8-byte aligned where the 16-bit row is 16-byte aligned).
template <class T, class F>
__device__ __forceinline__ void store_row_e4m3(unsigned char* __restrict__ o, const T* s, const RowMap& m, int G, int r,
                                               float scale, F&& out) {
  if (r < m.head) o[r] = (unsigned char)e4m3_from_f32(__fmul_rn(out((i64)r, Cvt<T>::to(s[r + VEC - m.head]), 0.0f), scale));
  for (int v = r; v < m.nvec; v += G) {
    const i64 i0 = (i64)m.head + (i64)v * VEC;
    Vec16 q;
    q.u = *reinterpret_cast<const uint4*>(s + VEC + (i64)v * VEC);
    unsigned w[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < VEC; j++) w[j >> 2] |= e4m3_from_f32(__fmul_rn(out(i0 + j, lanef<T>(q.u, j), 0.0f), scale)) << (8 * (j & 3));
    store8(reinterpret_cast<uint2*>(o + i0), make_uint2(w[0], w[1]));
  }
  for (i64 i = (i64)m.head + (i64)m.nvec * VEC + r; i < m.n; i += G)
    o[i] = (unsigned char)e4m3_from_f32(__fmul_rn(out(i, Cvt<T>::to(s[i + VEC - m.head]), 0.0f), scale));
}

// ------------------------------------------------------------------ forward
/// OUT = OUT_E4M3: y is written as fp8 E4M3, round_e4m3(y_fp32 * out_scale), one rounding of the
/// fp32 result (never through the 16-bit type).
/// The forward of one row staged in `s_x` (map `m`), given this thread's max |x| and count of
/// non-finite elements: statistics, output and saved statistics. Every thread of the group calls
/// it; the caller syncs the group before the staged slots are reused.
template <class T, int KIND, bool BLOCK, int OUT>
__device__ __forceinline__ void fwd_staged_row(const FwdParams& p, float out_scale, const T* s_x, const RowMap& m, i64 row,
                                               float amax, int bad) {
  typedef Group<BLOCK> Gr;
  const int n = p.n;
  const int G = Gr::size(), r = Gr::rank();
  const T* __restrict__ wgt = static_cast<const T*>(p.weight);
  const T* __restrict__ bia = static_cast<const T*>(p.bias);
  const float inv_n = recip((float)n);
  const bool centred = p.centred != 0;
  {
    amax = group_max<BLOCK>(amax);
    bad = group_sum_int<BLOCK>(bad);
    float hi = 0.0f, lo = 0.0f, s;
    int e = 0;
    Scale sc(0);
    bool clamped = false;
    if (bad) {
      hi = lo = s = __int_as_float(0x7fc00000);
    } else {
      e = rescue_exponent<RESCUE_LO, RESCUE_HI>(amax);
      sc = Scale(e);
      const bool l2 = KIND == RMS || KIND == LAYER;
      // eps of the scaled row: eps 2^-2e inside a mean square, eps 2^-e on a scale.
      const float eps_s = l2 ? sc(sc(p.eps)) : sc(p.eps);
      if (centred) {
        float a = 0.0f;
        visit_row<T>(s_x, m, G, r, [&](i64, float v) { a += sc(v); });
        hi = group_sum<BLOCK>(a) * inv_n;
      }
      float stat;  // the kind's statistic: mean square, variance, norm or C * mean |z| etc.
      if (KIND == RMS || KIND == UNIT_L2) {
        float q = 0.0f;
        visit_row<T>(s_x, m, G, r, [&](i64, float v) { const float x = sc(v); q += x * x; });
        q = group_sum<BLOCK>(q);
        stat = KIND == RMS ? q * inv_n : norm_from_sumsq(q);
      } else if (KIND == LAYER) {
        float d = 0.0f, q = 0.0f;
        visit_row<T>(s_x, m, G, r, [&](i64, float v) {
          const float t = sc(v) - hi;
          d += t;
          q += t * t;
        });
        d = group_sum<BLOCK>(d);
        q = group_sum<BLOCK>(q);
        lo = d * inv_n;
        stat = fmaxf(q * inv_n - lo * lo, 0.0f);
      } else {
        if (centred) {
          float d = 0.0f;
          visit_row<T>(s_x, m, G, r, [&](i64, float v) { d += sc(v) - hi; });
          lo = group_sum<BLOCK>(d) * inv_n;
        }
        if (KIND == L1) {
          float a = 0.0f;
          visit_row<T>(s_x, m, G, r, [&](i64, float v) { a += fabsf((sc(v) - hi) - lo); });
          stat = group_sum<BLOCK>(a) * inv_n;
        } else if (KIND == LINF) {
          float a = 0.0f;
          visit_row<T>(s_x, m, G, r, [&](i64, float v) { a = fmaxf(a, fabsf((sc(v) - hi) - lo)); });
          stat = group_max<BLOCK>(a);
        } else {
          float a[TOPK_MAX];
#pragma unroll
          for (int i = 0; i < TOPK_MAX; i++) a[i] = -1.0f;
          visit_row<T>(s_x, m, G, r, [&](i64, float v) { topk_insert(a, fabsf((sc(v) - hi) - lo)); });
          const int k = p.k;
          if (k >= 1 && k <= TOPK_MAX) stat = group_topk<BLOCK>(a, k).sum * recip((float)k);
          else stat = __int_as_float(0x7fc00000);
        }
      }
      s = scale_of_stat<KIND>(stat, eps_s, p.eps, p.c, e, clamped);
    }
    auto out = [&](i64 i, float v, float) {
      const float x = sc(v);
      float o = (centred ? (x - hi) - lo : x) * s;
      if (wgt) o *= Cvt<T>::to(wgt[i]);
      if (bia) o += Cvt<T>::to(bia[i]);
      return o;
    };
    if constexpr (OUT == OUT_E4M3) {
      store_row_e4m3<T>(static_cast<unsigned char*>(p.y) + row * n, s_x, m, G, r, out_scale, out);
    } else {
      store_row<T>(static_cast<T*>(p.y) + row * n, s_x, static_cast<const T*>(nullptr), m, G, r, out);
    }
    if (p.stats && r == 0) p.stats[row] = make_float4(hi, lo, s, stats_meta(e, clamped));
  }
}

/// True if the forward can hold rows in registers (fwd_regs): not Top-k, every row is whole
/// 16-byte vectors (n a multiple of 8, x, y, weight and bias 16-byte aligned; fp8 output 8-byte
/// aligned), and a block has a thread per FWD_REG_VECS vectors, or (warp kernels) a row has at
/// most 32 vectors (n <= 256). Uniform over the grid.
template <int KIND, int OUT, bool BLOCK>
__device__ __forceinline__ bool fwd_regs_ok(const FwdParams& p) {
  if (KIND == TOPK) return false;
  const unsigned long long a = (unsigned long long)p.x | (unsigned long long)p.weight | (unsigned long long)p.bias;
  const unsigned long long y = (unsigned long long)p.y;
  const bool y_ok = OUT == OUT_SAME ? (y & 15) == 0 : (y & 7) == 0;
  const int nvec = p.n / VEC;
  return p.vec_ok && (a & 15) == 0 && y_ok && (p.n & (VEC - 1)) == 0 && (BLOCK ? nvec <= FWD_REG_VECS * (int)blockDim.x : nvec <= 32);
}

/// Sum, maximum and int sum over aligned segments of `width` lanes (a power of two up to 32) by an
/// xor butterfly: every lane of a segment ends with the segment's value (a fixed tree).
__device__ __forceinline__ float seg_sum(float v, int width) {
  for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float seg_max(float v, int width) {
  for (int o = width >> 1; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int seg_sum_int(int v, int width) {
  for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Reduce NS sums and NM maxima over the group at once: warp butterflies, then (block) the warp
/// partials through shared memory and the same butterfly in every warp, with one barrier. The
/// shared slots alternate with `parity` so that the next reduction needs no second barrier: its
/// writes go to the other slots, and the one after it comes after a barrier every thread passed
/// only once done reading these. Every thread gets the same values (a fixed tree). Warp kernels'
/// register path: the group is a segment of `width` lanes (seg_sum, seg_max).
template <bool BLOCK, int NS, int NM>
__device__ __forceinline__ void group_reduce(float (&sums)[NS], float (&maxes)[NM], int& parity, int width = 32) {
  if (!BLOCK) {
#pragma unroll
    for (int k = 0; k < NS; k++) sums[k] = seg_sum(sums[k], width);
#pragma unroll
    for (int k = 0; k < NM; k++) maxes[k] = seg_max(maxes[k], width);
    return;
  }
#pragma unroll
  for (int k = 0; k < NS; k++) sums[k] = warp_sum(sums[k]);
#pragma unroll
  for (int k = 0; k < NM; k++) maxes[k] = warp_max(maxes[k]);
  if (!BLOCK) return;
  __shared__ float red_r[2][NS + NM][32];
  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5), nw = (int)(blockDim.x >> 5);
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < NS; k++) red_r[parity][k][warp] = sums[k];
#pragma unroll
    for (int k = 0; k < NM; k++) red_r[parity][NS + k][warp] = maxes[k];
  }
  __syncthreads();
  const int l = lane < nw ? lane : 0;
#pragma unroll
  for (int k = 0; k < NS; k++) sums[k] = warp_sum(lane < nw ? red_r[parity][k][l] : 0.0f);
#pragma unroll
  for (int k = 0; k < NM; k++) maxes[k] = warp_max(red_r[parity][NS + k][l]);
  parity ^= 1;
}

/// L-inf's selection key of element i with |z| = a: the larger a wins, then the lower index, as
/// a (value, index) argmax with ties to the lowest index; a NaN is never selected, as in the
/// staged path (key 0: no element). a >= 0, so its bits order as the values do.
__device__ __forceinline__ unsigned long long argmax_key(float a, i64 i) {
  return a == a ? ((unsigned long long)__float_as_uint(a) << 32) | (0xffffffffu - (unsigned)i) : 0ull;
}
__device__ __forceinline__ i64 argmax_index(unsigned long long key, int n) {
  return key ? (i64)(0xffffffffu - (unsigned)(key & 0xffffffffu)) : (i64)n;
}
__device__ __forceinline__ unsigned long long shfl_xor_u64(unsigned long long v, int o) {
  const unsigned lo = __shfl_xor_sync(0xffffffffu, (unsigned)(v & 0xffffffffu), o);
  const unsigned hi = __shfl_xor_sync(0xffffffffu, (unsigned)(v >> 32), o);
  return ((unsigned long long)hi << 32) | lo;
}

/// group_reduce of one sum and one argmax key (largest) at once, one barrier (block), the same
/// parity scheme and trees.
template <bool BLOCK>
__device__ __forceinline__ void group_reduce_key(float& sum, unsigned long long& key, int& parity, int width) {
  const int w0 = BLOCK ? 32 : width;
  for (int o = w0 >> 1; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const unsigned long long k2 = shfl_xor_u64(key, o);
    key = k2 > key ? k2 : key;
  }
  if (!BLOCK) return;
  __shared__ float red_s[2][32];
  __shared__ unsigned long long red_k[2][32];
  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5), nw = (int)(blockDim.x >> 5);
  if (lane == 0) {
    red_s[parity][warp] = sum;
    red_k[parity][warp] = key;
  }
  __syncthreads();
  sum = lane < nw ? red_s[parity][lane] : 0.0f;
  key = lane < nw ? red_k[parity][lane] : 0ull;
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const unsigned long long k2 = shfl_xor_u64(key, o);
    key = k2 > key ? k2 : key;
  }
  parity ^= 1;
}

/// A 16-byte load of 8 elements that only this kernel reads (ld.global.nc).
template <class T>
__device__ __forceinline__ uint4 load16(const T* __restrict__ g) {
  return *reinterpret_cast<const uint4*>(g);
}

/// A row's part held in registers by one thread of a block kernel: V 16-byte vectors, the
/// k-th being the group's vector r + k G (the vector load_row gives thread r on its k-th step),
/// elements (r + k G) VEC .. + 7. Vectors past the row's end are not loaded and not used.
template <int V>
struct RegRow {
  uint4 v[V];
};

/// This thread's vectors of a row in registers: which exist and where they start. The group is a
/// block (r its thread, G its size) or, in the warp kernels, a segment of G lanes of a warp (r
/// the lane in it); `valid` is false for a segment past the last row, which still takes part in
/// the shuffles but loads and stores nothing.
struct RegMap {
  int r, G, nvec;
  bool valid;
  __device__ __forceinline__ bool has(int k) const { return valid && r + k * G < nvec; }
  __device__ __forceinline__ i64 col(int k) const { return (i64)(r + k * G) * VEC; }
  __device__ __forceinline__ bool leader() const { return valid && r == 0; }
};

/// Call f(k) for each vector k of a row this thread holds in registers (RegRow<V>), the register
/// twin of visit_row. Unrolled: k is a constant in every call, so that q.v[k] stays in registers.
template <int V, class F>
__device__ __forceinline__ void visit_regs(const RegMap& m, F&& f) {
#pragma unroll
  for (int k = 0; k < V; k++)
    if (m.has(k)) f(k);
}

/// Call f(k, j) for each element this thread holds of a row in registers: lane j of vector k.
template <int V, class F>
__device__ __forceinline__ void visit_reg_elems(const RegMap& m, F&& f) {
  visit_regs<V>(m, [&](int k) {
#pragma unroll
    for (int j = 0; j < VEC; j++) f(k, j);
  });
}

/// Load this thread's vectors of row `g` (ld.global.nc).
template <class T, int V>
__device__ __forceinline__ void load_regs(RegRow<V>& q, const T* __restrict__ g, const RegMap& m) {
  visit_regs<V>(m, [&](int k) { q.v[k] = load16(g + m.col(k)); });
}

/// Add value v's term to a kind's first sum over the row (fwd_regs): v^2 for RMS and unit L2,
/// |v| for uncentred L1, v for the rest (whose first statistic is the mean). An accumulation, not
/// a term returned: so written, the register kernels' PTX is the same as with the sum inline.
template <int KIND>
__device__ __forceinline__ void add_first_sum(float& sum, float v, bool centred) {
  if (KIND == RMS || KIND == UNIT_L2) sum += v * v;
  else if (KIND == L1 && !centred) sum += fabsf(v);
  else sum += v;
}

/// Whether a register-path loop is compiled for a property (centring, an affine weight or bias)
/// being absent, present, or read from the parameters at run time. The H200's ncu showed the
/// register kernels issue-bound (0.70-0.78 warps issued per scheduler per cycle, DRAM at 52-68%
/// of peak): a property read at run time costs its instructions in every row even when absent
/// (a subtraction of a zero mean, predicated-off weight loads and products still issue), so the
/// common cases get their own loops and the rare ones (rescued rows) the run-time one.
enum Spec { SPEC_NO = 0, SPEC_YES = 1, SPEC_RUNTIME = 2 };

/// The output of one row held in registers (fwd_regs_row's last step): y = ((x - hi) - lo) s
/// (centred) or x s, times the weight, plus the bias, as AFF (weight or bias) says. The same
/// operations on the same values in both specialisations: an absent weight or bias is no
/// operation. Centring is always read at run time here (compiled apart, it made the sm_90
/// forward kernels spill 4-36 bytes under their register budgets).
template <class T, int OUT, bool SCALED, int V, int AFF>
__device__ __forceinline__ void fwd_regs_store(const FwdParams& p, float out_scale, const RegRow<V>& cur, const RegMap& m,
                                               i64 row, int e, float hi, float lo, float s) {
  const int n = p.n;
  const T* __restrict__ wgt = AFF == SPEC_NO ? nullptr : static_cast<const T*>(p.weight);
  const T* __restrict__ bia = AFF == SPEC_NO ? nullptr : static_cast<const T*>(p.bias);
  const bool centred = p.centred != 0;
  const Scale sc(SCALED ? e : 0);
  // A loop, not visit_regs: through the lambda, NVRTC 12.9 compiled the E4M3 kernels'
  // stores differently (24-36 fewer multiplications by out_scale in the block kernels, 400
  // instructions fewer in the warp L1 ones), a change nobody has measured on a GPU.
#pragma unroll
  for (int k = 0; k < V; k++) {
    if (!m.has(k)) continue;
    const i64 col = m.col(k);
    Vec16 wq, bq;
    if (wgt) wq.u = load16(wgt + col);
    if (bia) bq.u = load16(bia + col);
    auto out = [&](int j) {
      const float v = lanef<T>(cur.v[k], j);
      const float x = SCALED ? sc(v) : v;
      float o = (centred ? (x - hi) - lo : x) * s;
      if (wgt) o *= lanef<T>(wq.u, j);
      if (bia) o += lanef<T>(bq.u, j);
      return o;
    };
    if constexpr (OUT == OUT_E4M3) {
      unsigned w[2] = {0u, 0u};
#pragma unroll
      for (int j = 0; j < VEC; j++) w[j >> 2] |= e4m3_from_f32(__fmul_rn(out(j), out_scale)) << (8 * (j & 3));
      store8(reinterpret_cast<uint2*>(static_cast<unsigned char*>(p.y) + row * n + col), make_uint2(w[0], w[1]));
    } else {
      // Packed a pair at a time, so that at most two outputs are live.
      store16(static_cast<T*>(p.y) + row * n + col,
              make_uint4(pack2<T>(out(0), out(1)), pack2<T>(out(2), out(3)), pack2<T>(out(4), out(5)), pack2<T>(out(6), out(7))));
    }
  }
}

/// The statistics and output of one row held in registers (fwd_regs), after the first reduction
/// gave max |x| and the kind's first sum `s1` of the unscaled row. SCALED: the row needs the
/// rescue by 2^-e (e != 0): every pass works on sc(x) and `s1` is recomputed on it (sc is a
/// multiplication by powers of two, so the scaled row's max x and max -x are sc of the unscaled
/// ones). Not SCALED: sc is the identity and x is used as loaded. The operations are the staged
/// path's (fwd_staged_row) on the same values; only the reductions' tree differs.
template <class T, int KIND, bool BLOCK, int OUT, bool SCALED, int V>
__device__ __forceinline__ void fwd_regs_row(const FwdParams& p, float out_scale, const RegRow<V>& cur, const RegMap& m,
                                             i64 row, int e, float s1, float xmax, float nxmin, bool bad, int& parity) {
  const int n = p.n;
  const T* __restrict__ wgt = static_cast<const T*>(p.weight);
  const T* __restrict__ bia = static_cast<const T*>(p.bias);
  const float inv_n = recip((float)n);
  const bool centred = p.centred != 0;
  const Scale sc(SCALED ? e : 0);
  auto xs = [&](int k, int j) {
    const float v = lanef<T>(cur.v[k], j);
    return SCALED ? sc(v) : v;
  };
  float none[1] = {0.0f};
  if (SCALED) {
    float a[1] = {0.0f};
    // A loop, not visit_reg_elems: through the lambda, NVRTC 12.9 turned a select of the unit
    // L2 kernels into a branch (1-3 instructions more); so written, the PTX is unchanged.
#pragma unroll
    for (int k = 0; k < V; k++) {
      if (!m.has(k)) continue;
#pragma unroll
      for (int j = 0; j < VEC; j++) add_first_sum<KIND>(a[0], xs(k, j), centred);
    }
    group_reduce<BLOCK>(a, none, parity, m.G);
    s1 = a[0];
    xmax = sc(xmax);
    nxmin = sc(nxmin);
  }
  const bool l2 = KIND == RMS || KIND == LAYER;
  // eps of the scaled row: eps 2^-2e inside a mean square, eps 2^-e on a scale.
  const float eps_s = l2 ? sc(sc(p.eps)) : sc(p.eps);
  float hi = 0.0f, lo = 0.0f, stat;
  if (centred) hi = s1 * inv_n;
  if (KIND == RMS || KIND == UNIT_L2) {
    stat = KIND == RMS ? s1 * inv_n : norm_from_sumsq(s1);
  } else if (KIND == LAYER) {
    float s2[2] = {0.0f, 0.0f};
    visit_reg_elems<V>(m, [&](int k, int j) {
      const float t = xs(k, j) - hi;
      s2[0] += t;
      s2[1] += t * t;
    });
    group_reduce<BLOCK>(s2, none, parity, m.G);
    lo = s2[0] * inv_n;
    stat = fmaxf(s2[1] * inv_n - lo * lo, 0.0f);
  } else {
    if (centred) {
      float d[1] = {0.0f};
      visit_reg_elems<V>(m, [&](int k, int j) { d[0] += xs(k, j) - hi; });
      group_reduce<BLOCK>(d, none, parity, m.G);
      lo = d[0] * inv_n;
    }
    if (KIND == L1) {
      if (centred) {
        float a[1] = {0.0f};
        visit_reg_elems<V>(m, [&](int k, int j) { a[0] += fabsf((xs(k, j) - hi) - lo); });
        group_reduce<BLOCK>(a, none, parity, m.G);
        stat = a[0] * inv_n;
      } else {
        stat = s1 * inv_n;
      }
    } else {  // LINF: max |z| at x's extremes (z is non-decreasing in x); uncentred: max(xmax, -xmin)
      stat = centred ? fmaxf(fmaxf(0.0f, (xmax - hi) - lo), -((-nxmin - hi) - lo)) : fmaxf(fmaxf(0.0f, xmax), nxmin);
    }
  }
  bool clamped = false;
  float s = scale_of_stat<KIND>(stat, eps_s, p.eps, p.c, e, clamped);
  if (bad) {  // a non-finite input: NaN statistics and output, as the staged path
    hi = lo = s = f_nan();
    clamped = false;
  }
  // Uniform over the group: the launch's parameters (a NaN row changes hi, lo and s only). The
  // affine-free loop is compiled apart (its predicated-off weight and bias work was about half
  // the loop).
  if (!SCALED && wgt == nullptr && bia == nullptr) fwd_regs_store<T, OUT, SCALED, V, SPEC_NO>(p, out_scale, cur, m, row, e, hi, lo, s);
  else fwd_regs_store<T, OUT, SCALED, V, SPEC_RUNTIME>(p, out_scale, cur, m, row, e, hi, lo, s);
  if (p.stats && m.leader()) p.stats[row] = make_float4(hi, lo, s, stats_meta(e, clamped));
}

/// The forward with each row held in registers, V 16-byte vectors per thread (RegRow),
/// the next row's vectors loaded before this row's reductions so that its DRAM latency overlaps
/// them; no shared memory but the reductions'. For every kind but Top-k (whose time is its
/// merge). One reduction gives max |x| and the kind's first sum (sum x^2, sum x, or sum |x|),
/// plus max x and max -x for L-inf. A non-finite input makes that sum non-finite; only then are
/// the non-finite inputs counted (a finite row of bf16 can overflow the sum too), and a row with
/// any gets all-NaN output and statistics, as the staged path. Reductions per row: RMS, unit L2,
/// uncentred L1 and L-inf 1; LayerNorm and centred L-inf 2 (max |z| is
/// max(fl(fl(xmax - hi) - lo), -fl(fl(xmin - hi) - lo)), z being non-decreasing in x); centred
/// L1 3; a rescued row one more.
template <class T, int KIND, bool BLOCK, int OUT>
__device__ __forceinline__ void fwd_regs(const FwdParams& p, float out_scale) {
  typedef Group<BLOCK> Gr;
  constexpr int V = BLOCK ? FWD_REG_VECS : 1;
  const int n = p.n;
  const T* __restrict__ xg = static_cast<const T*>(p.x);
  const bool centred = p.centred != 0;
  // Block: the block is the group. Warp: segments of L lanes (the vectors' count rounded up to a
  // power of two), 32 / L rows per warp at a time.
  int L = 1;
  while (!BLOCK && L < n / VEC) L <<= 1;
  const int lane = (int)(threadIdx.x & 31);
  const int seg = BLOCK ? 0 : lane / L;
  const int per_group = BLOCK ? 1 : 32 / L;  // rows a group (block or warp) holds at a time
  RegMap m{BLOCK ? Gr::rank() : lane % L, BLOCK ? Gr::size() : L, n / VEC, true};
  const i64 stride = (i64)gridDim.x * Gr::per_block() * per_group;
  i64 first = ((i64)blockIdx.x * Gr::per_block() + Gr::index_in_block()) * per_group;
  RegRow<V> cur, nxt;
#pragma unroll
  for (int k = 0; k < V; k++) cur.v[k] = nxt.v[k] = make_uint4(0u, 0u, 0u, 0u);
  m.valid = first + seg < p.rows;
  load_regs(cur, xg + (first + seg) * n, m);
  int parity = 0;
  // The loop condition is the group's (uniform), not the segment's: every lane takes part in
  // every shuffle; a segment past the last row has valid = false.
  for (i64 b = first; b < p.rows; b += stride) {
    const i64 row = b + seg;
    m.valid = row < p.rows;
    {
      RegMap mn = m;
      mn.valid = row + stride < p.rows;
      load_regs(nxt, xg + (row + stride) * n, mn);
    }
    constexpr int NM = KIND == LINF ? 3 : 1;  // max |x|; L-inf also max x and max -x
    float sums[1] = {0.0f};
    float maxes[NM];
    maxes[0] = 0.0f;
    if (NM == 3) maxes[1] = maxes[NM - 1] = -f_inf();
    visit_reg_elems<V>(m, [&](int k, int j) {
      const float v = lanef<T>(cur.v[k], j);
      maxes[0] = fmaxf(maxes[0], fabsf(v));
      add_first_sum<KIND>(sums[0], v, centred);
      if (NM == 3) {
        maxes[1] = fmaxf(maxes[1], v);
        maxes[NM - 1] = fmaxf(maxes[NM - 1], -v);
      }
    });
    group_reduce<BLOCK>(sums, maxes, parity, m.G);
    // Branches around collectives must be uniform over the warp: a warp's segments agree first.
    bool check = !isfinite(sums[0]);
    if (!BLOCK) check = __any_sync(0xffffffffu, check);
    int bad = 0;
    if (check) {
      visit_reg_elems<V>(m, [&](int k, int j) { bad += isfinite(lanef<T>(cur.v[k], j)) ? 0 : 1; });
      bad = BLOCK ? group_sum_int<BLOCK>(bad) : seg_sum_int(bad, m.G);
    }
    const int e = bad ? 0 : rescue_exponent<RESCUE_LO, RESCUE_HI>(maxes[0]);
    bool scaled = e != 0;
    if (!BLOCK) scaled = __any_sync(0xffffffffu, scaled);
    const float xmax = NM == 3 ? maxes[1] : 0.0f, nxmin = NM == 3 ? maxes[NM - 1] : 0.0f;
    if (!scaled) fwd_regs_row<T, KIND, BLOCK, OUT, false, V>(p, out_scale, cur, m, row, 0, sums[0], xmax, nxmin, bad != 0, parity);
    else fwd_regs_row<T, KIND, BLOCK, OUT, true, V>(p, out_scale, cur, m, row, e, sums[0], xmax, nxmin, bad != 0, parity);
    cur = nxt;
  }
}

template <class T, int KIND, bool BLOCK, int OUT = OUT_SAME>
__device__ __forceinline__ void fwd(const FwdParams& p, float out_scale = 1.0f) {
  if (fwd_regs_ok<KIND, OUT, BLOCK>(p)) {
    fwd_regs<T, KIND, BLOCK, OUT>(p, out_scale);
    return;
  }
  NL_DYNAMIC_SMEM(smem);
  typedef Group<BLOCK> Gr;
  const int n = p.n;
  const int G = Gr::size(), r = Gr::rank();
  T* s_x = reinterpret_cast<T*>(smem) + (i64)Gr::index_in_block() * row_slots(n);
  const i64 stride = (i64)gridDim.x * Gr::per_block();
  for (i64 row = (i64)blockIdx.x * Gr::per_block() + Gr::index_in_block(); row < p.rows; row += stride) {
    const T* xr = static_cast<const T*>(p.x) + row * n;
    const RowMap m = row_map(xr, n, p.vec_ok);
    float amax = 0.0f;
    int bad = 0;
    load_row<T>(xr, s_x, m, G, r, [&](i64, float v) {
      amax = fmaxf(amax, fabsf(v));
      bad += isfinite(v) ? 0 : 1;
    });
    fwd_staged_row<T, KIND, BLOCK, OUT>(p, out_scale, s_x, m, row, amax, bad);
    Gr::sync();  // the next row may map shared slots to other threads
  }
}

// ------------------------------------------------------------------ backward
/// True if the backward can hold rows in registers (bwd_regs): every kind but Top-k, rows of whole 16-byte vectors (n a multiple of 8; x, dy, dx and
/// weight 16-byte aligned) and a thread per vector (block kernels) or at most 32 vectors (warp
/// kernels, n <= 256). Uniform over the grid.
template <int KIND, bool BLOCK>
__device__ __forceinline__ bool bwd_regs_ok(const BwdParams& p) {
  if (KIND == TOPK) return false;
  const unsigned long long a =
      (unsigned long long)p.x | (unsigned long long)p.dy | (unsigned long long)p.dx | (unsigned long long)p.weight;
  const int nvec = p.n / VEC;
  return p.vec_ok && (a & 15) == 0 && (p.n & (VEC - 1)) == 0 && (BLOCK ? nvec <= BWD_REG_VECS * (int)blockDim.x : nvec <= 32);
}

/// The backward of one row held in registers (bwd_regs): x in `cx`, dy in `cdy`, statistics `st`.
/// SCALED: the forward rescued the row by 2^-e (e != 0), so x is scaled as the staged path does;
/// otherwise sc is the identity and is skipped. The same operations as the staged path on the
/// same values (its dz and the dweight/dbias accumulation in shared memory, in row order), with
/// the reductions' own tree.
/// CEN and WGT (Spec): centring and the weight compiled as absent, present or read at run time;
/// the same operations on the same values in each.
template <class T, int KIND, bool BLOCK, bool SCALED, int CEN, int WGT>
__device__ __forceinline__ void bwd_regs_row(const BwdParams& p, const RegRow<BWD_REG_VECS>& cx, const RegRow<BWD_REG_VECS>& cdy, const RegMap& m,
                                             i64 row, const float4& st, float* acc_dw, float* acc_db, int seg, int per_group,
                                             int& parity) {
  const int n = p.n;
  const T* __restrict__ wgt = WGT == SPEC_NO ? nullptr : static_cast<const T*>(p.weight);
  const float inv_n = recip((float)n);
  const bool centred = CEN == SPEC_RUNTIME ? p.centred != 0 : CEN == SPEC_YES;
  const bool want_dw = acc_dw != nullptr, want_db = acc_db != nullptr;
  const float hi = st.x, lo = st.y, s = st.z;
  const int meta = __float_as_int(st.w);
  const Scale sc(SCALED ? (meta >> 1) : 0);
  const bool clamped = (meta & 1) != 0;
  auto zof = [&](int k, int j) {
    const float v = lanef<T>(cx.v[k], j);
    const float x = SCALED ? sc(v) : v;
    return centred ? (x - hi) - lo : x;
  };
  RegRow<BWD_REG_VECS> wq;
#pragma unroll
  for (int k = 0; k < BWD_REG_VECS; k++) wq.v[k] = make_uint4(0u, 0u, 0u, 0u);
  if (wgt) load_regs(wq, wgt, m);
  auto gof = [&](int k, int j) {
    const float dy = lanef<T>(cdy.v[k], j);
    return wgt ? dy * lanef<T>(wq.v[k], j) : dy;
  };
  float none[1] = {0.0f};
  if (want_dw || want_db) {
    // A warp's segments share its accumulators: they add in turn, rows in order.
    for (int sg = 0; sg < per_group; sg++) {
      if (sg == seg) {
        visit_regs<BWD_REG_VECS>(m, [&](int k) {
          const i64 col = m.col(k);
#pragma unroll
          for (int j = 0; j < VEC; j++) {
            const float xh = zof(k, j) * s;
            if (want_dw) acc_dw[col + j] += lanef<T>(cdy.v[k], j) * xh;
            if (want_db) acc_db[col + j] += lanef<T>(cdy.v[k], j);
          }
        });
      }
      if (!BLOCK && per_group > 1) __syncwarp();
    }
  }
  float dot[1] = {0.0f};
  unsigned long long key = 0ull;  // L-inf: the largest |z|, lowest index first
  visit_reg_elems<BWD_REG_VECS>(m, [&](int k, int j) {
    dot[0] += gof(k, j) * (zof(k, j) * s);
    if (KIND == LINF) {
      const unsigned long long kj = argmax_key(fabsf(zof(k, j)), m.col(k) + j);
      key = kj > key ? kj : key;
    }
  });
  if (KIND == LINF) group_reduce_key<BLOCK>(dot[0], key, parity, m.G);
  else group_reduce<BLOCK>(dot, none, parity, m.G);
  const float d = dot[0];
  const i64 argmax = KIND == LINF ? argmax_index(key, n) : (i64)n;
  auto dz = [&](int k, int j) {
    const float z = zof(k, j);
    const float xh = z * s;
    const float g = gof(k, j);
    const float sg = z > 0.0f ? 1.0f : (z < 0.0f ? -1.0f : 0.0f);
    if (KIND == RMS || KIND == LAYER) return s * (g - xh * (d * inv_n));
    if (KIND == UNIT_L2) return clamped ? s * g : s * (g - xh * d);
    if (KIND == LINF) return m.col(k) + j == argmax ? s * g - s * (sg * (d * p.c)) : s * g;
    return s * (g - sg * (d * p.c * inv_n));  // L1
  };
  float mean = 0.0f;
  if (centred) {
    float a[1] = {0.0f};
    visit_reg_elems<BWD_REG_VECS>(m, [&](int k, int j) { a[0] += dz(k, j); });
    group_reduce<BLOCK>(a, none, parity, m.G);
    mean = a[0] * inv_n;
  }
  visit_regs<BWD_REG_VECS>(m, [&](int k) {
    auto dx = [&](int j) {
      const float v = dz(k, j) - mean;
      return SCALED ? sc(v) : v;
    };
    store16(static_cast<T*>(p.dx) + row * n + m.col(k),
            make_uint4(pack2<T>(dx(0), dx(1)), pack2<T>(dx(2), dx(3)), pack2<T>(dx(4), dx(5)), pack2<T>(dx(6), dx(7))));
  });
}

/// The backward with each row's x and dy held in registers (RegRow each), the next row's loaded
/// before this row's reductions; dweight and dbias accumulate in the group's shared-memory rows
/// as in the staged path (a thread only touches its own columns; a warp's segments take turns).
/// Warp kernels: segments of L lanes, 32 / L rows per warp at a time, as fwd_regs. Reductions
/// per row: 1 (dot), centred kinds 2 (and mean dz).
template <class T, int KIND, bool BLOCK>
__device__ __forceinline__ void bwd_regs(const BwdParams& p, float* acc_dw, float* acc_db) {
  typedef Group<BLOCK> Gr;
  const int n = p.n;
  const T* __restrict__ xg = static_cast<const T*>(p.x);
  const T* __restrict__ dyg = static_cast<const T*>(p.dy);
  int L = 1;
  while (!BLOCK && L < n / VEC) L <<= 1;
  const int lane = (int)(threadIdx.x & 31);
  const int seg = BLOCK ? 0 : lane / L;
  const int per_group = BLOCK ? 1 : 32 / L;
  RegMap m{BLOCK ? Gr::rank() : lane % L, BLOCK ? Gr::size() : L, n / VEC, true};
  const i64 stride = (i64)gridDim.x * Gr::per_block() * per_group;
  const i64 first = ((i64)blockIdx.x * Gr::per_block() + Gr::index_in_block()) * per_group;
  // Specialised loops (bwd_regs_row's CEN, WGT): uniform over the grid.
  const bool cen = p.centred != 0, wgt = p.weight != nullptr;
  RegRow<BWD_REG_VECS> cx, cdy, nx, ndy;
#pragma unroll
  for (int k = 0; k < BWD_REG_VECS; k++) cx.v[k] = cdy.v[k] = nx.v[k] = ndy.v[k] = make_uint4(0u, 0u, 0u, 0u);
  m.valid = first + seg < p.rows;
  load_regs(cx, xg + (first + seg) * n, m);
  load_regs(cdy, dyg + (first + seg) * n, m);
  int parity = 0;
  for (i64 b = first; b < p.rows; b += stride) {  // uniform over the group, as fwd_regs
    const i64 row = b + seg;
    m.valid = row < p.rows;
    {
      RegMap mn = m;
      mn.valid = row + stride < p.rows;
      load_regs(nx, xg + (row + stride) * n, mn);
      load_regs(ndy, dyg + (row + stride) * n, mn);
    }
    const float4 st = m.valid ? p.stats[row] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    bool scaled = (__float_as_int(st.w) >> 1) != 0;
    if (!BLOCK) scaled = __any_sync(0xffffffffu, scaled);
    // Unit L2's block backward keeps the run-time loop: specialised, it measured 2.4-5.1% slower
    // on the H200 (the only kernels that lost; its warp kernels gained 4-5%), so it compiles as
    // before, to the same machine code.
    if (KIND == UNIT_L2 && BLOCK && !scaled) bwd_regs_row<T, KIND, BLOCK, false, SPEC_RUNTIME, SPEC_RUNTIME>(p, cx, cdy, m, row, st, acc_dw, acc_db, seg, per_group, parity);
    else if (scaled) bwd_regs_row<T, KIND, BLOCK, true, SPEC_RUNTIME, SPEC_RUNTIME>(p, cx, cdy, m, row, st, acc_dw, acc_db, seg, per_group, parity);
    else if (cen && wgt) bwd_regs_row<T, KIND, BLOCK, false, SPEC_YES, SPEC_YES>(p, cx, cdy, m, row, st, acc_dw, acc_db, seg, per_group, parity);
    else if (cen) bwd_regs_row<T, KIND, BLOCK, false, SPEC_YES, SPEC_NO>(p, cx, cdy, m, row, st, acc_dw, acc_db, seg, per_group, parity);
    else if (wgt) bwd_regs_row<T, KIND, BLOCK, false, SPEC_NO, SPEC_YES>(p, cx, cdy, m, row, st, acc_dw, acc_db, seg, per_group, parity);
    else bwd_regs_row<T, KIND, BLOCK, false, SPEC_NO, SPEC_NO>(p, cx, cdy, m, row, st, acc_dw, acc_db, seg, per_group, parity);
    cx = nx;
    cdy = ndy;
  }
}

template <class T, int KIND, bool BLOCK>
__device__ __forceinline__ void bwd(const BwdParams& p) {
  NL_DYNAMIC_SMEM(smem);
  typedef Group<BLOCK> Gr;
  const int n = p.n;
  const int G = Gr::size(), r = Gr::rank(), gi = Gr::index_in_block();
  const bool want_dw = p.dw_part != nullptr, want_db = p.db_part != nullptr;
  // Layout per group: x slots, dy slots, then (if wanted) fp32 dw and db accumulators.
  const i64 slots = row_slots(n);
  // Rounded to 16 bytes so every group's staged rows stay aligned for 16-byte vectors.
  const i64 group_bytes =
      (slots * 2 * (i64)sizeof(T) + (want_dw ? 4 * (i64)n : 0) + (want_db ? 4 * (i64)n : 0) + 15) / 16 * 16;
  unsigned char* mine = smem + gi * group_bytes;
  T* s_x = reinterpret_cast<T*>(mine);
  T* s_dy = s_x + slots;
  float* acc_dw = reinterpret_cast<float*>(s_dy + slots);
  float* acc_db = acc_dw + (want_dw ? n : 0);
  for (i64 i = r; i < n; i += G) {
    if (want_dw) acc_dw[i] = 0.0f;
    if (want_db) acc_db[i] = 0.0f;
  }
  Gr::sync();
  const T* __restrict__ wgt = static_cast<const T*>(p.weight);
  const float inv_n = recip((float)n);
  const bool centred = p.centred != 0;
  const i64 stride = (i64)gridDim.x * Gr::per_block();
  bool in_registers = false;
  if (bwd_regs_ok<KIND, BLOCK>(p)) {
    bwd_regs<T, KIND, BLOCK>(p, want_dw ? acc_dw : nullptr, want_db ? acc_db : nullptr);
    in_registers = true;
  }
  if (!in_registers)
  for (i64 row = (i64)blockIdx.x * Gr::per_block() + gi; row < p.rows; row += stride) {
    const T* xr = static_cast<const T*>(p.x) + row * n;
    const T* dyr = static_cast<const T*>(p.dy) + row * n;
    T* dxr = static_cast<T*>(p.dx) + row * n;
    const RowMap m = row_map(xr, n, p.vec_ok);
    if (BLOCK && row + stride < p.rows) {
      prefetch_row<T>(xr + stride * n, n, G, r);
      prefetch_row<T>(dyr + stride * n, n, G, r);
    }
    load_row<T>(xr, s_x, m, G, r, [](i64, float) {});
    load_row<T>(dyr, s_dy, m, G, r, [](i64, float) {});
    const float4 st = p.stats[row];
    const float hi = st.x, lo = st.y, s = st.z;
    const int meta = __float_as_int(st.w);
    const int e = meta >> 1;
    const Scale sc(e);
    const bool clamped = (meta & 1) != 0;
    auto zof = [&](float v) {
      const float x = sc(v);
      return centred ? (x - hi) - lo : x;
    };
    // Selections of L-inf and Top-k on |z|, ties to the lowest index.
    i64 argmax = -1;
    float kth = 0.0f;
    i64 cut = (i64)n;
    if (KIND == LINF) {
      float best = -1.0f;
      i64 bi = (i64)n;
      visit_row<T>(s_x, m, G, r, [&](i64 i, float v) {
        const float a = fabsf(zof(v));
        if (a > best || (a == best && i < bi)) { best = a; bi = i; }
      });
      group_argmax<BLOCK>(best, bi);
      argmax = bi;
    } else if (KIND == TOPK) {
      float a[TOPK_MAX];
#pragma unroll
      for (int i = 0; i < TOPK_MAX; i++) a[i] = -1.0f;
      visit_row<T>(s_x, m, G, r, [&](i64, float v) { topk_insert(a, fabsf(zof(v))); });
      const int k = (p.k >= 1 && p.k <= TOPK_MAX) ? p.k : 1;
      const TopkResult t = group_topk<BLOCK>(a, k);
      kth = t.kth;
      const int needed = k - t.n_gt;
      int eq = 0;
      visit_row<T>(s_x, m, G, r, [&](i64, float v) { eq += fabsf(zof(v)) == kth ? 1 : 0; });
      eq = group_sum_int<BLOCK>(eq);
      if (eq > needed) {
        Gr::sync();  // the scan reads elements staged by other threads
        cut = tie_cut<T, BLOCK>(s_x, m, kth, needed, [&](float v) { return fabsf(zof(v)); });
      }
    }
    // Weight/bias gradient accumulation and the dot product g . x^.
    float dot = 0.0f;
    visit_row2<T>(s_x, s_dy, m, G, r, [&](i64 i, float v, float dy) {
      const float xh = zof(v) * s;
      if (want_dw) acc_dw[i] += dy * xh;
      if (want_db) acc_db[i] += dy;
      const float g = wgt ? dy * Cvt<T>::to(wgt[i]) : dy;
      dot += g * xh;
    });
    dot = group_sum<BLOCK>(dot);
    const float c_over_k = p.c * recip((float)((p.k >= 1 && p.k <= TOPK_MAX) ? p.k : 1));
    auto dz = [&](i64 i, float v, float dy) {
      const float z = zof(v);
      const float xh = z * s;
      const float g = wgt ? dy * Cvt<T>::to(wgt[i]) : dy;
      const float sg = z > 0.0f ? 1.0f : (z < 0.0f ? -1.0f : 0.0f);
      if (KIND == RMS || KIND == LAYER) return s * (g - xh * (dot * inv_n));
      if (KIND == UNIT_L2) return clamped ? s * g : s * (g - xh * dot);
      if (KIND == L1) return s * (g - sg * (dot * p.c * inv_n));
      if (KIND == LINF) return i == argmax ? s * g - s * (sg * (dot * p.c)) : s * g;
      // TOPK
      const float a = fabsf(z);
      const bool sel = a > kth || (a == kth && i <= cut);
      return sel ? s * (g - sg * (dot * c_over_k)) : s * g;
    };
    float mean = 0.0f;
    if (centred) {
      float a = 0.0f;
      visit_row2<T>(s_x, s_dy, m, G, r, [&](i64 i, float v, float dy) { a += dz(i, v, dy); });
      mean = group_sum<BLOCK>(a) * inv_n;
    }
    store_row<T>(dxr, s_x, s_dy, m, G, r, [&](i64 i, float v, float dy) { return sc(dz(i, v, dy) - mean); });
    Gr::sync();
  }
  // One fp32 partial row per block: groups added in group order.
  if (want_dw || want_db) {
    __syncthreads();
    const int ng = Gr::per_block();
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
      float sw = 0.0f, sb = 0.0f;
      for (int g = 0; g < ng; g++) {
        const float* a = reinterpret_cast<const float*>(smem + g * group_bytes + slots * 2 * (i64)sizeof(T));
        if (want_dw) sw += a[i];
        if (want_db) sb += a[(want_dw ? n : 0) + i];
      }
      if (want_dw) p.dw_part[(i64)blockIdx.x * n + i] = sw;
      if (want_db) p.db_part[(i64)blockIdx.x * n + i] = sb;
    }
  }
}

/// Sum the per-block partials in block order and round once to the storage type.
template <class T>
__device__ __forceinline__ void finalize(const FinalizeParams& p) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int b = 0; b < p.nparts; b++) s += p.part[(i64)b * p.n + i];
    static_cast<T*>(p.out)[i] = Cvt<T>::from(s);
  }
}

// ------------------------------------------------------------------ forward variants
/// Per-row numerical counters of the pure-half forward, with normlab-norms' `Counters` meaning:
/// non-finite inputs of the row, 1 if the statistics overflowed although every input was finite,
/// non-finite outputs (after the rounding to storage). One 16-byte store per row: no atomics.
struct RowCounts {
  unsigned nonfinite_in;
  unsigned acc_overflow;
  unsigned nonfinite_out;
  unsigned reserved;
};

/// Parameters of the forward variants: the forward's own, plus the pure variant's counters and
/// the fp8 variant's output scale.
struct FwdVarParams {
  FwdParams f;
  RowCounts* counts;  // pure: optional (null), one per row
  float out_scale;    // e4m3: y_fp8 = round_e4m3(y * out_scale)
  int reserved;
};

/// The CPU's 16-lane sum (normlab-norms `lanes::sum_map`) of f(x_i) over a staged row in the
/// half arithmetic: CPU lane l adds the elements i = l (mod 16) in index order, then the lanes
/// combine as pure_butterfly16. Every lane of the calling warp takes part (lanes l and l + 16
/// both compute CPU lane l); every lane returns the sum. The whole row must be staged.
template <class T, class F>
__device__ __forceinline__ float pure_lane_sum(const T* s, const RowMap& m, F&& f) {
  float acc = 0.0f;
  for (i64 i = (i64)(threadIdx.x & 15); i < m.n; i += 16) acc = Pure<T>::add(acc, f(Cvt<T>::to(s[i + VEC - m.head])));
  return pure_butterfly16<T>(acc);
}

/// Forward with every statistic and every output computed in the storage half type, as a
/// half-precision implementation without fp32 accumulation does (normlab-norms with
/// `Accum::PureF16` for fp16 storage, `Accum::PureBf16` for bf16): sums of squares past the
/// type's range become inf ("Norm matters" 4.3), and nothing is rescued.
///
/// Same operations in the same order as the CPU path, so the results agree bit for bit: the row
/// sums are the CPU's 16-lane sums (`pure_lane_sum`, computed redundantly by every warp of the
/// group on the staged row, so no broadcast is needed); maxima are order-free; Top-k adds its k
/// winners in descending order in the same lanes. The host passes eps and C already rounded to
/// T as the CPU rounds them (`plan::plan_variant`). Speed is not the point of this variant: 16
/// lanes add n / 16 elements each in sequence.
///
/// Per row: statistics (as the 16-bit forward saves them, exp2 = 0) and `RowCounts`. A row with
/// a non-finite input gets NaN statistics; a row whose statistics overflowed keeps them (its
/// output is what the half arithmetic gives, usually NaN or 0), as the CPU path.
template <class T, int KIND, bool BLOCK>
__device__ __forceinline__ void fwd_pure(const FwdVarParams& vp) {
  const FwdParams& p = vp.f;
  NL_DYNAMIC_SMEM(smem);
  typedef Group<BLOCK> Gr;
  typedef Pure<T> P;
  const int n = p.n;
  const int G = Gr::size(), r = Gr::rank();
  T* s_x = reinterpret_cast<T*>(smem) + (i64)Gr::index_in_block() * row_slots(n);
  const T* __restrict__ wgt = static_cast<const T*>(p.weight);
  const T* __restrict__ bia = static_cast<const T*>(p.bias);
  const bool centred = p.centred != 0;
  const float one = 1.0f;
  const float eps = P::r(p.eps), c = P::r(p.c);
  const float inv_n = P::div(one, P::r((float)n));  // A::one() / A::from_usize(n)
  const i64 stride = (i64)gridDim.x * Gr::per_block();
  for (i64 row = (i64)blockIdx.x * Gr::per_block() + Gr::index_in_block(); row < p.rows; row += stride) {
    const T* xr = static_cast<const T*>(p.x) + row * n;
    const RowMap m = row_map(xr, n, p.vec_ok);
    int bad = 0;
    load_row<T>(xr, s_x, m, G, r, [&](i64, float v) { bad += isfinite(v) ? 0 : 1; });
    Gr::sync();  // every warp reads the whole staged row below
    bad = group_sum_int<BLOCK>(bad);
    const float hi = centred ? P::mul(pure_lane_sum<T>(s_x, m, [](float v) { return v; }), inv_n) : 0.0f;
    float lo = 0.0f, s, check;
    bool clamped = false;
    if (KIND == RMS || KIND == UNIT_L2) {
      const float q = pure_lane_sum<T>(s_x, m, [](float v) { return P::mul(v, v); });
      check = q;
      if (KIND == RMS) {
        s = P::div(one, P::sqrt(P::add(P::mul(q, inv_n), eps)));
      } else {
        const float norm = P::sqrt(q);
        clamped = !(norm >= eps);
        s = P::div(one, clamped ? eps : norm);
      }
    } else if (KIND == LAYER) {
      const float d = pure_lane_sum<T>(s_x, m, [&](float v) { return P::sub(v, hi); });
      const float q = pure_lane_sum<T>(s_x, m, [&](float v) { const float t = P::sub(v, hi); return P::mul(t, t); });
      lo = P::mul(d, inv_n);
      float var = P::sub(P::mul(q, inv_n), P::mul(lo, lo));
      if (var < 0.0f) var = 0.0f;
      s = P::div(one, P::sqrt(P::add(var, eps)));
      check = P::add(hi, q);
    } else {
      if (centred) lo = P::mul(pure_lane_sum<T>(s_x, m, [&](float v) { return P::sub(v, hi); }), inv_n);
      auto absz = [&](float v) { return fabsf(P::sub(P::sub(v, hi), lo)); };
      const float total = pure_lane_sum<T>(s_x, m, absz);  // sum |z|: L1's statistic, a NaN detector for the others
      float stat;
      if (KIND == L1) {
        stat = P::mul(total, inv_n);
        check = total;
      } else {
        if (KIND == LINF) {
          float a = 0.0f;  // lanes::max_map: starts at 0, a NaN never wins
          visit_row<T>(s_x, m, G, r, [&](i64, float v) { a = fmaxf(a, absz(v)); });
          stat = group_max<BLOCK>(a);
        } else {
          float a[TOPK_MAX];
#pragma unroll
          for (int i = 0; i < TOPK_MAX; i++) a[i] = -1.0f;
          visit_row<T>(s_x, m, G, r, [&](i64, float v) { topk_insert(a, absz(v)); });
          const int k = p.k;
          if (k >= 1 && k <= TOPK_MAX) stat = P::div(group_topk<BLOCK, true, T>(a, k).psum, P::r((float)k));
          else stat = __int_as_float(0x7fc00000);
        }
        // The CPU checks the statistic itself for a half accumulator, the sum only for a NaN.
        check = isnan(total) ? total : stat;
      }
      s = P::div(one, P::add(P::mul(c, stat), eps));
      check = P::add(check, hi);
    }
    const bool overflowed = !isfinite(check) || !isfinite(s);
    float hi_s = hi, lo_s = lo;
    if (bad) {  // as the CPU path: NaN statistics, no clamp flag
      hi_s = lo_s = s = __int_as_float(0x7fc00000);
      clamped = false;
    }
    int nout = 0;
    store_row<T>(static_cast<T*>(p.y) + row * n, s_x, static_cast<const T*>(nullptr), m, G, r, [&](i64 i, float v, float) {
      float o = P::mul(centred ? P::sub(P::sub(v, hi_s), lo_s) : v, s);
      if (wgt) o = P::mul(o, Cvt<T>::to(wgt[i]));
      if (bia) o = P::add(o, Cvt<T>::to(bia[i]));
      nout += isfinite(o) ? 0 : 1;  // o is already a value of T: the store does not round it
      return o;
    });
    nout = group_sum_int<BLOCK>(nout);
    if (r == 0) {
      if (p.stats) p.stats[row] = make_float4(hi_s, lo_s, s, stats_meta(0, clamped));
      if (vp.counts) {
        RowCounts c4;
        c4.nonfinite_in = (unsigned)bad;
        c4.acc_overflow = (!bad && overflowed) ? 1u : 0u;
        c4.nonfinite_out = (unsigned)nout;
        c4.reserved = 0u;
        vp.counts[row] = c4;
      }
    }
    Gr::sync();  // the next row may map shared slots to other threads
  }
}

}  // namespace nl

// ------------------------------------------------------------------ the kernel list
// Every kernel is an extern "C" entry point named nl_<kind>_<fwd|bwd>_<f16|bf16>_<warp|block>, plus
// nl_finalize_<f16|bf16>. normlab_kernels::list builds the same names; the compile gate checks
// that NVRTC's PTX has exactly those entries.
#define NL_WARP_THREADS 128
#define NL_BLOCK_THREADS_MAX 512

// Minimum resident blocks per SM, the second argument of __launch_bounds__. It fixes ptxas's
// register budget at 65536 / (threads * min) (rounded down to a multiple of 8) and, as found in
// the SASS, it is what keeps the kernels free of spills: with `.maxntid` alone ptxas 12.9 picks
// its own occupancy target (32 registers for a 512-thread block, i.e. 4 blocks per SM) and
// spills the few values that do not fit it (4-16 bytes: a shared-memory address, a loop bound),
// even though the cap would allow 128. The values keep the occupancy ptxas chose where the code
// fits it (forward warp 48 registers: 10 blocks of 128) and give the rest the registers they
// need: the block forward 64 (2 blocks of 512; its register path, two rows' vectors per thread,
// spilled 24-104 bytes at 40, the 3 blocks' budget), the backward warp 72 and block 64, Top-k's
// 32-entry register lists up to 128. The compile gate requires zero local memory.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
// sm_80: ptxas 12.9 spilled at the sm_90 budgets (LayerNorm's warp forward 4 B at 64 registers,
// Top-k's block forward 84 B at 64), so these two get more registers there; sm_90 keeps the
// budgets measured on the H200.
#define NL_MINB_FWD_WARP(KIND) ((KIND) == nl::TOPK ? 5 : 7)
#define NL_MINB_FWD_BLOCK(KIND) ((KIND) == nl::TOPK ? 1 : 2)
#else
#define NL_MINB_FWD_WARP(KIND) ((KIND) == nl::TOPK ? 5 : 8)
#define NL_MINB_FWD_BLOCK(KIND) 2
#endif
#define NL_MINB_BWD_WARP(KIND) ((KIND) == nl::TOPK ? 4 : 7)
#define NL_MINB_BWD_BLOCK(KIND) ((KIND) == nl::TOPK ? 1 : 2)

#define NL_FOR_EACH_KIND(X, ...)        \
  X(rms, RMS, __VA_ARGS__)              \
  X(layer, LAYER, __VA_ARGS__)          \
  X(unit_l2, UNIT_L2, __VA_ARGS__)      \
  X(l1, L1, __VA_ARGS__)                \
  X(linf, LINF, __VA_ARGS__)            \
  X(topk, TOPK, __VA_ARGS__)

#define NL_ROW_KERNELS_FOR_KIND(name, KIND, tn, T)                                                               \
  extern "C" __global__ void __launch_bounds__(NL_WARP_THREADS, NL_MINB_FWD_WARP(nl::KIND)) nl_##name##_fwd_##tn##_warp(nl::FwdParams p) {   \
    nl::fwd<T, nl::KIND, false>(p);                                                                              \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(NL_BLOCK_THREADS_MAX, NL_MINB_FWD_BLOCK(nl::KIND)) nl_##name##_fwd_##tn##_block(nl::FwdParams p) { \
    nl::fwd<T, nl::KIND, true>(p);                                                                               \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(NL_WARP_THREADS, NL_MINB_BWD_WARP(nl::KIND)) nl_##name##_bwd_##tn##_warp(nl::BwdParams p) {   \
    nl::bwd<T, nl::KIND, false>(p);                                                                              \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(NL_BLOCK_THREADS_MAX, NL_MINB_BWD_BLOCK(nl::KIND)) nl_##name##_bwd_##tn##_block(nl::BwdParams p) { \
    nl::bwd<T, nl::KIND, true>(p);                                                                               \
  }

#define NL_ROW_KERNELS_FOR_DTYPE(tn, T, ...) NL_FOR_EACH_KIND(NL_ROW_KERNELS_FOR_KIND, tn, T)
NL_FOR_EACH_DTYPE(NL_ROW_KERNELS_FOR_DTYPE, _)

#define NL_FINALIZE_KERNEL(tn, T, ...) \
  extern "C" __global__ void nl_finalize_##tn(nl::FinalizeParams p) { nl::finalize<T>(p); }
NL_FOR_EACH_DTYPE(NL_FINALIZE_KERNEL, _)

// Forward variants, nl_<kind>_fwd_<f16|bf16>_<pure|e4m3>_<warp|block>: pure-half accumulation
// (fwd_pure) and fp8 E4M3 output with a scale (fwd with OUT_E4M3). One parameter struct,
// nl::FwdVarParams. normlab_kernels::list::variant_kernels builds the same names.
#define NL_MINB_PURE_WARP(KIND) NL_MINB_FWD_WARP(KIND)
#define NL_MINB_PURE_BLOCK(KIND) NL_MINB_FWD_BLOCK(KIND)
#define NL_VARIANT_KERNELS_FOR_KIND(name, KIND, tn, T)                                                          \
  extern "C" __global__ void __launch_bounds__(NL_WARP_THREADS, NL_MINB_PURE_WARP(nl::KIND))                   \
      nl_##name##_fwd_##tn##_pure_warp(nl::FwdVarParams p) {                                                  \
    nl::fwd_pure<T, nl::KIND, false>(p);                                                                      \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(NL_BLOCK_THREADS_MAX, NL_MINB_PURE_BLOCK(nl::KIND))             \
      nl_##name##_fwd_##tn##_pure_block(nl::FwdVarParams p) {                                                 \
    nl::fwd_pure<T, nl::KIND, true>(p);                                                                       \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(NL_WARP_THREADS, NL_MINB_FWD_WARP(nl::KIND))                    \
      nl_##name##_fwd_##tn##_e4m3_warp(nl::FwdVarParams p) {                                                  \
    nl::fwd<T, nl::KIND, false, nl::OUT_E4M3>(p.f, p.out_scale);                                              \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(NL_BLOCK_THREADS_MAX, NL_MINB_FWD_BLOCK(nl::KIND))              \
      nl_##name##_fwd_##tn##_e4m3_block(nl::FwdVarParams p) {                                                 \
    nl::fwd<T, nl::KIND, true, nl::OUT_E4M3>(p.f, p.out_scale);                                               \
  }
#define NL_VARIANT_KERNELS_FOR_DTYPE(tn, T, ...) NL_FOR_EACH_KIND(NL_VARIANT_KERNELS_FOR_KIND, tn, T)
NL_FOR_EACH_DTYPE(NL_VARIANT_KERNELS_FOR_DTYPE, _)
