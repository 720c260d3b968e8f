#line 2 "batchnorm.cu"  // line 1 is this directive (NVRTC compiles nl_common.cuh + this file)
// batchnorm.cu: batch (per-channel) forms of the norms (BatchNorm with the variance, RMS, unit L2,
// L1, L-inf, Top-k, and mean-only BN), train and eval, forward and backward, for fp16 and bf16
// storage; statistics in fp64/fp32, one rounding on store.
//
// Compiled by NVRTC for the GPU (compute_80/compute_90) and, unmodified, as C++20 against
// simt_cpu.h for the CPU emulator (src/cpu/batch_launch.cpp). The reference is normlab-norms'
// `batch` module with f64 storage and Accum::F64 (norms/src/batch/): a channel's statistics run
// over its m = N*H*W elements (N for the [N, C] layout) exactly as a row of m elements would,
// then the channel's scalar affine is applied:
//
//   train  y = ((x - mu_c) / D_c) * w_c + b_c        (mu_c, D_c over the channel; spec table)
//   eval   the same with mu_c, D_c from the running statistics (normlab_norms::batch::running)
//   bwd    dz_j = s (g_j - dot * dD/dz_j), s = 1/D, g = dy * w_c, dot = sum g x^ = w_c sum dy x^
//          dx = dz - mean(dz) (centred kinds), dw_c = sum dy x^, db_c = sum dy
//
// A channel can hold millions of elements (256 x 56 x 56 = 802816; 256 x 112 x 112 = 3.2M), far
// beyond shared memory, and no kernel may synchronise the grid (nor could the emulator run it),
// so every form is a short sequence of kernels with deterministic two-level reductions:
//
//   forward train   stats1 -> finalize1 [-> stats2 -> finalize2 (L1 centred, Top-k)]
//                   [-> cut (L-inf, Top-k)] -> apply
//   forward eval    frozen -> apply
//   backward        reduce -> bwd_finalize -> dx     (eval without dw/db: dx only)
//
// Chunks. A channel's positions p = n*HW + k (its (n, h, w) order, the order of the CPU gather)
// are cut into `nchunks` chunks of `chunk` consecutive positions (the host fixes the chunk length
// from the layout alone, so results do not depend on the device). A block processes one
// (channel or channel tile, chunk) work item at a time (persistent grid, grid-stride over items)
// and writes one record per channel and chunk; a finalize kernel (one warp per channel) merges the
// records of a channel in a fixed order. No atomics anywhere: bitwise reproducible for any grid.
//
// Statistics. Every element is widened exactly to f64 and summed there: sum x and sum x^2
// (x^2 of a 16-bit value is exact in f64; no overflow or underflow is possible for fp16 or bf16
// inputs: |x|^2 <= 1.2e77, m < 2^31). When the values of a channel cluster around a large mean
// (the case where sum x^2 / m - mean^2 cancels) they share a narrow exponent range and both sums
// are exact, and the variance is formed with exact products (fma) in double-double:
// M2 * m = (Q m - S^2) exactly up to one f64 rounding. The per-channel finalize (mean, variance,
// D, the scale s = 1/D, the running-statistics update, the eval denominator) is done in f64 as
// the CPU path does it, and rounded once into the fp32 statistics the elementwise kernels use.
// The L1 statistic (centred) needs the mean first: a second pass (stats2) sums |z| in f64 from
// fp32 z. L-inf needs no second pass: z = (x*2^-e - hi) - lo is monotone in x (every step is a
// correctly rounded monotone operation), so max|z| = max(|z(max x)|, |z(min x)|), exactly the
// value an elementwise scan would find. Top-k keeps, per chunk, the k largest |z| (stats2: a
// register top-k per thread, then k merge rounds); finalize2 merges the chunk lists.
//
// Saved statistics (per channel, float4 {mean_hi, mean_lo, rscale, meta = exp2*2 + clamped}, the
// meaning of normlab-norms' RowStats, as the row kernels): z = (x * 2^-exp2 - mean_hi) - mean_lo,
// x^ = z * rscale. exp2 is the row kernels' rescue exponent (max|x| outside [2^-30, 2^40]) and
// only keeps the fp32 elementwise arithmetic in range (bf16 reaches 3e38); the f64 statistics
// need no rescue. A channel with a non-finite input has NaN statistics (its train output is all
// NaN; the NaN goes into the running statistics, as in the CPU path). Eval is elementwise.
//
// Selections (L-inf, Top-k: the k largest |z|, ties to the lowest channel position, as the CPU
// path). The forward finds the threshold t (the k-th largest |z|) and, from the chunk lists, the
// chunk and the rank of the last selected element equal to t; `cut` (one warp per channel) scans
// that chunk in position order and saves its position. Selection: |z| > t, or |z| == t and
// position <= cut. Every |z| compared across kernels is computed with __fmul_rn/__fsub_rn (never
// contracted into an FMA), so the forward's t is the backward's |z| bit for bit.
//
// Thread mappings (256 threads per block everywhere):
//   NCHW (stats1, stats2, reduce): a block streams one chunk of one channel: 16-byte vectors
//       (8 positions, one sample's H*W slab is contiguous) when H*W % 8 == 0 and x is 16-byte
//       aligned, scalar loads otherwise (runs of H*W contiguous elements); block reduction =
//       warp butterflies, then the 8 warp partials in warp order.
//   NC (stats1, stats2 L1, reduce): a block owns a tile of 64 channels x `chunk` rows; thread
//       (col, row lane) reads CPT consecutive channels of rows lane, lane + ROWS, ... (CPT = 8:
//       one 16-byte vector; 4: 8 bytes), so a warp reads whole 128-byte row segments; the
//       partials of a channel meet in shared memory and are added in row-lane order.
//   NC Top-k (stats2): one channel per thread (32 channels x 8 row lanes), scalar coalesced loads.
//   apply, dx: elementwise over the flat tensor with 16-byte vectors when the pointers allow
//       (the channel of each element tracked incrementally), persistent grid.
//   finalize, frozen, cut: one warp per channel.
//
// Not done here (documented in kernels/README.md): the fused single-pass variant for channels
// that fit in shared memory, the pure-half accumulator, fp8.

#ifndef NL_COMMON_CUH
#include "nl_common.cuh"  // helpers shared by the kernel files (Cvt, lanef, pack8, store16, ...)
#endif

namespace nlb {

using namespace nl;

/// The channel norm (normlab_norms::NormKind order, then mean-only BN).
enum Kind { RMS = 0, LAYER = 1, UNIT_L2 = 2, L1 = 3, LINF = 4, TOPK = 5, MEAN = 6 };
/// Running-statistics convention (normlab_norms::batch::Convention).
enum Conv { PYTORCH = 0, NORM_MATTERS = 1 };
/// What stats1 accumulates (compile time): sum x, sum x^2, sum |x|, max and min x.
enum Fields { F_SUM = 1, F_SQ = 2, F_ABS = 4, F_MM = 8 };
/// Backward reductions: sum dy x^ and sum dy; plus sum sign(z) (L1) or over the selection (SEL);
/// MEAN: sum dy only.
enum RedClass { R_PLAIN = 0, R_L1 = 1, R_SEL = 2, R_MEAN = 3 };
/// Elementwise backward formulas.
enum DxClass { D_L2 = 0, D_L1 = 1, D_SEL = 2, D_MEAN = 3, D_EVAL = 4 };

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
/// Largest k of the register top-k.
constexpr int TOPK_MAX = 32;
/// Elements of 16-bit storage in one 16-byte vector.
constexpr int VEC = VEC_LANES;
/// NC tiles of the reductions: 64 channels (CPT channels per thread, COLS = 64 / CPT columns).
constexpr int NC_TILE = 64;
/// NC Top-k tiles: 32 channels, one per lane; the warps are the row lanes.
constexpr int NCK_TILE = 32;
constexpr int RESCUE_LO = -30;
constexpr int RESCUE_HI = 40;

// ------------------------------------------------------------------ parameters
/// Layout and chunking of one launch (`normlab_kernels::batch::Geo`, 48 bytes).
struct Geo {
  i64 n;        // batch N
  i64 c;        // channels C
  i64 hw;       // H * W (1 for the [N, C] layout)
  i64 m;        // positions per channel, N * H * W (< 2^31)
  i64 chunk;    // positions per chunk (a multiple of 8)
  int nchunks;  // chunks per channel, ceil(m / chunk)
  int vec;      // 16-byte vectors allowed for this launch's pointers (set by the host)
  double rhw;   // 1 / hw, 1 / c, 1 / nchunks (host-rounded): divisions without 64-bit division calls
  double rc;
  double rnch;
};

/// stats1 record of one (channel, chunk): 32 bytes.
struct Rec1 {
  double a;    // sum x (F_SUM)
  double b;    // sum x^2 (F_SQ) or sum |x| (F_ABS)
  float amax;  // max |x|
  float xmax;  // max x (F_MM)
  float xmin;  // min x (F_MM)
  float pad;
};

/// Backward record of one (channel, chunk): 32 bytes.
struct RecB {
  double a;    // sum dy x^
  double b;    // sum dy
  i64 sg;      // sum sign(z) (R_L1) or over the selection (R_SEL)
  i64 pad;
};

/// Per-channel selection of L-inf and Top-k: threshold t (the k-th largest |z|), the chunk and
/// rank (1-based, among the elements equal to t in position order) of the last selected element
/// equal to t, `needed` = how many elements equal to t are selected, and its position `cut`.
struct Aux {
  float t;
  int chunk;
  int rank;
  int needed;
  i64 cut;
};

struct Stats1Params {
  const void* x;
  Rec1* rec;  // [C][nchunks]
  Geo g;
};

struct Stats2Params {
  const void* x;
  const float4* stats;  // from finalize1 (mean_hi, mean_lo, exp2)
  void* out;            // L1: double [C][nchunks]; Top-k: float [C][nchunks][k]
  Geo g;
  int k;
  int pad;
};

struct Fin1Params {
  const Rec1* rec;
  float4* stats;
  Aux* aux;            // L-inf: threshold and chunk of the first maximum
  double* run_mean;    // optional (with run_spread): running statistics, updated in place
  double* run_spread;
  Geo g;
  double eps;
  double c;            // scale constant C (1 for the L2 kinds)
  double a;            // weight of the batch value in the running update
  int kind;
  int centred;
  int conv;
  int final_pass;      // 1: this finalize completes the statistics (no stats2)
};

struct Fin2Params {
  const void* part;    // stats2 output
  float4* stats;
  Aux* aux;            // Top-k
  double* run_spread;  // optional
  Geo g;
  double eps;
  double c;
  double a;
  int kind;            // L1 or TOPK
  int conv;
  int k;
  int pad;
};

struct FrozenParams {
  const double* run_mean;
  const double* run_spread;
  float4* stats;
  i64 c;
  double eps;
  int kind;
  int centred;
  int conv;
  int pad;
};

struct CutParams {
  const void* x;
  const float4* stats;
  Aux* aux;
  Geo g;
};

struct ApplyParams {
  const void* x;
  void* y;
  const float4* stats;
  const void* weight;  // optional
  const void* bias;    // optional
  Geo g;
};

struct RedParams {
  const void* x;
  const void* dy;
  const float4* stats;
  const Aux* aux;  // R_SEL
  RecB* rec;       // [C][nchunks]
  Geo g;
};

struct BFinParams {
  const RecB* rec;
  const float4* stats;
  const void* weight;  // optional
  void* dweight;       // optional, [C] in the storage type
  void* dbias;         // optional
  float2* coef;        // [C]: (k1, mean of dz) for the dx kernel
  Geo g;
  double c;
  int kind;
  int centred;
  int k;
  int eval;
};

struct DxParams {
  const void* x;
  const void* dy;
  const float4* stats;
  const Aux* aux;
  const void* weight;  // optional
  const float2* coef;
  void* dx;
  Geo g;
};

// ------------------------------------------------------------------ 16-byte vectors
/// 16-byte read-only global loads (ld.global.nc.v4 / .v2): the inputs are never written by the
/// kernel that reads them.
template <class T>
__device__ __forceinline__ uint4 ld16(const T* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
template <class T>
__device__ __forceinline__ uint2 ld8(const T* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }

/// Round an f64 value once into T: round to odd into fp32 (24 bits >= 11 + 2, so the following
/// round to nearest into fp16/bf16 is the correctly rounded result of the f64 value).
template <class T>
__device__ __forceinline__ T from_f64(double d) {
  float r = (float)d;
  if (isfinite(r) && (double)r != d) {
    unsigned b = __float_as_uint(r);
    if ((b & 1u) == 0u) b = fabs((double)r) > fabs(d) ? b - 1u : b + 1u;
    r = __uint_as_float(b);
  }
  return Cvt<T>::from(r);
}

// ------------------------------------------------------------------ exact fp32 steps
// The |z| of a selection must be the same bits in every kernel: these are never contracted.
#ifdef SIMT_CPU
__device__ __forceinline__ float mul_rn(float a, float b) { return a * b; }
__device__ __forceinline__ float sub_rn(float a, float b) { return a - b; }
#else
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
#endif

__device__ __forceinline__ double d_nan() { return (double)f_nan(); }

/// A channel's saved statistics, unpacked for elementwise use.
struct Chan {
  float hi, lo, s;
  float f1, f2;  // 2^-e as two in-range factors (e in [-149, 127])
  int e;
  bool clamped;
  /// z = (x 2^-e - mean_hi) - mean_lo, with correctly rounded steps in a fixed order.
  __device__ __forceinline__ float z(float v) const { return sub_rn(sub_rn(mul_rn(mul_rn(v, f1), f2), hi), lo); }
  /// dx scaling back by 2^-e (the backward works on the scaled channel).
  __device__ __forceinline__ float unscale(float v) const { return (v * f1) * f2; }
};

__device__ __forceinline__ Chan chan_of(float4 st) {
  Chan c;
  c.hi = st.x;
  c.lo = st.y;
  c.s = st.z;
  const int meta = __float_as_int(st.w);
  c.e = meta >> 1;
  c.clamped = (meta & 1) != 0;
  c.f1 = pow2(-(c.e / 2));
  c.f2 = pow2(-(c.e - c.e / 2));
  return c;
}

__device__ __forceinline__ float sgn(float z) { return z > 0.0f ? 1.0f : (z < 0.0f ? -1.0f : 0.0f); }
__device__ __forceinline__ int sgn_i(float z) { return z > 0.0f ? 1 : (z < 0.0f ? -1 : 0); }

/// Is the element at channel position `pos` with |z| = a selected (L-inf, Top-k)?
__device__ __forceinline__ bool selected(float a, i64 pos, float t, i64 cut) { return a > t || (a == t && pos <= cut); }

/// q = a / d, r = a % d for 0 <= a < 2^52, 1 <= d, with rd = 1/d rounded: the f64 estimate is
/// off by at most one, then corrected exactly in integers. (A 64-bit integer division is a
/// subroutine call in PTX whose calling convention spills registers; the gate forbids spills.)
__device__ __forceinline__ i64 divmod(i64 a, i64 d, double rd, i64& r) {
  i64 q = (i64)((double)a * rd);
  r = a - q * d;
  if (r < 0) {
    q--;
    r += d;
  } else if (r >= d) {
    q++;
    r -= d;
  }
  return q;
}
__device__ __forceinline__ i64 div_(i64 a, i64 d, double rd) {
  i64 r;
  return divmod(a, d, rd, r);
}

/// Offset of channel position `pos` of channel `ch` in the tensor.
__device__ __forceinline__ i64 offset_of(const Geo& g, i64 ch, i64 pos) {
  const unsigned up = (unsigned)pos, uhw = (unsigned)g.hw;
  const unsigned n = up / uhw, k = up - n * uhw;
  return ((i64)n * g.c + ch) * g.hw + (i64)k;
}

// ------------------------------------------------------------------ reductions (fixed trees)
struct OpSum {
  template <class V>
  __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
struct OpMax {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct OpMin {
  __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); }
};

/// Warp butterfly: every lane gets the same value (each step is commutative).
template <class V, class Op>
__device__ __forceinline__ V warp_all(V v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Block reduction of a chunk's fields at once (two doubles summed, an integer summed, three
/// floats: max, max, min), in two fixed levels through shared memory: 16 threads each fold 16
/// consecutive threads' partials in thread order, then every thread folds the 16 group results
/// in order. Two barriers for all fields (per-field butterflies cost 5 shuffle rounds each).
struct Fold {
  double a, b;
  i64 n;
  float f0, f1, f2;
};

__device__ __forceinline__ Fold block_fold(Fold v) {
  constexpr int G = 16, PER = THREADS / G;
  __shared__ double sa[THREADS], sb[THREADS];
  __shared__ i64 sn[THREADS];
  __shared__ float s0[THREADS], s1[THREADS], s2[THREADS];
  __shared__ double ga[G], gb[G];
  __shared__ i64 gn[G];
  __shared__ float g0[G], g1[G], g2[G];
  const int t = (int)threadIdx.x;
  sa[t] = v.a;
  sb[t] = v.b;
  sn[t] = v.n;
  s0[t] = v.f0;
  s1[t] = v.f1;
  s2[t] = v.f2;
  __syncthreads();
  if (t < G) {
    Fold r{sa[t * PER], sb[t * PER], sn[t * PER], s0[t * PER], s1[t * PER], s2[t * PER]};
    for (int i = 1; i < PER; i++) {
      const int j = t * PER + i;
      r.a += sa[j];
      r.b += sb[j];
      r.n += sn[j];
      r.f0 = fmaxf(r.f0, s0[j]);
      r.f1 = fmaxf(r.f1, s1[j]);
      r.f2 = fminf(r.f2, s2[j]);
    }
    ga[t] = r.a;
    gb[t] = r.b;
    gn[t] = r.n;
    g0[t] = r.f0;
    g1[t] = r.f1;
    g2[t] = r.f2;
  }
  __syncthreads();
  Fold r{ga[0], gb[0], gn[0], g0[0], g1[0], g2[0]};
#pragma unroll
  for (int i = 1; i < G; i++) {
    r.a += ga[i];
    r.b += gb[i];
    r.n += gn[i];
    r.f0 = fmaxf(r.f0, g0[i]);
    r.f1 = fmaxf(r.f1, g1[i]);
    r.f2 = fminf(r.f2, g2[i]);
  }
  // The next fold writes sa.. only after its callers passed this point, and g.. only after
  // its first barrier, which every reader of this fold's g.. reaches later: no third barrier.
  return r;
}

/// Shared scratch of the NC reductions, one per element type and shape (not per operation).
template <class V, int R, int C>
__device__ __forceinline__ V (*nc_buffer())[C] {
  __shared__ V buf[R][C];
  return buf;
}

/// Column reduction on an NC tile of CPT * COLS channels: v[j] is this thread's partial for tile
/// channel col * CPT + j (col = tid % COLS, row lane tid / COLS). Returns, in thread t < CPT * COLS,
/// the tile total of channel t. Two fixed levels through shared memory: every thread adds the
/// partials of a group of consecutive row lanes in order, then thread t adds the groups in order
/// (no shuffles: CPT values per thread would need CPT butterflies).
template <int CPT, int COLS, class V, class Op>
__device__ __forceinline__ V nc_reduce(V (&v)[CPT], Op op) {
  constexpr int TC = CPT * COLS, ROWS = THREADS / COLS, GROUPS = THREADS / TC, PER = ROWS / GROUPS;
  static_assert(ROWS % GROUPS == 0, "row lanes split evenly into groups");
  V(*red)[TC] = nc_buffer<V, ROWS, TC>();
  V(*red2)[TC] = nc_buffer<V, GROUPS, TC>();
  const int col = (int)threadIdx.x % COLS, rl = (int)threadIdx.x / COLS;
#pragma unroll
  for (int j = 0; j < CPT; j++) red[rl][col * CPT + j] = v[j];
  __syncthreads();
  const int t = (int)threadIdx.x % TC, grp = (int)threadIdx.x / TC;
  V s = red[grp * PER][t];
#pragma unroll
  for (int r = 1; r < PER; r++) s = op(s, red[grp * PER + r][t]);
  red2[grp][t] = s;
  __syncthreads();
  s = red2[0][t];
#pragma unroll
  for (int g2 = 1; g2 < GROUPS; g2++) s = op(s, red2[g2][t]);
  __syncthreads();
  return s;
}

// ------------------------------------------------------------------ element access
/// Call f(pos, value) for this thread's positions of [t0, t1) of channel ch (NCHW mapping).
/// UNROLL: vectors in flight per thread (1 for the Top-k insertion, whose body is large).
template <class T, int UNROLL = 2, class F>
__device__ __forceinline__ void visit_nchw(const T* __restrict__ x, const Geo& g, i64 ch, i64 t0, i64 t1, F&& f) {
  const int r = (int)threadIdx.x;
  if (g.vec) {
    // t0, t1 and every slab start are multiples of 8: a vector never leaves its slab.
#pragma unroll UNROLL
    for (i64 t = t0 + (i64)r * VEC; t < t1; t += (i64)THREADS * VEC) {
      const uint4 q = ld16(x + offset_of(g, ch, t));
#pragma unroll
      for (int j = 0; j < VEC; j++) f(t + j, lanef<T>(q, j));
    }
  } else {
#pragma unroll (2 * UNROLL)
    for (i64 t = t0 + r; t < t1; t += THREADS) f(t, Cvt<T>::to(x[offset_of(g, ch, t)]));
  }
}

/// CPT consecutive channels cb.. of one row (NC): a 16- or 8-byte vector when allowed, scalar
/// loads otherwise (channels >= C read as 0).
template <class T, int CPT>
__device__ __forceinline__ void load_cols(const T* __restrict__ row, i64 cb, i64 c, bool vec, float (&v)[CPT]) {
  if (CPT == 8 && vec) {
    const uint4 q = ld16(row + cb);
#pragma unroll
    for (int j = 0; j < CPT; j++) v[j] = lanef<T>(q, j);
  } else if (CPT == 4 && vec) {
    const uint2 q = ld8(row + cb);
#pragma unroll
    for (int j = 0; j < CPT; j++) v[j] = Cvt<T>::bits_to((unsigned short)(((j < 2) ? q.x : q.y) >> ((j & 1) * 16)));
  } else {
#pragma unroll
    for (int j = 0; j < CPT; j++) v[j] = cb + j < c ? Cvt<T>::to(row[cb + j]) : 0.0f;
  }
}

/// Call f(row, v) with v[j] = x[row, cb + j] for this thread's rows of [r0, r1) (NC mapping:
/// col = tid % COLS owns channels cb = c0 + col * CPT .. + CPT, row lanes tid / COLS).
template <class T, int CPT, int COLS, class F>
__device__ __forceinline__ void visit_nc(const T* __restrict__ x, const Geo& g, i64 c0, i64 r0, i64 r1, F&& f) {
  constexpr int ROWS = THREADS / COLS;
  const int col = (int)threadIdx.x % COLS, rl = (int)threadIdx.x / COLS;
  const i64 cb = c0 + (i64)col * CPT;
  if (cb >= g.c) return;
#pragma unroll 2
  for (i64 row = r0 + rl; row < r1; row += ROWS) {
    float v[CPT];
    load_cols<T, CPT>(x + row * g.c, cb, g.c, g.vec != 0, v);
    f(row, v);
  }
}

// ------------------------------------------------------------------ top-k
struct TopkResult {
  double sum;  // the k largest, added in descending order
  float kth;   // the k-th largest
  int n_gt;    // how many of the k are strictly larger than kth
};

/// k rounds over the warp: the largest list head wins (ties to the lowest lane) and is popped.
/// If `out` is given, lane 0 writes the winners there in order.
__device__ __forceinline__ TopkResult warp_topk_merge(float (&a)[TOPK_MAX], int k, float* out) {
  const int lane = (int)(threadIdx.x & 31);
  TopkResult r{0.0, 0.0f, 0};
  int run = 0;
  for (int t = 0; t < k; t++) {
    float v = a[0];
    int l = lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      // (value, lane) travel as one 64-bit shuffle.
      const unsigned long long pk =
          __shfl_xor_sync(0xffffffffu, ((unsigned long long)__float_as_uint(v) << 32) | (unsigned)l, o);
      const float ov = __uint_as_float((unsigned)(pk >> 32));
      const int ol = (int)(unsigned)pk;
      if (ov > v || (ov == v && ol < l)) { v = ov; l = ol; }
    }
    r.sum += (double)v;
    run = (t > 0 && v == r.kth) ? run + 1 : 1;
    r.kth = v;
    if (out && lane == 0) out[t] = v;
    // Pop the winner's head, branch free (a divergent shift made ptxas outline it and spill).
    const bool pop = lane == l;
#pragma unroll
    for (int i = 0; i < TOPK_MAX - 1; i++) a[i] = pop ? a[i + 1] : a[i];
    a[TOPK_MAX - 1] = pop ? -1.0f : a[TOPK_MAX - 1];
  }
  r.n_gt = k - run;
  return r;
}

// ------------------------------------------------------------------ stats1: streaming sums
template <int F>
struct Acc1 {
  double a, b;
  float amax, xmax, xmin;
  __device__ __forceinline__ void init() {
    a = 0.0;
    b = 0.0;
    amax = 0.0f;
    xmax = -f_inf();
    xmin = f_inf();
  }
  __device__ __forceinline__ void add(float v) {
    const double d = (double)v;
    if (F & F_SUM) a += d;
    if (F & F_SQ) b = fma(d, d, b);
    if (F & F_ABS) b += fabs(d);
    amax = fmaxf(amax, fabsf(v));
    if (F & F_MM) {
      xmax = fmaxf(xmax, v);
      xmin = fminf(xmin, v);
    }
  }
};

template <class T, int F>
__device__ __forceinline__ void stats1_nchw(const Stats1Params& p) {
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const i64 items = g.c * (i64)g.nchunks;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 ch = div_(it, g.nchunks, g.rnch), j = it - ch * g.nchunks;
    const i64 t0 = j * g.chunk, t1 = min(t0 + g.chunk, g.m);
    Acc1<F> acc;
    acc.init();
    visit_nchw<T>(x, g, ch, t0, t1, [&](i64, float v) { acc.add(v); });
    const Fold f = block_fold(Fold{acc.a, acc.b, 0, acc.amax, acc.xmax, acc.xmin});
    Rec1 r;
    r.a = (F & F_SUM) ? f.a : 0.0;
    r.b = (F & (F_SQ | F_ABS)) ? f.b : 0.0;
    r.amax = f.f0;
    r.xmax = (F & F_MM) ? f.f1 : 0.0f;
    r.xmin = (F & F_MM) ? f.f2 : 0.0f;
    r.pad = 0.0f;
    if (threadIdx.x == 0) p.rec[it] = r;
  }
}

template <class T, int F>
__device__ __forceinline__ void stats1_nc(const Stats1Params& p) {
  constexpr int CPT = 8, COLS = NC_TILE / CPT;
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const i64 tiles = (g.c + NC_TILE - 1) / NC_TILE;
  const i64 items = tiles * (i64)g.nchunks;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 tile = div_(it, g.nchunks, g.rnch), j = it - tile * g.nchunks;
    const i64 c0 = tile * NC_TILE, r0 = j * g.chunk, r1 = min(r0 + g.chunk, g.n);
    Acc1<F> acc[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) acc[q].init();
    visit_nc<T, CPT, COLS>(x, g, c0, r0, r1, [&](i64, const float (&v)[CPT]) {
#pragma unroll
      for (int q = 0; q < CPT; q++) acc[q].add(v[q]);
    });
    double a[CPT], b[CPT];
    float am[CPT], mx[CPT], mn[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) {
      a[q] = acc[q].a;
      b[q] = acc[q].b;
      am[q] = acc[q].amax;
      mx[q] = acc[q].xmax;
      mn[q] = acc[q].xmin;
    }
    Rec1 r;
    r.a = (F & F_SUM) ? nc_reduce<CPT, COLS>(a, OpSum()) : 0.0;
    r.b = (F & (F_SQ | F_ABS)) ? nc_reduce<CPT, COLS>(b, OpSum()) : 0.0;
    r.amax = nc_reduce<CPT, COLS>(am, OpMax());
    r.xmax = (F & F_MM) ? nc_reduce<CPT, COLS>(mx, OpMax()) : 0.0f;
    r.xmin = (F & F_MM) ? nc_reduce<CPT, COLS>(mn, OpMin()) : 0.0f;
    r.pad = 0.0f;
    const i64 ch = c0 + threadIdx.x;
    if (threadIdx.x < NC_TILE && ch < g.c) p.rec[ch * g.nchunks + j] = r;
  }
}

// ------------------------------------------------------------------ stats2: L1 and Top-k of |z|
template <class T>
__device__ __forceinline__ void stats2_l1_nchw(const Stats2Params& p) {
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  double* out = static_cast<double*>(p.out);
  const i64 items = g.c * (i64)g.nchunks;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 ch = div_(it, g.nchunks, g.rnch), j = it - ch * g.nchunks;
    const i64 t0 = j * g.chunk, t1 = min(t0 + g.chunk, g.m);
    const Chan c = chan_of(p.stats[ch]);
    double acc = 0.0;
    visit_nchw<T>(x, g, ch, t0, t1, [&](i64, float v) { acc += (double)fabsf(c.z(v)); });
    const Fold f = block_fold(Fold{acc, 0.0, 0, 0.0f, 0.0f, 0.0f});
    if (threadIdx.x == 0) out[it] = f.a;
  }
}

template <class T>
__device__ __forceinline__ void stats2_l1_nc(const Stats2Params& p) {
  constexpr int CPT = 8, COLS = NC_TILE / CPT;
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  double* out = static_cast<double*>(p.out);
  const i64 tiles = (g.c + NC_TILE - 1) / NC_TILE;
  const i64 items = tiles * (i64)g.nchunks;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 tile = div_(it, g.nchunks, g.rnch), j = it - tile * g.nchunks;
    const i64 c0 = tile * NC_TILE, r0 = j * g.chunk, r1 = min(r0 + g.chunk, g.n);
    const i64 cb = c0 + (i64)((int)threadIdx.x % COLS) * CPT;
    Chan c[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) c[q] = chan_of(p.stats[min(cb + q, g.c - 1)]);
    double acc[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) acc[q] = 0.0;
    visit_nc<T, CPT, COLS>(x, g, c0, r0, r1, [&](i64, const float (&v)[CPT]) {
#pragma unroll
      for (int q = 0; q < CPT; q++) acc[q] += (double)fabsf(c[q].z(v[q]));
    });
    const double s = nc_reduce<CPT, COLS>(acc, OpSum());
    const i64 ch = c0 + threadIdx.x;
    if (threadIdx.x < NC_TILE && ch < g.c) out[ch * g.nchunks + j] = s;
  }
}

/// NCHW Top-k: every thread's register list, then every warp merges its lanes' lists, then
/// warp 0 merges the warps' winners and writes the chunk's k largest |z| (descending; -1 pads a
/// chunk with fewer than k elements).
template <class T>
__device__ __forceinline__ void stats2_topk_nchw(const Stats2Params& p) {
  __shared__ float s_top[WARPS * TOPK_MAX];
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  float* out = static_cast<float*>(p.out);
  const int k = p.k >= 1 && p.k <= TOPK_MAX ? p.k : 1;
  const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
  const i64 items = g.c * (i64)g.nchunks;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 ch = div_(it, g.nchunks, g.rnch), j = it - ch * g.nchunks;
    const i64 t0 = j * g.chunk, t1 = min(t0 + g.chunk, g.m);
    const Chan c = chan_of(p.stats[ch]);
    float a[TOPK_MAX];
#pragma unroll
    for (int i = 0; i < TOPK_MAX; i++) a[i] = -1.0f;
    visit_nchw<T, 1>(x, g, ch, t0, t1, [&](i64, float v) { topk_insert(a, fabsf(c.z(v))); });
    warp_topk_merge(a, k, s_top + warp * TOPK_MAX);
    __syncthreads();
    // Every warp merges the warps' winners (no warp-dependent branch around the collectives:
    // that made ptxas spill); warp 0 writes them.
#pragma unroll
    for (int i = 0; i < TOPK_MAX; i++) a[i] = (lane < WARPS && i < k) ? s_top[lane * TOPK_MAX + i] : -1.0f;
    warp_topk_merge(a, k, warp == 0 ? out + it * k : nullptr);
    __syncthreads();
  }
}

/// NC Top-k: one channel per lane (32-channel tiles), the 8 warps are row lanes; each thread's
/// list goes to shared memory and lane ch of warp 0 merges the 8 lists of channel ch.
template <class T>
__device__ __forceinline__ void stats2_topk_nc(const Stats2Params& p) {
  __shared__ float s_list[WARPS][NCK_TILE][TOPK_MAX];
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  float* out = static_cast<float*>(p.out);
  const int k = p.k >= 1 && p.k <= TOPK_MAX ? p.k : 1;
  const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
  const i64 tiles = (g.c + NCK_TILE - 1) / NCK_TILE;
  const i64 items = tiles * (i64)g.nchunks;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 tile = div_(it, g.nchunks, g.rnch), j = it - tile * g.nchunks;
    const i64 c0 = tile * NCK_TILE, r0 = j * g.chunk, r1 = min(r0 + g.chunk, g.n);
    const i64 ch = c0 + lane;
    float a[TOPK_MAX];
#pragma unroll
    for (int i = 0; i < TOPK_MAX; i++) a[i] = -1.0f;
    if (ch < g.c) {
      const Chan c = chan_of(p.stats[ch]);
#pragma unroll 1
      for (i64 row = r0 + warp; row < r1; row += WARPS) topk_insert(a, fabsf(c.z(Cvt<T>::to(x[row * g.c + ch]))));
    }
#pragma unroll
    for (int i = 0; i < TOPK_MAX; i++) s_list[warp][lane][i] = a[i];
    __syncthreads();
    if (warp == 0 && ch < g.c) {
#pragma unroll
      for (int i = 0; i < TOPK_MAX; i++) a[i] = s_list[0][lane][i];
#pragma unroll 1
      for (int w = 1; w < WARPS; w++)
#pragma unroll 1
        for (int i = 0; i < k; i++) topk_insert(a, s_list[w][lane][i]);
      float* o = out + (ch * g.nchunks + j) * k;
#pragma unroll
      for (int i = 0; i < TOPK_MAX; i++)
        if (i < k) o[i] = a[i];
    }
    __syncthreads();
  }
}

// ------------------------------------------------------------------ per-channel finalize (f64)
/// Variance from exact-product double-double arithmetic: (Q m - S^2) / m^2, clamped at 0.
__device__ __forceinline__ double variance(double s, double q, double m) {
  const double p = s * s, pe = fma(s, s, -p);
  const double qm = q * m, qe = fma(q, m, -qm);
  const double v = ((qm - p) + (qe - pe)) / (m * m);
  return v < 0.0 ? 0.0 : v;
}

/// The running update of one value (normlab_norms::batch::RunningStats::update).
__device__ __forceinline__ void running_update(double* r, double a, double v) { *r = (1.0 - a) * *r + a * v; }

/// A value >= 0 or NaN (as the CPU path's comparison form: NaN stays NaN).
__device__ __forceinline__ double nonneg(double v) { return v < 0.0 ? 0.0 : v; }

/// Write statistics from the f64 denominator D (unscaled) and the rescue exponent e.
__device__ __forceinline__ float scale_of(double d, int e) { return (float)(ldexp(1.0, e) / d); }

/// Split the channel mean (scaled by 2^-e) into fp32 hi + lo.
__device__ __forceinline__ void split_mean(double mean, int e, float& hi, float& lo) {
  const double ms = ldexp(mean, -e);
  hi = (float)ms;
  lo = (float)(ms - (double)hi);
}

/// One warp per channel: merge the chunk records (lanes take chunks lane, lane + 32, ...; then
/// butterflies), compute the statistics in f64, update the running statistics.
__device__ __forceinline__ void finalize1(const Fin1Params& p) {
  const Geo g = p.g;
  const int lane = (int)(threadIdx.x & 31);
  const i64 wstride = (i64)gridDim.x * WARPS;
  const double m = (double)g.m;
  const bool upd = p.run_mean != nullptr && p.run_spread != nullptr;
  for (i64 ch = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5); ch < g.c; ch += wstride) {
    double sa = 0.0, sb = 0.0;
    float amax = 0.0f, xmax = -f_inf(), xmin = f_inf();
    for (int j = lane; j < g.nchunks; j += 32) {
      const Rec1 r = p.rec[ch * g.nchunks + j];
      sa += r.a;
      sb += r.b;
      amax = fmaxf(amax, r.amax);
      xmax = fmaxf(xmax, r.xmax);
      xmin = fminf(xmin, r.xmin);
    }
    // Only the fields the kind accumulated (the branches are warp-uniform).
    const bool use_a = p.kind != RMS && p.kind != UNIT_L2;
    const bool use_b = p.kind == RMS || p.kind == UNIT_L2 || p.kind == LAYER || p.kind == L1;
    if (use_a) sa = warp_all(sa, OpSum());
    if (use_b) sb = warp_all(sb, OpSum());
    amax = warp_all(amax, OpMax());
    if (p.kind == LINF) {
      xmax = warp_all(xmax, OpMax());
      xmin = warp_all(xmin, OpMin());
    }
    const bool bad = !(isfinite(sa) && isfinite(sb));
    const bool centred = p.centred != 0 || p.kind == MEAN;
    const int e = bad ? 0 : rescue_exponent<RESCUE_LO, RESCUE_HI>(amax);
    const double mean = bad ? d_nan() : centred ? sa / m : 0.0;
    float hi = 0.0f, lo = 0.0f;
    if (centred) split_mean(mean, e, hi, lo);
    // D (unscaled) and the PyTorch-convention batch spread, where this pass completes them.
    double d = d_nan(), spread = d_nan();
    bool clamped = false;
    float t = f_nan();
    int cstar = 0;
    if (!bad) {
      if (p.kind == RMS) {
        spread = sb / m;
        d = sqrt(spread + p.eps);
      } else if (p.kind == LAYER) {
        const double var = variance(sa, sb, m);
        d = sqrt(var + p.eps);
        spread = var * m / (m - 1.0);
      } else if (p.kind == UNIT_L2) {
        const double nrm = sqrt(sb);
        clamped = !(nrm >= p.eps);
        d = clamped ? p.eps : nrm;
        spread = d;
      } else if (p.kind == L1) {  // uncentred (the centred L1 has a second pass)
        spread = p.c * (sb / m);
        d = spread + p.eps;
      } else if (p.kind == LINF) {
        Chan c;
        c.hi = hi;
        c.lo = lo;
        c.f1 = pow2(-(e / 2));
        c.f2 = pow2(-(e - e / 2));
        t = fmaxf(fabsf(c.z(xmax)), fabsf(c.z(xmin)));
        spread = p.c * ldexp((double)t, e);
        d = spread + p.eps;
        // The first chunk holding the maximum (max |z| of a chunk from its max and min x).
        int first = 0x7fffffff;
        for (int j = lane; j < g.nchunks; j += 32) {
          const Rec1 r = p.rec[ch * g.nchunks + j];
          if (fmaxf(fabsf(c.z(r.xmax)), fabsf(c.z(r.xmin))) == t) {
            first = j;
            break;
          }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
        cstar = first;
      }
    } else if (p.kind == LINF) {
      t = f_nan();
    }
    float s;
    // Mean-only: y = ((x 2^-e - hi) - lo) 2^e, the centred x (2^e is an fp32 subnormal for
    // e < -126, exact; pow2 covers only normal exponents).
    if (p.kind == MEAN) s = bad ? f_nan() : (float)ldexp(1.0, e);
    else if (bad) s = f_nan();
    else s = p.final_pass ? scale_of(d, e) : f_nan();
    if (bad) hi = lo = f_nan();
    if (lane == 0) {
      p.stats[ch] = make_float4(hi, lo, s, stats_meta(e, clamped));
      if (p.kind == LINF && p.aux) {
        Aux ax;
        ax.t = t;
        ax.chunk = cstar;
        ax.rank = 1;
        ax.needed = 1;
        ax.cut = -1;
        p.aux[ch] = ax;
      }
      if (upd) {
        if (centred) running_update(p.run_mean + ch, p.a, mean);
        if (p.kind != MEAN && p.final_pass) {
          const double v = p.conv == NORM_MATTERS ? 1.0 / d : spread;
          running_update(p.run_spread + ch, p.a, v);
        }
      }
    }
  }
}

/// Second finalize (L1 centred, Top-k): the statistic from the stats2 records.
__device__ __forceinline__ void finalize2(const Fin2Params& p) {
  const Geo g = p.g;
  const int lane = (int)(threadIdx.x & 31);
  const i64 wstride = (i64)gridDim.x * WARPS;
  const double m = (double)g.m;
  const int k = p.k >= 1 && p.k <= TOPK_MAX ? p.k : 1;
  for (i64 ch = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5); ch < g.c; ch += wstride) {
    const float4 st = p.stats[ch];
    const int e = __float_as_int(st.w) >> 1;
    const bool bad = !isfinite(st.x);
    double stat = 0.0;
    Aux ax;
    ax.t = f_nan();
    ax.chunk = 0;
    ax.rank = 1;
    ax.needed = 1;
    ax.cut = -1;
    if (p.kind == L1) {
      const double* part = static_cast<const double*>(p.part) + ch * g.nchunks;
      double sa = 0.0;
      for (int j = lane; j < g.nchunks; j += 32) sa += part[j];
      sa = warp_all(sa, OpSum());
      stat = ldexp(sa, e) / m;
    } else {
      const float* lists = static_cast<const float*>(p.part) + ch * g.nchunks * k;
      float a[TOPK_MAX];
#pragma unroll
      for (int i = 0; i < TOPK_MAX; i++) a[i] = -1.0f;
      for (int j = lane; j < g.nchunks; j += 32)
        for (int i = 0; i < k; i++) topk_insert(a, lists[j * k + i]);
      const TopkResult r = warp_topk_merge(a, k, nullptr);
      stat = ldexp(r.sum / (double)k, e);
      const int needed = k - r.n_gt;
      // The chunk holding the needed-th element equal to kth, in chunk order: every lane counts
      // the ties of a contiguous range of chunks, then a warp scan.
      const int per = (g.nchunks + 31) / 32;
      const int j0 = min(lane * per, g.nchunks), j1 = min(j0 + per, g.nchunks);
      int cnt = 0;
      for (int j = j0; j < j1; j++)
        for (int i = 0; i < k; i++) cnt += lists[j * k + i] == r.kth ? 1 : 0;
      int incl = cnt;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const int excl = incl - cnt;
      const unsigned hit = __ballot_sync(0xffffffffu, excl < needed && incl >= needed);
      int cstar = 0, rstar = 1;
      if (hit) {
        const int owner = __ffs((int)hit) - 1;
        if (lane == owner) {
          int run = excl;
          for (int j = j0; j < j1; j++) {
            int cj = 0;
            for (int i = 0; i < k; i++) cj += lists[j * k + i] == r.kth ? 1 : 0;
            if (run + cj >= needed) {
              cstar = j;
              rstar = needed - run;
              break;
            }
            run += cj;
          }
        }
        cstar = __shfl_sync(0xffffffffu, cstar, owner);
        rstar = __shfl_sync(0xffffffffu, rstar, owner);
      }
      ax.t = bad ? f_nan() : r.kth;
      ax.chunk = cstar;
      ax.rank = rstar;
      ax.needed = needed;
    }
    const double spread = p.c * stat;
    const double d = spread + p.eps;
    if (lane == 0) {
      float4 o = st;
      o.z = bad ? f_nan() : scale_of(d, e);
      p.stats[ch] = o;
      if (p.kind == TOPK && p.aux) p.aux[ch] = ax;
      if (p.run_spread) running_update(p.run_spread + ch, p.a, bad ? d_nan() : (p.conv == NORM_MATTERS ? 1.0 / d : spread));
    }
  }
}

/// Eval statistics from the running statistics (normlab_norms' RunningStats::frozen), one
/// thread per channel.
__device__ __forceinline__ void frozen(const FrozenParams& p) {
  for (i64 ch = (i64)blockIdx.x * blockDim.x + threadIdx.x; ch < p.c; ch += (i64)gridDim.x * blockDim.x) {
    const double sp = p.run_spread[ch];
    float hi = 0.0f, lo = 0.0f, s = 1.0f;
    bool clamped = false;
    if (p.kind == MEAN || p.centred) split_mean(p.run_mean[ch], 0, hi, lo);
    if (p.kind != MEAN) {
      double d;
      if (p.conv == NORM_MATTERS) d = 1.0 / sp;
      else if (p.kind == RMS || p.kind == LAYER) d = sqrt(sp + p.eps);
      else if (p.kind == UNIT_L2) d = sp >= p.eps ? sp : p.eps;  // f64 max as the CPU path
      else d = sp + p.eps;
      s = (float)(1.0 / d);
      clamped = p.kind == UNIT_L2 && !(sp >= p.eps);
    }
    p.stats[ch] = make_float4(hi, lo, s, stats_meta(0, clamped));
  }
}

/// One warp per channel (L-inf, Top-k): the position of the rank-th element with |z| == t in
/// the chunk named by finalize, scanning 32 positions at a time in order.
template <class T>
__device__ __forceinline__ void cut(const CutParams& p) {
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const int lane = (int)(threadIdx.x & 31);
  const i64 wstride = (i64)gridDim.x * WARPS;
  for (i64 ch = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5); ch < g.c; ch += wstride) {
    Aux ax = p.aux[ch];
    const Chan c = chan_of(p.stats[ch]);
    i64 found = -1;
    if (ax.t >= 0.0f) {
      const i64 p0 = (i64)ax.chunk * g.chunk, p1 = min(p0 + g.chunk, g.m);
      int seen = 0;
      for (i64 base = p0; base < p1; base += 32) {
        const i64 pos = base + lane;
        const bool eq = pos < p1 && fabsf(c.z(Cvt<T>::to(x[offset_of(g, ch, pos)]))) == ax.t;
        unsigned b = __ballot_sync(0xffffffffu, eq);
        const int cnt = __popc(b);
        if (seen + cnt >= ax.rank) {
          for (int i = seen + 1; i < ax.rank; i++) b &= b - 1u;  // drop the ties before the rank-th
          found = base + (__ffs((int)b) - 1);
          break;
        }
        seen += cnt;
      }
    }
    // Every lane read p.aux[ch] above; without a ballot in between (a NaN channel: t is NaN),
    // lane 0's store would race with those reads.
    __syncwarp();
    if (lane == 0) {
      ax.cut = found;
      p.aux[ch] = ax;
    }
  }
}

// ------------------------------------------------------------------ apply (elementwise)
/// Per-channel constants of the forward output.
struct Affine {
  Chan c;
  float w, b;
};

template <class T>
__device__ __forceinline__ Affine affine_of(const ApplyParams& p, i64 ch) {
  Affine a;
  a.c = chan_of(p.stats[ch]);
  a.w = p.weight ? Cvt<T>::to(static_cast<const T*>(p.weight)[ch]) : 1.0f;
  a.b = p.bias ? Cvt<T>::to(static_cast<const T*>(p.bias)[ch]) : 0.0f;
  return a;
}

/// y = ((z * s) * w) + b, rounded once (as the CPU path: normalize, then the channel affine).
__device__ __forceinline__ float out_of(const Affine& a, float v, bool has_w, bool has_b) {
  float o = a.c.z(v) * a.c.s;
  if (has_w) o = o * a.w;
  if (has_b) o = o + a.b;
  return o;
}

template <class T>
__device__ __forceinline__ void apply(const ApplyParams& p) {
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ y = static_cast<T*>(p.y);
  const bool hw_ = p.weight != nullptr, hb = p.bias != nullptr;
  const i64 total = g.n * g.c * g.hw;
  const i64 tid = (i64)blockIdx.x * THREADS + threadIdx.x, stride = (i64)gridDim.x * THREADS;
  const i64 nv = g.vec ? total / VEC : 0;
  if (g.hw % VEC == 0) {
    // A vector lies in one channel.
    for (i64 v = tid; v < nv; v += stride) {
      const i64 i0 = v * VEC;
      i64 ch;
      divmod(div_(i0, g.hw, g.rhw), g.c, g.rc, ch);
      const Affine a = affine_of<T>(p, ch);
      const uint4 q = ld16(x + i0);
      float r[VEC];
#pragma unroll
      for (int j = 0; j < VEC; j++) r[j] = out_of(a, lanef<T>(q, j), hw_, hb);
      store16(reinterpret_cast<uint4*>(y + i0), pack8<T>(r));
    }
  } else {
    // Flat vectors across channels: the channel of each element is tracked.
    for (i64 v = tid; v < nv; v += stride) {
      const i64 i0 = v * VEC;
      i64 k, ch;
      divmod(divmod(i0, g.hw, g.rhw, k), g.c, g.rc, ch);
      const uint4 q = ld16(x + i0);
      float r[VEC];
#pragma unroll
      for (int j = 0; j < VEC; j++) {
        r[j] = out_of(affine_of<T>(p, ch), lanef<T>(q, j), hw_, hb);
        if (++k == g.hw) {
          k = 0;
          if (++ch == g.c) ch = 0;
        }
      }
      store16(reinterpret_cast<uint4*>(y + i0), pack8<T>(r));
    }
  }
  // Scalar elements: the tail, or everything when vectors are not allowed.
  for (i64 i = nv * VEC + tid; i < total; i += stride) {
    i64 ch;
    divmod(div_(i, g.hw, g.rhw), g.c, g.rc, ch);
    y[i] = Cvt<T>::from(out_of(affine_of<T>(p, ch), Cvt<T>::to(x[i]), hw_, hb));
  }
}

// ------------------------------------------------------------------ backward reductions
template <int R>
struct AccB {
  double a, b;
  int sg;
  __device__ __forceinline__ void init() {
    a = 0.0;
    b = 0.0;
    sg = 0;
  }
  /// Accumulate one element: x (ignored by R_MEAN), dy, its channel and position.
  __device__ __forceinline__ void add(const Chan& c, float t, i64 cutpos, i64 pos, float xv, float dyv) {
    b += (double)dyv;
    if (R == R_MEAN) return;
    const float z = c.z(xv);
    a += (double)dyv * (double)(z * c.s);
    if (R == R_L1) sg += sgn_i(z);
    if (R == R_SEL && selected(fabsf(z), pos, t, cutpos)) sg += sgn_i(z);
  }
};

template <class T, int R>
__device__ __forceinline__ void reduce_nchw(const RedParams& p) {
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ dy = static_cast<const T*>(p.dy);
  const i64 items = g.c * (i64)g.nchunks;
  const int r = (int)threadIdx.x;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 ch = div_(it, g.nchunks, g.rnch), j = it - ch * g.nchunks;
    const i64 t0 = j * g.chunk, t1 = min(t0 + g.chunk, g.m);
    const Chan c = chan_of(p.stats[ch]);
    float t = 0.0f;
    i64 cutpos = -1;
    if (R == R_SEL) {
      t = p.aux[ch].t;
      cutpos = p.aux[ch].cut;
    }
    AccB<R> acc;
    acc.init();
    if (g.vec) {
#pragma unroll 2
      for (i64 pos = t0 + (i64)r * VEC; pos < t1; pos += (i64)THREADS * VEC) {
        const i64 o = offset_of(g, ch, pos);
        const uint4 qd = ld16(dy + o);
        uint4 qx = make_uint4(0u, 0u, 0u, 0u);
        if (R != R_MEAN) qx = ld16(x + o);
#pragma unroll
        for (int q = 0; q < VEC; q++) acc.add(c, t, cutpos, pos + q, lanef<T>(qx, q), lanef<T>(qd, q));
      }
    } else {
#pragma unroll 4
      for (i64 pos = t0 + r; pos < t1; pos += THREADS) {
        const i64 o = offset_of(g, ch, pos);
        acc.add(c, t, cutpos, pos, R == R_MEAN ? 0.0f : Cvt<T>::to(x[o]), Cvt<T>::to(dy[o]));
      }
    }
    const Fold f = block_fold(Fold{acc.a, acc.b, (i64)acc.sg, 0.0f, 0.0f, 0.0f});
    RecB rec;
    rec.a = R == R_MEAN ? 0.0 : f.a;
    rec.b = f.b;
    rec.sg = (R == R_L1 || R == R_SEL) ? f.n : 0;
    rec.pad = 0;
    if (threadIdx.x == 0) p.rec[it] = rec;
  }
}

template <class T, int R, int CPT>
__device__ __forceinline__ void reduce_nc(const RedParams& p) {
  constexpr int COLS = NC_TILE / CPT, ROWS = THREADS / COLS;
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ dy = static_cast<const T*>(p.dy);
  const i64 tiles = (g.c + NC_TILE - 1) / NC_TILE;
  const i64 items = tiles * (i64)g.nchunks;
  const int col = (int)threadIdx.x % COLS, rl = (int)threadIdx.x / COLS;
  for (i64 it = blockIdx.x; it < items; it += gridDim.x) {
    const i64 tile = div_(it, g.nchunks, g.rnch), j = it - tile * g.nchunks;
    const i64 c0 = tile * NC_TILE, r0 = j * g.chunk, r1 = min(r0 + g.chunk, g.n);
    const i64 cb = c0 + (i64)col * CPT;
    Chan c[CPT];
    float t[CPT];
    i64 cutpos[CPT];
    AccB<R> acc[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) {
      const i64 ch = min(cb + q, g.c - 1);
      c[q] = chan_of(p.stats[ch]);
      t[q] = R == R_SEL ? p.aux[ch].t : 0.0f;
      cutpos[q] = R == R_SEL ? p.aux[ch].cut : -1;
      acc[q].init();
    }
    if (cb < g.c) {
#pragma unroll 2
      for (i64 row = r0 + rl; row < r1; row += ROWS) {
        float vx[CPT], vd[CPT];
        load_cols<T, CPT>(dy + row * g.c, cb, g.c, g.vec != 0, vd);
        if (R != R_MEAN) load_cols<T, CPT>(x + row * g.c, cb, g.c, g.vec != 0, vx);
#pragma unroll
        for (int q = 0; q < CPT; q++) acc[q].add(c[q], t[q], cutpos[q], row, R == R_MEAN ? 0.0f : vx[q], vd[q]);
      }
    }
    double a[CPT], b[CPT];
    int s[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) {
      a[q] = acc[q].a;
      b[q] = acc[q].b;
      s[q] = acc[q].sg;
    }
    RecB rec;
    rec.a = R == R_MEAN ? 0.0 : nc_reduce<CPT, COLS>(a, OpSum());
    rec.b = nc_reduce<CPT, COLS>(b, OpSum());
    rec.sg = (R == R_L1 || R == R_SEL) ? (i64)nc_reduce<CPT, COLS>(s, OpSum()) : 0;
    rec.pad = 0;
    const i64 ch = c0 + threadIdx.x;
    if (threadIdx.x < NC_TILE && ch < g.c) p.rec[ch * g.nchunks + j] = rec;
  }
}

/// One warp per channel: merge the backward records in f64, write dweight/dbias (one rounding
/// each) and the dx coefficients (k1 = the dD/dz factor including dot, mean of dz).
template <class T>
__device__ __forceinline__ void bwd_finalize(const BFinParams& p) {
  const Geo g = p.g;
  const int lane = (int)(threadIdx.x & 31);
  const i64 wstride = (i64)gridDim.x * WARPS;
  const double m = (double)g.m;
  for (i64 ch = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5); ch < g.c; ch += wstride) {
    double sa = 0.0, sb = 0.0;
    i64 sg = 0;
    for (int j = lane; j < g.nchunks; j += 32) {
      const RecB r = p.rec[ch * g.nchunks + j];
      sa += r.a;
      sb += r.b;
      sg += r.sg;
    }
    sa = warp_all(sa, OpSum());
    sb = warp_all(sb, OpSum());
    sg = warp_all(sg, OpSum());
    const Chan c = chan_of(p.stats[ch]);
    const double w = p.weight ? (double)Cvt<T>::to(static_cast<const T*>(p.weight)[ch]) : 1.0;
    const double s = (double)c.s;
    const double dot = w * sa;
    double k1 = 0.0, mean = 0.0;
    if (p.kind == MEAN) {
      mean = p.eval ? 0.0 : sb / m;
    } else if (!p.eval) {
      const double sel_sign = (double)sg;
      switch (p.kind) {
        case RMS:
        case LAYER: k1 = dot / m; break;
        case UNIT_L2: k1 = c.clamped ? 0.0 : dot; break;
        case L1: k1 = dot * p.c / m; break;
        case LINF: k1 = dot * p.c; break;
        default: k1 = dot * p.c / (double)p.k; break;  // TOPK
      }
      if (p.centred) {
        // mean(dz) = s (w sum dy - k1 sum dD/dz-sign) / m; for LayerNorm sum x^ = 0 exactly.
        if (p.kind == LAYER) mean = s * (w * sb) / m;
        else mean = s * (w * sb - k1 * sel_sign) / m;
      }
    }
    if (lane == 0) {
      if (p.coef) p.coef[ch] = make_float2((float)k1, (float)mean);
      if (p.dweight) static_cast<T*>(p.dweight)[ch] = from_f64<T>(sa);
      if (p.dbias) static_cast<T*>(p.dbias)[ch] = from_f64<T>(sb);
    }
  }
}

// ------------------------------------------------------------------ dx (elementwise)
template <int D>
struct DxChan {
  Chan c;
  float w, k1, mean, t;
  i64 cut;
};

template <class T, int D>
__device__ __forceinline__ DxChan<D> dxchan_of(const DxParams& p, i64 ch) {
  DxChan<D> d;
  d.c = chan_of(p.stats[ch]);
  d.w = p.weight ? Cvt<T>::to(static_cast<const T*>(p.weight)[ch]) : 1.0f;
  if (D != D_EVAL) {
    const float2 cf = p.coef[ch];
    d.k1 = cf.x;
    d.mean = cf.y;
  } else {
    d.k1 = 0.0f;
    d.mean = 0.0f;
  }
  if (D == D_SEL) {
    d.t = p.aux[ch].t;
    d.cut = p.aux[ch].cut;
  } else {
    d.t = 0.0f;
    d.cut = -1;
  }
  return d;
}

template <int D>
__device__ __forceinline__ float dx_of(const DxChan<D>& d, i64 pos, float xv, float dyv) {
  if (D == D_MEAN) return dyv - d.mean;
  const float s = d.c.s;
  const float g = dyv * d.w;
  if (D == D_EVAL) return d.c.unscale(s * g);
  const float z = d.c.z(xv);
  float dz;
  if (D == D_L2) dz = s * (g - (z * s) * d.k1);
  else if (D == D_L1) dz = s * (g - sgn(z) * d.k1);
  else dz = selected(fabsf(z), pos, d.t, d.cut) ? s * (g - sgn(z) * d.k1) : s * g;
  return d.c.unscale(dz - d.mean);
}

template <class T, int D>
__device__ __forceinline__ void dx_kernel(const DxParams& p) {
  constexpr bool NEED_X = D == D_L2 || D == D_L1 || D == D_SEL;
  const Geo g = p.g;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ dy = static_cast<const T*>(p.dy);
  T* __restrict__ dx = static_cast<T*>(p.dx);
  const i64 total = g.n * g.c * g.hw;
  const i64 tid = (i64)blockIdx.x * THREADS + threadIdx.x, stride = (i64)gridDim.x * THREADS;
  const i64 nv = g.vec ? total / VEC : 0;
  for (i64 v = tid; v < nv; v += stride) {
    const i64 i0 = v * VEC;
    i64 k, ch;
    i64 n = divmod(divmod(i0, g.hw, g.rhw, k), g.c, g.rc, ch);
    const uint4 qd = ld16(dy + i0);
    uint4 qx = make_uint4(0u, 0u, 0u, 0u);
    if (NEED_X) qx = ld16(x + i0);
    float r[VEC];
    if (g.hw % VEC == 0) {
      const DxChan<D> d = dxchan_of<T, D>(p, ch);
#pragma unroll
      for (int j = 0; j < VEC; j++) r[j] = dx_of<D>(d, n * g.hw + k + j, lanef<T>(qx, j), lanef<T>(qd, j));
    } else {
#pragma unroll
      for (int j = 0; j < VEC; j++) {
        r[j] = dx_of<D>(dxchan_of<T, D>(p, ch), n * g.hw + k, lanef<T>(qx, j), lanef<T>(qd, j));
        if (++k == g.hw) {
          k = 0;
          if (++ch == g.c) {
            ch = 0;
            n++;
          }
        }
      }
    }
    store16(reinterpret_cast<uint4*>(dx + i0), pack8<T>(r));
  }
  for (i64 i = nv * VEC + tid; i < total; i += stride) {
    i64 k, ch;
    const i64 n = divmod(divmod(i, g.hw, g.rhw, k), g.c, g.rc, ch);
    const float xv = NEED_X ? Cvt<T>::to(x[i]) : 0.0f;
    dx[i] = Cvt<T>::from(dx_of<D>(dxchan_of<T, D>(p, ch), n * g.hw + k, xv, Cvt<T>::to(dy[i])));
  }
}

}  // namespace nlb

// ------------------------------------------------------------------ the kernel list
// Entry points (normlab_kernels::list::batch_names() builds the same names; the compile gate
// checks them against NVRTC's PTX):
//   nl_bn_stats_<sq|mv|l1|mm|sum>_<nc|nchw>_<dt>     stats1 (field sets: rms/unit_l2, layer, l1,
//                                                    linf, topk/mean)
//   nl_bn_stats2_<l1|topk>_<nc|nchw>_<dt>           second pass over |z|
//   nl_bn_cut_<dt>, nl_bn_apply_<dt>
//   nl_bn_reduce_<plain|l1|sel|mean>_<nc|nchw>_<dt>  backward reductions
//   nl_bn_bwd_finalize_<dt>, nl_bn_dx_<l2|l1|sel|mean|eval>_<dt>
//   nl_bn_finalize1, nl_bn_finalize2, nl_bn_frozen   (f64, no storage type)
// Launch bounds: 256 threads. The Top-k passes also ask for 2 blocks per SM (at most 128
// registers, the gate's cap): with the thread count alone ptxas capped them at 80 registers
// and spilled; the other kernels keep ptxas's own (lower) register choice.
#define NLB_THREADS 256
#define NLB_LB __launch_bounds__(256)
#define NLB_LB_TOPK __launch_bounds__(256, 2)

#define NLB_FOR_EACH_FIELDS(X, ...)                  \
  X(sq, nlb::F_SQ, __VA_ARGS__)                      \
  X(mv, nlb::F_SUM | nlb::F_SQ, __VA_ARGS__)         \
  X(l1, nlb::F_SUM | nlb::F_ABS, __VA_ARGS__)        \
  X(mm, nlb::F_SUM | nlb::F_MM, __VA_ARGS__)         \
  X(sum, nlb::F_SUM, __VA_ARGS__)

// reduce classes with the NC channels per thread (8: a 16-byte vector; 4: 8 bytes, for the classes
// that need x and dy and the per-channel statistics: CPT = 8 took 128 registers and spilled)
#define NLB_FOR_EACH_RED(X, ...)             \
  X(plain, nlb::R_PLAIN, 4, __VA_ARGS__)     \
  X(l1, nlb::R_L1, 4, __VA_ARGS__)           \
  X(sel, nlb::R_SEL, 4, __VA_ARGS__)         \
  X(mean, nlb::R_MEAN, 8, __VA_ARGS__)

#define NLB_FOR_EACH_DX(X, ...)       \
  X(l2, nlb::D_L2, __VA_ARGS__)       \
  X(l1, nlb::D_L1, __VA_ARGS__)       \
  X(sel, nlb::D_SEL, __VA_ARGS__)     \
  X(mean, nlb::D_MEAN, __VA_ARGS__)   \
  X(eval, nlb::D_EVAL, __VA_ARGS__)

#define NLB_STATS1(fname, FV, tn, T)                                                                       \
  extern "C" __global__ void NLB_LB nl_bn_stats_##fname##_nc_##tn(nlb::Stats1Params p) { \
    nlb::stats1_nc<T, (FV)>(p);                                                                           \
  }                                                                                                        \
  extern "C" __global__ void NLB_LB nl_bn_stats_##fname##_nchw_##tn(nlb::Stats1Params p) { \
    nlb::stats1_nchw<T, (FV)>(p);                                                                         \
  }

#define NLB_RED(rname, RV, CPT, tn, T)                                                                    \
  extern "C" __global__ void NLB_LB nl_bn_reduce_##rname##_nc_##tn(nlb::RedParams p) { \
    nlb::reduce_nc<T, RV, CPT>(p);                                                                        \
  }                                                                                                        \
  extern "C" __global__ void NLB_LB nl_bn_reduce_##rname##_nchw_##tn(nlb::RedParams p) { \
    nlb::reduce_nchw<T, RV>(p);                                                                           \
  }

#define NLB_DX(dname, DV, tn, T)                                                                         \
  extern "C" __global__ void NLB_LB nl_bn_dx_##dname##_##tn(nlb::DxParams p) {   \
    nlb::dx_kernel<T, DV>(p);                                                                            \
  }

#define NLB_KERNELS_FOR_DTYPE(tn, T, ...)                                                                  \
  NLB_FOR_EACH_FIELDS(NLB_STATS1, tn, T)                                                                   \
  extern "C" __global__ void NLB_LB nl_bn_stats2_l1_nc_##tn(nlb::Stats2Params p) {  \
    nlb::stats2_l1_nc<T>(p);                                                                               \
  }                                                                                                         \
  extern "C" __global__ void NLB_LB nl_bn_stats2_l1_nchw_##tn(nlb::Stats2Params p) { \
    nlb::stats2_l1_nchw<T>(p);                                                                             \
  }                                                                                                         \
  extern "C" __global__ void NLB_LB_TOPK nl_bn_stats2_topk_nc_##tn(nlb::Stats2Params p) { \
    nlb::stats2_topk_nc<T>(p);                                                                             \
  }                                                                                                         \
  extern "C" __global__ void NLB_LB_TOPK nl_bn_stats2_topk_nchw_##tn(nlb::Stats2Params p) { \
    nlb::stats2_topk_nchw<T>(p);                                                                           \
  }                                                                                                         \
  extern "C" __global__ void NLB_LB nl_bn_cut_##tn(nlb::CutParams p) { nlb::cut<T>(p); } \
  extern "C" __global__ void NLB_LB nl_bn_apply_##tn(nlb::ApplyParams p) { nlb::apply<T>(p); } \
  NLB_FOR_EACH_RED(NLB_RED, tn, T)                                                                         \
  extern "C" __global__ void NLB_LB nl_bn_bwd_finalize_##tn(nlb::BFinParams p) {    \
    nlb::bwd_finalize<T>(p);                                                                               \
  }                                                                                                         \
  NLB_FOR_EACH_DX(NLB_DX, tn, T)

NL_FOR_EACH_DTYPE(NLB_KERNELS_FOR_DTYPE, _)

extern "C" __global__ void NLB_LB nl_bn_finalize1(nlb::Fin1Params p) { nlb::finalize1(p); }
extern "C" __global__ void NLB_LB nl_bn_finalize2(nlb::Fin2Params p) { nlb::finalize2(p); }
extern "C" __global__ void NLB_LB nl_bn_frozen(nlb::FrozenParams p) { nlb::frozen(p); }
