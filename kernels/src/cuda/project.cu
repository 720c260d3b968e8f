#line 2 "project.cu"  // line 1 is this directive (NVRTC compiles nl_common.cuh + this file)
// project.cu: the weight projections of nGPT and anGPT for every matrix of a model in ONE launch,
// for f32, f16 and bf16 parameters, in place on the parameter the optimizer owns.
//
// Compiled by NVRTC for the GPU (compute_80/compute_90) and, unmodified, as C++20 against
// simt_cpu.h for the CPU emulator (src/cpu/project_launch.cpp). The CPU reference is
// normlab_norms::weight::project (same outcomes, same guarantees, documented there).
//
// Kinds (per matrix, `(rows, cols)` row-major = `(out, in)`; a "line" is a row or a column):
//   UNIT       nGPT (algorithms.md 1.4):  w_i <- w_i / ||w_i||_2
//   BALL       anGPT (algorithms.md 2.6): w_i <- radius * w_i / max(radius, ||w_i||_2)
//   FROBENIUS  anGPT's whole-matrix switch: W <- radius * W / max(radius, ||W||_F)
// Axis ROWS normalises every row (contiguous lines of length cols), COLS every column (strided
// lines of length rows, stride cols).
//
// Outcome of a line (as normlab_norms::weight::LineOutcome):
//   ZERO       unit only: sum of squares 0, left at zero (nGPT's division would give NaN); the
//              ball counts a zero line as UNCHANGED (it is inside the ball), as the CPU path
//   NONFINITE  a NaN or +-Inf element: left unchanged
//   UNCHANGED  unit: | ||w|| - 1 | <= u + 1e-12; ball: ||w||^2 <= radius^2 (not written: bit-identical)
//   PROJECTED  otherwise
// with u the unit roundoff of the storage type (2^-24 f32, 2^-11 f16, 2^-8 bf16).
//
// Arithmetic. Sum of squares: every element is widened exactly to f64, where its square is exact;
// only the additions round (relative error ~ n 2^-53, as the CPU path). The line scale
// s = 1/||w|| (unit) or radius/||w|| (ball) is formed once per line in f64 and split into two
// fp32 numbers s_hi + s_lo (|s - s_hi - s_lo| <= 2^-48 s). Each element is then scaled in fp32:
//   t = x s_lo,  y = fma(x, s_hi, t)            (one rounding of x (s_hi + s_lo), up to 2^-48)
// and stored: f32 storage stores y; 16-bit storage rounds y once more, which would be a double
// rounding exactly when y lies on a midpoint between two 16-bit values. There the residual
// r = fma(x, s_hi, -y) + t (the sign of x s - y) moves y one fp32 ulp towards the exact value
// first, so the stored value is x s rounded ONCE to nearest (ties-to-even only at true ties).
// Hence every stored element has relative error <= u against x s, and:
//   unit: | ||w|| - 1 | <= u (+ ~1e-12 from the f64 norm), as the CPU path;
//   ball: the rounded candidates' sum of squares is checked in f64 BEFORE anything is written;
//         if rounding pushed it above radius^2 the scale shrinks by (1 - 2u), then 4u, 8u..., and
//         the check repeats (one retry is the usual worst case). The values written are the
//         checked ones (same deterministic computation), so ||w||^2 <= radius^2 holds for the
//         stored values (up to the f64 summation error of the check, ~n 2^-53).
// Both projections are idempotent: a projected line falls in its own "unchanged" band.
//
// Thread mapping (256 threads = 8 warps per block; every block is one (matrix, tile) pair):
//   ROWS       one warp per row, 8 rows per block; lane j reads elements j, j+32, ... (coalesced);
//              xor-butterfly reduction (every lane gets the same sum).
//   COLS       32 consecutive columns per block, thread (tx = tid % 32, ty = tid / 32) walks rows
//              ty, ty+8, ... of column c0 + tx: each warp reads 32 consecutive elements of one
//              row (coalesced), so the strided axis never costs strided transactions. The 8
//              partials of a column meet in shared memory and every thread adds them in ty order.
//   FROBENIUS  one block per matrix: thread t reads elements t, t+256, ... (coalesced); warp
//              butterflies, then the 8 warp partials in warp order. (One SM streams the matrix:
//              the price of a deterministic whole-matrix bound without a second launch.)
// Block b finds its matrix by binary search over the descriptors' prefix sums `block_start`
// (host-computed: ceil(rows/8), ceil(cols/32) or 1 blocks per matrix). All reductions are fixed
// trees: results are bitwise independent of scheduling, no atomics. Ball lines are read up to
// three times (sum of squares, check, store): the re-reads hit L2 for a block's tile.
//
// Optional per-block outcome counts (`counts`, 4 ints per block: projected, unchanged, zero,
// non-finite) let the host rebuild the per-matrix report of the CPU path without atomics.

#ifndef NL_COMMON_CUH
#include "nl_common.cuh"  // helpers shared by the kernel files (i64, warp_sum, ...)
#endif

namespace nlp {

using namespace nl;

enum Axis { ROWS = 0, COLS = 1 };
enum Kind { UNIT = 0, BALL = 1, FROBENIUS = 2 };
enum Outcome { PROJECTED = 0, UNCHANGED = 1, ZERO = 2, NONFINITE = 3, NO_LINE = 4 };

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
/// Rows per block on the ROWS axis (one per warp).
constexpr int ROW_TILE = WARPS;
/// Columns per block on the COLS axis.
constexpr int COL_TILE = 32;

/// One matrix of the fused launch (48 bytes; `normlab_kernels::project::ProjDesc` in Rust).
struct ProjDesc {
  void* w;          // the parameter itself, row-major (rows, cols)
  i64 rows;         // out
  i64 cols;         // in
  i64 block_start;  // first block of this matrix (prefix sum over the table)
  double radius;    // BALL/FROBENIUS bound (UNIT ignores it)
  int axis;         // ROWS or COLS (FROBENIUS ignores it)
  int kind;         // UNIT, BALL or FROBENIUS
};

struct ProjParams {
  const ProjDesc* desc;  // device-side table, sorted by block_start (ascending, first = 0)
  int count;             // matrices in the table (>= 1)
  int* counts;           // optional (null): [gridDim.x][4] outcome counts per block
};

// ------------------------------------------------------------------ storage types
template <class T> struct St;
template <> struct St<float> {
  static constexpr double U = 5.9604644775390625e-08;  // 2^-24
  static __device__ __forceinline__ float to(float v) { return v; }
  static __device__ __forceinline__ float from(float y, float) { return y; }
};

/// y (non-zero) moved one fp32 ulp towards the sign of r.
__device__ __forceinline__ float nudge(float y, float r) {
  const unsigned b = __float_as_uint(y);
  return __uint_as_float(((r > 0.0f) == (y > 0.0f)) ? b + 1u : b - 1u);
}

template <> struct St<__half> {
  static constexpr double U = 4.8828125e-04;  // 2^-11
  static __device__ __forceinline__ float to(__half v) { return __half2float(v); }
  /// Is y exactly half-way between two fp16 values? Normal range: the 13 dropped bits are 1000..0;
  /// subnormal range (spacing 2^-24): y / 2^-25 is an odd integer.
  static __device__ __forceinline__ bool midpoint(float y) {
    const float a = fabsf(y);
    if (a >= 6.103515625e-05f) return (__float_as_uint(y) & 0x1FFFu) == 0x1000u;
    const float m = a * 33554432.0f;  // exact (power of two)
    return m == truncf(m) && (((int)m) & 1) != 0;
  }
  static __device__ __forceinline__ __half from(float y, float r) {
    if (r != 0.0f && midpoint(y)) y = nudge(y, r);
    return __float2half_rn(y);
  }
};
template <> struct St<__nv_bfloat16> {
  static constexpr double U = 3.90625e-03;  // 2^-8
  static __device__ __forceinline__ float to(__nv_bfloat16 v) { return __bfloat162float(v); }
  /// bf16 keeps fp32's exponent: y is a midpoint iff its 16 dropped bits are 1000..0.
  static __device__ __forceinline__ bool midpoint(float y) { return (__float_as_uint(y) & 0xFFFFu) == 0x8000u; }
  static __device__ __forceinline__ __nv_bfloat16 from(float y, float r) {
    if (r != 0.0f && midpoint(y)) y = nudge(y, r);
    return __float2bfloat16_rn(y);
  }
};

/// A line scale as two fp32 numbers, s ~= hi + lo.
struct Scale {
  float hi, lo;
};
__device__ __forceinline__ Scale split(double s) {
  Scale r;
  r.hi = (float)s;
  r.lo = (float)(s - (double)r.hi);
  return r;
}

/// x * s rounded once into T (see the header).
template <class T>
__device__ __forceinline__ T scaled(T v, const Scale& s) {
  const float x = St<T>::to(v);
  const float t = x * s.lo;
  const float y = fmaf(x, s.hi, t);
  const float r = fmaf(x, s.hi, -y) + t;
  return St<T>::from(y, r);
}

__device__ __forceinline__ double sq(float x) {
  const double d = (double)x;
  return d * d;
}

// ------------------------------------------------------------------ reductions (fixed trees)
/// Block sum: warp butterflies, then every thread adds the 8 warp partials in warp order.
__device__ __forceinline__ double block_sum(double v, double* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  double s = 0.0;
#pragma unroll
  for (int w = 0; w < WARPS; w++) s += red[w];
  __syncthreads();
  return s;
}

/// Column sum on the COLS tile: the 8 partials of column tx (one per ty), added in ty order by
/// every thread of the column.
__device__ __forceinline__ double column_sum(double v, double* red) {
  const int tx = (int)(threadIdx.x & 31), ty = (int)(threadIdx.x >> 5);
  red[ty * 32 + tx] = v;
  __syncthreads();
  double s = 0.0;
#pragma unroll
  for (int k = 0; k < WARPS; k++) s += red[k * 32 + tx];
  __syncthreads();
  return s;
}

// ------------------------------------------------------------------ one line, any mapping
/// The elements a thread owns on a line: p[first + k * step] for first + k * step < end
/// (element offsets), the same set in every pass.
struct Part {
  i64 first, step, end;
};

/// Decide a line's fate from its sum of squares (uniform over the threads that share the line)
/// and the initial scale. Returns the outcome; `s` is set for PROJECTED.
template <class T>
__device__ __forceinline__ int decide(double ss, int kind, double radius, double& s) {
  if (!isfinite(ss)) return NONFINITE;
  if (kind == UNIT) {
    if (ss == 0.0) return ZERO;
    const double n = sqrt(ss);
    if (fabs(n - 1.0) <= St<T>::U + 1e-12) return UNCHANGED;
    s = 1.0 / n;
  } else {
    if (ss <= radius * radius) return UNCHANGED;  // zero lines included, as the CPU path counts them
    s = radius / sqrt(ss);
  }
  return PROJECTED;
}

template <class T>
__device__ __forceinline__ double part_sum_sq(const T* p, const Part& q) {
  double ss = 0.0;
  for (i64 i = q.first; i < q.end; i += q.step) ss += sq(St<T>::to(p[i]));
  return ss;
}

/// Sum of squares of the rounded candidates x * s (nothing is written).
template <class T>
__device__ __forceinline__ double part_candidate_sq(const T* p, const Part& q, const Scale& s) {
  double ss = 0.0;
  for (i64 i = q.first; i < q.end; i += q.step) ss += sq(St<T>::to(scaled<T>(p[i], s)));
  return ss;
}

template <class T>
__device__ __forceinline__ void part_store(T* p, const Part& q, const Scale& s) {
  for (i64 i = q.first; i < q.end; i += q.step) p[i] = scaled<T>(p[i], s);
}

/// Project one line shared by a group of threads whose reduction is `reduce` (a warp, a column
/// of the COLS tile or the block). `active` is uniform over the group; every thread of the
/// BLOCK calls this the same number of times (the reductions may hold barriers), so the ball
/// retry loop runs until no line of the block needs another round.
template <class T, class Reduce>
__device__ __forceinline__ int project_line(T* p, const Part& q, bool active, int kind, double radius, bool block_sync,
                                            Reduce&& reduce) {
  double ss = reduce(active ? part_sum_sq<T>(p, q) : 0.0);
  double s = 0.0;
  int oc = active ? decide<T>(ss, kind, radius, s) : NO_LINE;
  if (kind != UNIT) {
    const double r2 = radius * radius;
    double step = 2.0 * St<T>::U;
    bool pending = oc == PROJECTED;
    for (;;) {
      const double cs = reduce(pending ? part_candidate_sq<T>(p, q, split(s)) : 0.0);
      if (pending && cs <= r2) pending = false;
      if (pending) {
        s *= 1.0 - step;
        step = fmin(2.0 * step, 0.5);
      }
      const bool again = block_sync ? __syncthreads_or(pending) != 0 : pending;
      if (!again) break;
    }
  }
  if (oc == PROJECTED) part_store<T>(p, q, split(s));
  return oc;
}

// ------------------------------------------------------------------ the three mappings
template <class T>
__device__ __forceinline__ void rows_tile(const ProjDesc& d, i64 tile, int* outcome) {
  const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
  const i64 line = tile * ROW_TILE + warp;
  int oc = NO_LINE;
  if (line < d.rows) {  // warp-uniform: the whole warp takes this branch or none of it
    T* row = static_cast<T*>(d.w) + line * d.cols;
    const Part q{lane, 32, d.cols};
    oc = project_line<T>(row, q, true, d.kind, d.radius, false, [](double v) { return warp_sum(v); });
  }
  if (lane == 0) outcome[warp] = oc;
}

template <class T>
__device__ __forceinline__ void cols_tile(const ProjDesc& d, i64 tile, int* outcome, double* red) {
  const int tx = (int)(threadIdx.x & 31), ty = (int)(threadIdx.x >> 5);
  const i64 c = tile * COL_TILE + tx;
  const bool active = c < d.cols;
  T* col = static_cast<T*>(d.w) + (active ? c : 0);
  // Element offsets along the column: rows ty, ty + 8, ... (stride cols).
  const Part q{(i64)ty * d.cols, (i64)WARPS * d.cols, d.rows * d.cols};
  const int oc = project_line<T>(col, q, active, d.kind, d.radius, true, [red](double v) { return column_sum(v, red); });
  if (ty == 0) outcome[tx] = oc;
}

template <class T>
__device__ __forceinline__ void frobenius(const ProjDesc& d, int* outcome, double* red) {
  const Part q{(i64)threadIdx.x, (i64)THREADS, d.rows * d.cols};
  const int oc = project_line<T>(static_cast<T*>(d.w), q, true, BALL, d.radius, true,
                                 [red](double v) { return block_sum(v, red); });
  if (threadIdx.x == 0) outcome[0] = oc;
}

template <class T>
__device__ __forceinline__ void project(const ProjParams& p) {
  __shared__ double red[WARPS * 32];
  __shared__ int outcome[COL_TILE];
  // Which matrix: the last descriptor whose block_start <= blockIdx.x (block-uniform).
  const i64 b = (i64)blockIdx.x;
  int lo = 0, hi = p.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.desc[mid].block_start <= b) lo = mid;
    else hi = mid - 1;
  }
  const ProjDesc d = p.desc[lo];
  const i64 tile = b - d.block_start;
  if (threadIdx.x < COL_TILE) outcome[threadIdx.x] = NO_LINE;
  __syncthreads();
  if (d.kind == FROBENIUS) frobenius<T>(d, outcome, red);
  else if (d.axis == ROWS) rows_tile<T>(d, tile, outcome);
  else cols_tile<T>(d, tile, outcome, red);
  __syncthreads();
  if (p.counts && threadIdx.x == 0) {
    // Four scalar counters (an indexed array would live in local memory).
    int n0 = 0, n1 = 0, n2 = 0, n3 = 0;
    for (int i = 0; i < COL_TILE; i++) {
      const int o = outcome[i];
      n0 += o == PROJECTED;
      n1 += o == UNCHANGED;
      n2 += o == ZERO;
      n3 += o == NONFINITE;
    }
    p.counts[b * 4 + 0] = n0;
    p.counts[b * 4 + 1] = n1;
    p.counts[b * 4 + 2] = n2;
    p.counts[b * 4 + 3] = n3;
  }
}

}  // namespace nlp

// ------------------------------------------------------------------ the kernel list
// nl_project_<f32|f16|bf16>: normlab_kernels::list::project_names() builds the same names; the
// compile gate checks them against NVRTC's PTX.
#define NL_PROJECT_FOR_EACH_DTYPE(X, ...) \
  X(f32, float, __VA_ARGS__)              \
  X(f16, __half, __VA_ARGS__)             \
  X(bf16, __nv_bfloat16, __VA_ARGS__)

#define NL_PROJECT_KERNEL(tn, T, ...)                                                               \
  extern "C" __global__ void __launch_bounds__(nlp::THREADS) nl_project_##tn(nlp::ProjParams p) { \
    nlp::project<T>(p);                                                                             \
  }
NL_PROJECT_FOR_EACH_DTYPE(NL_PROJECT_KERNEL, _)
