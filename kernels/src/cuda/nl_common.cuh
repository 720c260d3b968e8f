#line 2 "nl_common.cuh"  // line 1 is this directive (see "How it is included" below)
// nl_common.cuh: the device helpers that rownorm.cu, residual.cu, batchnorm.cu and project.cu
// share, one copy of each: the CUDA / emulator includes, i64, 16-bit storage conversions (Cvt),
// f_inf/f_nan, the 16-byte vector lanes (word_of, lanef, pack8, store16), the warp-or-block row
// group (Group), the warp sum butterfly (float, int, double), exact power-of-two and
// rescue-exponent arithmetic (pow2, floor_log2, rescue_exponent), the statistics' meta word
// (stats_meta), the hardware reciprocal and norm, the 16-byte row layout (RowMap, row_map), the
// register top-k insertion, the dynamic shared memory declaration (NL_DYNAMIC_SMEM) and the
// 16-bit dtype X-macro (NL_FOR_EACH_DTYPE).
//
// Only helpers that were the same code with the same operation order in every file that used
// them are here: the CPU references (normlab-norms, f64) and the bitwise-reproducibility tests
// depend on the exact order of every floating-point operation. Look-alikes that differ stay in
// their files, e.g. rownorm.cu's Scale (2^-e as two factors) and residual.cu's (which clamps
// |e| to 252), rownorm.cu's int row_slots and residual.cu's i64 one, the other reductions
// (rownorm.cu's warp_max/block_sum/group_*, residual.cu's K-value warp_reduce/block_reduce,
// batchnorm.cu's warp_all/block_fold/nc_reduce, project.cu's double block_sum over its fixed
// warp count), the two top-k merges (float sum with two shuffles vs double sum with one 64-bit
// shuffle and a branch-free pop) and the two 16-byte loads (batchnorm.cu's ld16 is
// ld.global.nc, residual.cu's load16 a plain load). rownorm.cu keeps its vector loads in a
// one-member struct (Vec16, see there) and passes its `.u` to lanef.
//
// How it is included. The CPU build (simt_cpu.h, src/cpu/*.cpp, tests/sanitize/*.cpp) compiles
// each .cu file, which includes this header. For NVRTC (a single source, no include files of
// ours) normlab_kernels::sources embeds each family as concat!(this header, the .cu file), so
// every .cu file guards its include with `#ifndef NL_COMMON_CUH`, and both files start with a
// `#line 2 "<name>"` directive so that NVRTC's diagnostics and the PTX line info name the right
// file and line of the concatenated text (line 1 being the directive itself).
//
// Everything is in namespace nl (rownorm.cu's namespace; residual.cu, batchnorm.cu and project.cu
// add `using namespace nl;` to theirs). No namespace-scope variables: NVRTC emits every
// namespace-scope constexpr variable as a .global of each module's PTX, so the constants here
// are enumerators or template arguments, and each family keeps its own (VEC, TOPK_MAX,
// RESCUE_LO/HI).

#ifndef NL_COMMON_CUH
#define NL_COMMON_CUH

#ifndef SIMT_CPU
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#else
#include "simt_cpu.h"
#endif

namespace nl {

typedef long long i64;

/// Elements of 16-bit storage in one 16-byte vector (the families' VEC).
enum : int { VEC_LANES = 8 };

// ------------------------------------------------------------------ storage conversions
template <class T> struct Cvt;
template <> struct Cvt<__half> {
  enum : bool { IS_BF16 = false };
  static __device__ __forceinline__ float to(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ float bits_to(unsigned short b) { return __half2float(__ushort_as_half(b)); }
  static __device__ __forceinline__ unsigned short bits_from(float v) { return __half_as_ushort(__float2half_rn(v)); }
};
template <> struct Cvt<__nv_bfloat16> {
  enum : bool { IS_BF16 = true };
  static __device__ __forceinline__ float to(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
  static __device__ __forceinline__ float bits_to(unsigned short b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
  static __device__ __forceinline__ unsigned short bits_from(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

__device__ __forceinline__ float f_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float f_nan() { return __int_as_float(0x7fc00000); }

// ------------------------------------------------------------------ 16-byte vectors
// 16 bytes = 8 elements of 16-bit storage as a uint4, four 32-bit words: element j is the low
// (j even) or high half of word j / 2. Packing by shifts rather than a union keeps the 16-byte
// global loads and stores whole (ld/st.global.v4) and is valid C++.
__device__ __forceinline__ unsigned word_of(const uint4& u, int w) { return w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w; }

/// Element j of 8 packed 16-bit values.
template <class T>
__device__ __forceinline__ float lanef(const uint4& u, int j) {
  return Cvt<T>::bits_to((unsigned short)(word_of(u, j >> 1) >> ((j & 1) * 16)));
}

/// Two floats, each rounded once to T (to nearest, ties to even), packed into a word: `lo` in
/// the low half. On the GPU one instruction converts both (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32,
/// sm_80 and later) where two conversions, a shift and an or did; the bits are the same.
template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
#ifdef SIMT_CPU
  return (unsigned)Cvt<T>::bits_from(lo) | ((unsigned)Cvt<T>::bits_from(hi) << 16);
#else
  unsigned w;
  if constexpr (Cvt<T>::IS_BF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  }
  return w;
#endif
}

/// Pack 8 floats, rounded once each to T, into a vector.
template <class T>
__device__ __forceinline__ uint4 pack8(const float (&f)[VEC_LANES]) {
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; i++) w[i] = pack2<T>(f[2 * i], f[2 * i + 1]);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// 16-byte global store at p (a uint4* or an element pointer, 16-byte aligned). NVVM split a
/// plain uint4 store into four 32-bit stores in the backward kernels; __stwb (st.global.wb.v4,
/// the default write-back policy) keeps it one instruction.
template <class P>
__device__ __forceinline__ void store16(P* p, uint4 v) {
#ifdef SIMT_CPU
  *reinterpret_cast<uint4*>(p) = v;
#else
  __stwb(reinterpret_cast<uint4*>(p), v);
#endif
}

/// Hint that the 128-byte line holding `p` will be read soon: the GPU starts fetching it into L2
/// (prefetch.global.L2) and the thread goes on. No effect on any value; nothing on the emulator.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#ifdef SIMT_CPU
  (void)p;
#else
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// ------------------------------------------------------------------ groups (warp or block)
/// A row's processing group: one warp (BLOCK = false) or the whole block (BLOCK = true).
template <bool BLOCK>
struct Group {
  __device__ __forceinline__ static int size() { return BLOCK ? (int)blockDim.x : 32; }
  __device__ __forceinline__ static int rank() { return BLOCK ? (int)threadIdx.x : (int)(threadIdx.x & 31); }
  __device__ __forceinline__ static int index_in_block() { return BLOCK ? 0 : (int)(threadIdx.x >> 5); }
  __device__ __forceinline__ static int per_block() { return BLOCK ? 1 : (int)(blockDim.x >> 5); }
  __device__ __forceinline__ static void sync() {
    if (BLOCK) __syncthreads(); else __syncwarp();
  }
};

/// Sum over the warp by an xor butterfly (v += partner's v, offsets 16, 8, 4, 2, 1): every lane
/// ends with the same value.
template <class V>
__device__ __forceinline__ V warp_sum(V v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ------------------------------------------------------------------ exponents
/// 2^k as a float for k in [-126, 127] (exact, no libm call).
__device__ __forceinline__ float pow2(int k) { return __int_as_float((127 + k) << 23); }

/// floor(log2(v)) for finite v > 0 (subnormals by their leading bit).
__device__ __forceinline__ int floor_log2(float v) {
  const int bits = __float_as_int(v);
  const int biased = (bits >> 23) & 0xff;
  return biased ? biased - 127 : -149 + (31 - __clz(bits & 0x7fffff));
}

/// Exponent e with a row (channel) scaled by 2^-e (0: no scaling) given its max |x|: e =
/// floor(log2(amax)) when that is outside [LO, HI] (the family's RESCUE_LO, RESCUE_HI).
template <int LO, int HI>
__device__ __forceinline__ int rescue_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const int e = floor_log2(amax);
  return (e < LO || e > HI) ? e : 0;
}

/// The saved statistics' meta word: the int e * 2 + clamped as float bits.
__device__ __forceinline__ float stats_meta(int e, bool clamped) { return __int_as_float(e * 2 + (clamped ? 1 : 0)); }

// ------------------------------------------------------------------ reciprocal and norm
// Per-row reciprocals and square roots use the hardware approximations (rsqrt.approx,
// rcp.approx: <= 2 ulp of fp32, invisible after the one rounding to 16 bits). The IEEE-rounded
// division and sqrt would add a slow-path subroutine call whose ABI spills registers, and the
// compile gate requires zero spills. The emulator computes these correctly rounded.
__device__ __forceinline__ float recip(float d) { return __fdividef(1.0f, d); }
/// sqrt(q) for q >= 0 (0 for 0).
__device__ __forceinline__ float norm_from_sumsq(float q) { return q > 0.0f ? q * rsqrtf(q) : 0.0f; }

// ------------------------------------------------------------------ row layout
/// How a row splits into a scalar head (up to the first 16-byte boundary), 16-byte vectors and a
/// scalar tail. Shared-memory slot of element i is i + VEC - head, so vectors are aligned there too.
struct RowMap {
  int head;
  int nvec;
  int n;
};

__device__ __forceinline__ RowMap row_map(const void* row, int n, int vec_ok) {
  RowMap m;
  m.n = n;
  if (!vec_ok) {  // everything is scalar "tail"
    m.head = 0;
    m.nvec = 0;
    return m;
  }
  const unsigned long long a = (unsigned long long)row;
  int head = (int)(((16u - (unsigned)(a & 15u)) & 15u) >> 1);
  if (head > n) head = n;
  m.head = head;
  m.nvec = (n - head) / VEC_LANES;
  return m;
}

// ------------------------------------------------------------------ top-k
/// Insert v into the descending list a (kept in registers: every index is a compile-time
/// constant). N is the family's TOPK_MAX.
template <int N>
__device__ __forceinline__ void topk_insert(float (&a)[N], float v) {
  if (!(v > a[N - 1])) return;
#pragma unroll
  for (int i = 0; i < N; i++) {
    const float hi = fmaxf(a[i], v);
    v = fminf(a[i], v);
    a[i] = hi;
  }
}

}  // namespace nl

// ------------------------------------------------------------------ dynamic shared memory
/// Declares `name` as the block's dynamic shared memory (16-byte aligned).
#ifdef SIMT_CPU
#define NL_DYNAMIC_SMEM(name) unsigned char* name = simt::dynamic_shared<unsigned char>()
#else
#define NL_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// ------------------------------------------------------------------ 16-bit storage types
/// The storage types with a Cvt, as an X-macro for the kernel lists: X(name, type, ...) each.
#define NL_FOR_EACH_DTYPE(X, ...) \
  X(f16, __half, __VA_ARGS__)     \
  X(bf16, __nv_bfloat16, __VA_ARGS__)

#endif  // NL_COMMON_CUH
