// simt_cpu.h: run CUDA C kernels on the CPU (SIMT emulation) so that GPU-less CI executes the
// very same .cu files that NVRTC compiles for the GPU.
//
// Why: no development or CI machine has a GPU. Indexing, reduction, bounds and barrier bugs in
// the kernels must still be caught against the f64 reference. The design follows
// shared/reference/simt-emulation.md (this is our own implementation).
//
// How:
// * CUDA keywords become C++ (`__global__` etc. vanish, `__shared__` becomes `static`: blocks run
//   one at a time, so a static is exactly "one copy per block"). `threadIdx` reads the current
//   emulated thread; `blockIdx`, `blockDim`, `gridDim` are per-launch globals.
// * Serial engine (default): every CUDA thread is a ucontext fiber on the launching OS thread;
//   exactly one runs at a time and control changes only at sync points (`__syncthreads`, warp
//   collectives, thread exit). The order in which runnable threads are resumed is
//   `Order::Fwd` (lowest thread first: warp 0 runs ahead), `Rev` (highest first) or `Random`
//   (seeded). Running fwd and rev exposes both directions of a missing-barrier race. A group
//   (block for barriers, warp for collectives) is released as soon as all its live threads
//   arrived; it is checked that they arrived at the same call site with the same mask and that
//   shuffle sources are live lanes. No runnable thread and no releasable group is a deadlock,
//   reported with every thread's call site. All diagnostics abort() the process.
// * Parallel engine (`Engine::Parallel`, the default under -fsanitize=thread|address): one std::thread per
//   CUDA thread, `__syncthreads` is a std::barrier over the block, each warp collective one phase
//   of a per-warp std::barrier (exited threads arrive_and_drop), `__syncthreads_count/and/or` two
//   phases of the block barrier around relaxed atomic counters. Only the barriers order memory,
//   so ThreadSanitizer sees exactly CUDA's happens-before edges and reports missing barriers.
// * Dynamic shared memory (`simt::dynamic_shared<T>()`) is a per-launch heap buffer filled with
//   0xFF (NaN for f32/f16/bf16) before every block, so reads of unwritten shared data surface.
//   Under AddressSanitizer it has the launch's exact size, so out-of-bounds accesses are caught.
// * `__half` and `__nv_bfloat16` are 16-bit structs; float -> 16-bit conversions round to
//   nearest even with integer code; arithmetic is done in float and rounded once.
//
// Not emulated (see kernels/README.md): partial-warp collectives (every live lane must take part,
// with a mask naming at least the live lanes), cooperative groups, inline PTX, inter-block
// concurrency (blocks run one after another).
#pragma once
#ifndef SIMT_CPU
#define SIMT_CPU 1
#endif

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <source_location>
#include <thread>
#include <tuple>
#include <vector>
#include <ucontext.h>

#if defined(__SANITIZE_THREAD__)
#define SIMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIMT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __constant__ static
#define __shared__ static

using std::isfinite;
using std::isinf;
using std::isnan;

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
constexpr int warpSize = 32;
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

namespace simt {

enum class Order { Fwd, Rev, Random };
enum class Engine { Serial, Parallel };

struct Options {
  Order order = Order::Fwd;
  uint64_t seed = 1;
#if defined(SIMT_TSAN) || defined(SIMT_ASAN)
  // Sanitizers do not follow ucontext fibers reliably: use OS threads.
  Engine engine = Engine::Parallel;
#else
  Engine engine = Engine::Serial;
#endif
  bool reverse_blocks = false;
};

[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "simt_cpu: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::fflush(stderr);
  std::abort();
}

struct Site {
  const char* file = "";
  unsigned line = 0, col = 0;
  static Site of(const std::source_location& l) { return Site{l.file_name(), l.line(), l.column()}; }
  bool operator==(const Site& o) const { return line == o.line && col == o.col && std::strcmp(file, o.file) == 0; }
};

enum class St { Runnable, Barrier, Warp, Exited };

// One emulated CUDA thread.
struct Thr {
  uint3 tid{};
  unsigned linear = 0, lane = 0, warp = 0;
  St st = St::Runnable;
  Site site;
  const char* what = "";
  unsigned mask = 0;
  uint64_t val = 0, result = 0;
  int src = 0;
  int pred = 0;
  unsigned ballot = 0;
  unsigned phase = 0;  // parallel engine: collective counter (slot parity)
  unsigned bphase = 0; // parallel engine: __syncthreads_count counter (slot parity)
  ucontext_t ctx;
  char* stack = nullptr;
};

struct WarpSlots {
  uint64_t val[2][32];
  int pred[2][32];
};

struct Launch {
  Options opt;
  unsigned nthreads = 0, nwarps = 0;
  std::vector<Thr> thr;
  std::function<void()> body;
  ucontext_t sched;
  std::vector<std::unique_ptr<char[]>> stacks;
  size_t stack_bytes = 256 * 1024;
  // parallel engine
  std::unique_ptr<std::barrier<>> block_bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
  std::vector<WarpSlots> slots;
  std::unique_ptr<std::atomic<int>[]> alive;
  std::atomic<int> bcount[2];  // __syncthreads_count: predicates of the block, by parity
  // dynamic shared memory
  unsigned char* dyn = nullptr;
  size_t dyn_bytes = 0;
};

inline Launch*& cur_launch() { static Launch* l = nullptr; return l; }
inline thread_local Thr* t_cur = nullptr;
inline uint3 g_blockIdx{0, 0, 0};
inline dim3 g_blockDim;
inline dim3 g_gridDim;

inline Thr& me() {
  if (!t_cur) fail("CUDA builtin used outside a kernel launch");
  return *t_cur;
}

inline std::mutex& launch_mutex() { static std::mutex m; return m; }

template <class T>
T* dynamic_shared() {
  Launch* l = cur_launch();
  if (!l) fail("dynamic_shared outside a launch");
  return reinterpret_cast<T*>(l->dyn);
}

// ---------------------------------------------------------------- serial engine
inline void yield_to_sched() {
  Launch* l = cur_launch();
  Thr* t = t_cur;
  swapcontext(&t->ctx, &l->sched);
}

inline void fiber_entry() {
  Launch* l = cur_launch();
  l->body();
  t_cur->st = St::Exited;
  // uc_link returns to the scheduler.
}

inline unsigned live_mask(Launch& l, unsigned w) {
  unsigned m = 0;
  for (unsigned i = 0; i < 32; i++) {
    unsigned t = w * 32 + i;
    if (t < l.nthreads && l.thr[t].st != St::Exited) m |= 1u << i;
  }
  return m;
}

inline void dump_threads(Launch& l) {
  for (unsigned i = 0; i < l.nthreads; i++) {
    Thr& t = l.thr[i];
    const char* s = t.st == St::Exited ? "exited" : t.st == St::Runnable ? "runnable" : "waiting";
    std::fprintf(stderr, "  thread %u (warp %u lane %u): %s", i, t.warp, t.lane, s);
    if (t.st == St::Barrier || t.st == St::Warp)
      std::fprintf(stderr, " in %s at %s:%u", t.what, t.site.file, t.site.line);
    std::fprintf(stderr, "\n");
  }
}

// Release the warp collective of warp `w` if every live lane has arrived. Returns true if released.
inline bool try_release_warp(Launch& l, unsigned w) {
  unsigned live = live_mask(l, w);
  if (!live) return false;
  Thr* first = nullptr;
  for (unsigned i = 0; i < 32; i++) {
    if (!(live >> i & 1)) continue;
    Thr& t = l.thr[w * 32 + i];
    if (t.st != St::Warp) return false;
    if (!first) first = &t;
  }
  unsigned ballot = 0;
  for (unsigned i = 0; i < 32; i++) {
    if (!(live >> i & 1)) continue;
    Thr& t = l.thr[w * 32 + i];
    if (!(t.site == first->site) || std::strcmp(t.what, first->what) != 0)
      fail("divergent warp collective in block (%u,%u,%u): lane %u is in %s at %s:%u, lane %u in %s at %s:%u",
           g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, first->lane, first->what, first->site.file, first->site.line,
           t.lane, t.what, t.site.file, t.site.line);
    if ((t.mask & live) != live)
      fail("%s at %s:%u: mask 0x%08x of thread %u does not name every live lane of warp %u (live 0x%08x): "
           "partial-warp collectives are not supported", t.what, t.site.file, t.site.line, t.mask, t.linear, w, live);
    if (t.pred) ballot |= 1u << i;
  }
  for (unsigned i = 0; i < 32; i++) {
    if (!(live >> i & 1)) continue;
    Thr& t = l.thr[w * 32 + i];
    unsigned s = (unsigned)t.src;
    if (s >= 32 || !(live >> s & 1))
      fail("%s at %s:%u: thread %u (warp %u lane %u) reads lane %d, which has exited or does not exist",
           t.what, t.site.file, t.site.line, t.linear, w, t.lane, t.src);
    t.result = l.thr[w * 32 + s].val;
    t.ballot = ballot;
  }
  for (unsigned i = 0; i < 32; i++)
    if (live >> i & 1) l.thr[w * 32 + i].st = St::Runnable;
  return true;
}

inline bool try_release_block(Launch& l) {
  Thr* first = nullptr;
  bool any_exited = false;
  for (unsigned i = 0; i < l.nthreads; i++) {
    Thr& t = l.thr[i];
    if (t.st == St::Exited) { any_exited = true; continue; }
    if (t.st != St::Barrier) return false;
    if (!first) first = &t;
  }
  if (!first) return false;
  for (unsigned i = 0; i < l.nthreads; i++) {
    Thr& t = l.thr[i];
    if (t.st == St::Exited) continue;
    if (!(t.site == first->site))
      fail("divergent barrier in block (%u,%u,%u): thread %u is in __syncthreads at %s:%u, thread %u at %s:%u",
           g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, first->linear, first->site.file, first->site.line, t.linear,
           t.site.file, t.site.line);
  }
  if (any_exited)
    fail("__syncthreads at %s:%u reached after some threads of block (%u,%u,%u) exited (undefined in CUDA)",
         first->site.file, first->site.line, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
  int count = 0;
  for (unsigned i = 0; i < l.nthreads; i++) count += l.thr[i].pred != 0;
  for (unsigned i = 0; i < l.nthreads; i++) {
    l.thr[i].st = St::Runnable;
    l.thr[i].result = (uint64_t)count;
  }
  return true;
}

inline void run_block_serial(Launch& l, std::mt19937_64& rng) {
  for (unsigned i = 0; i < l.nthreads; i++) {
    Thr& t = l.thr[i];
    t.st = St::Runnable;
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = t.stack;
    t.ctx.uc_stack.ss_size = l.stack_bytes;
    t.ctx.uc_link = &l.sched;
    makecontext(&t.ctx, (void (*)())fiber_entry, 0);
  }
  std::vector<unsigned> runnable;
  runnable.reserve(l.nthreads);
  for (;;) {
    runnable.clear();
    for (unsigned i = 0; i < l.nthreads; i++)
      if (l.thr[i].st == St::Runnable) runnable.push_back(i);
    if (runnable.empty()) {
      bool all_exited = true;
      for (unsigned i = 0; i < l.nthreads; i++) all_exited &= l.thr[i].st == St::Exited;
      if (all_exited) break;
      std::fprintf(stderr, "simt_cpu: deadlock in block (%u,%u,%u):\n", g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
      dump_threads(l);
      fail("deadlock (a barrier or collective that not every thread reaches)");
    }
    unsigned pick;
    switch (l.opt.order) {
      case Order::Fwd: pick = runnable.front(); break;
      case Order::Rev: pick = runnable.back(); break;
      default: pick = runnable[rng() % runnable.size()]; break;
    }
    Thr& t = l.thr[pick];
    t_cur = &t;
    swapcontext(&l.sched, &t.ctx);
    t_cur = nullptr;
    // Eager release: the group this thread just joined (or left) may now be complete.
    if (t.st == St::Warp || t.st == St::Exited) try_release_warp(l, t.warp);
    if (t.st == St::Barrier || t.st == St::Exited) try_release_block(l);
  }
}

// ---------------------------------------------------------------- parallel engine
inline void run_block_parallel(Launch& l) {
  l.block_bar = std::make_unique<std::barrier<>>((std::ptrdiff_t)l.nthreads);
  l.warp_bar.clear();
  for (unsigned w = 0; w < l.nwarps; w++) {
    unsigned n = std::min(32u, l.nthreads - w * 32);
    l.warp_bar.push_back(std::make_unique<std::barrier<>>((std::ptrdiff_t)n));
  }
  l.slots.assign(l.nwarps, WarpSlots{});
  l.alive = std::make_unique<std::atomic<int>[]>(l.nthreads);
  for (unsigned i = 0; i < l.nthreads; i++) {
    l.alive[i].store(1, std::memory_order_relaxed);
    l.thr[i].phase = 0;
    l.thr[i].bphase = 0;
    l.thr[i].st = St::Runnable;
  }
  l.bcount[0].store(0, std::memory_order_relaxed);
  l.bcount[1].store(0, std::memory_order_relaxed);
  std::vector<std::thread> th;
  th.reserve(l.nthreads);
  for (unsigned i = 0; i < l.nthreads; i++) {
    th.emplace_back([&l, i] {
      t_cur = &l.thr[i];
      l.body();
      l.alive[i].store(0, std::memory_order_relaxed);
      l.thr[i].st = St::Exited;
      l.warp_bar[i / 32]->arrive_and_drop();
      l.block_bar->arrive_and_drop();
      t_cur = nullptr;
    });
  }
  for (auto& t : th) t.join();
}

// ---------------------------------------------------------------- sync points
inline void syncthreads_impl(int pred, const std::source_location& loc, int* count_out) {
  Launch* l = cur_launch();
  Thr& t = me();
  if (l->opt.engine == Engine::Parallel) {
    if (!count_out) {
      l->block_bar->arrive_and_wait();
      return;
    }
    // Count the predicates in this call's parity slot; read the total after the barrier; a
    // second phase so that no thread resets this slot (below) before every thread has read it.
    // The relaxed atomics add no ordering: only the barrier orders memory, as in CUDA.
    const unsigned p = t.bphase++ & 1;
    if (pred) l->bcount[p].fetch_add(1, std::memory_order_relaxed);
    l->block_bar->arrive_and_wait();
    *count_out = l->bcount[p].load(std::memory_order_relaxed);
    l->block_bar->arrive_and_wait();
    // The slot is next used two calls later, after the next call's first barrier, which this
    // thread reaches only after this store.
    l->bcount[p].store(0, std::memory_order_relaxed);
    return;
  }
  t.st = St::Barrier;
  t.site = Site::of(loc);
  t.what = "__syncthreads";
  t.pred = pred;
  yield_to_sched();
  if (count_out) *count_out = (int)t.result;
}

// Warp collective: publish 8 bytes and read those of lane `src`; returns them. `pred` feeds the
// ballot, returned through *ballot.
inline uint64_t warp_exchange(const char* what, unsigned mask, uint64_t val, int src, int pred, unsigned* ballot,
                              const std::source_location& loc) {
  Launch* l = cur_launch();
  Thr& t = me();
  if (l->opt.engine == Engine::Parallel) {
    WarpSlots& s = l->slots[t.warp];
    unsigned p = t.phase++ & 1;
    s.val[p][t.lane] = val;
    s.pred[p][t.lane] = pred;
    l->warp_bar[t.warp]->arrive_and_wait();
    unsigned w0 = t.warp * 32;
    if (src < 0 || src >= 32 || w0 + (unsigned)src >= l->nthreads ||
        !l->alive[w0 + src].load(std::memory_order_relaxed))
      fail("%s at %s:%u: thread %u reads lane %d, which has exited or does not exist", what, loc.file_name(),
           (unsigned)loc.line(), t.linear, src);
    uint64_t r = s.val[p][src];
    if (ballot) {
      unsigned b = 0;
      for (unsigned i = 0; i < 32 && w0 + i < l->nthreads; i++)
        if (l->alive[w0 + i].load(std::memory_order_relaxed) && s.pred[p][i]) b |= 1u << i;
      *ballot = b;
    }
    // A second phase so that no lane overwrites this parity's slots before all have read them.
    l->warp_bar[t.warp]->arrive_and_wait();
    return r;
  }
  t.st = St::Warp;
  t.site = Site::of(loc);
  t.what = what;
  t.mask = mask;
  t.val = val;
  t.src = src;
  t.pred = pred;
  yield_to_sched();
  if (ballot) *ballot = t.ballot;
  return t.result;
}

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type wider than 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// ---------------------------------------------------------------- launch
template <class... P, class... A>
void launch(const Options& opt, void (*kernel)(P...), dim3 grid, dim3 block, size_t dyn_smem, A&&... args) {
  std::lock_guard<std::mutex> guard(launch_mutex());
  Launch l;
  l.opt = opt;
  l.nthreads = block.x * block.y * block.z;
  if (l.nthreads == 0 || l.nthreads > 1024) fail("invalid block size %u", l.nthreads);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) fail("empty grid");
  l.nwarps = (l.nthreads + 31) / 32;
  l.thr.resize(l.nthreads);
  for (unsigned i = 0; i < l.nthreads; i++) {
    Thr& t = l.thr[i];
    t.linear = i;
    t.tid = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
    t.lane = i % 32;
    t.warp = i / 32;
  }
  if (opt.engine == Engine::Serial) {
    if (const char* kb = std::getenv("SIMT_STACK_KB")) l.stack_bytes = std::strtoul(kb, nullptr, 10) * 1024;
    for (unsigned i = 0; i < l.nthreads; i++) {
      l.stacks.emplace_back(new char[l.stack_bytes]);
      l.thr[i].stack = l.stacks.back().get();
    }
  }
  std::unique_ptr<unsigned char[]> dyn(new unsigned char[dyn_smem ? dyn_smem : 1]);
  l.dyn = dyn.get();
  l.dyn_bytes = dyn_smem;
  // Kernel parameters are converted to the kernel's parameter types once, then copied per thread.
  std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
  l.body = [&] {
    auto mine = params;
    std::apply(kernel, mine);
  };
  cur_launch() = &l;
  g_blockDim = block;
  g_gridDim = grid;
  std::mt19937_64 rng(opt.seed);
  size_t nblocks = (size_t)grid.x * grid.y * grid.z;
  for (size_t bi = 0; bi < nblocks; bi++) {
    size_t b = opt.reverse_blocks ? nblocks - 1 - bi : bi;
    g_blockIdx = uint3{(unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y), (unsigned)(b / ((size_t)grid.x * grid.y))};
    std::memset(l.dyn, 0xFF, dyn_smem);
    if (opt.engine == Engine::Serial)
      run_block_serial(l, rng);
    else
      run_block_parallel(l);
  }
  cur_launch() = nullptr;
}

}  // namespace simt

#define threadIdx (::simt::me().tid)
#define blockIdx (::simt::g_blockIdx)
#define blockDim (::simt::g_blockDim)
#define gridDim (::simt::g_gridDim)

// ---------------------------------------------------------------- CUDA intrinsics
inline void __syncthreads(std::source_location loc = std::source_location::current()) {
  simt::syncthreads_impl(0, loc, nullptr);
}
inline int __syncthreads_count(int p, std::source_location loc = std::source_location::current()) {
  int c = 0;
  simt::syncthreads_impl(p != 0, loc, &c);
  return c;
}
inline int __syncthreads_or(int p, std::source_location loc = std::source_location::current()) {
  return __syncthreads_count(p, loc) != 0;
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location loc = std::source_location::current()) {
  simt::warp_exchange("__syncwarp", mask, 0, (int)simt::me().lane, 0, nullptr, loc);
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32,
                     std::source_location loc = std::source_location::current()) {
  int lane = (int)simt::me().lane;
  int s = (lane & ~(width - 1)) + (src & (width - 1));
  return simt::from_bits<T>(simt::warp_exchange("__shfl_sync", mask, simt::to_bits(v), s, 0, nullptr, loc));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                         std::source_location loc = std::source_location::current()) {
  int lane = (int)simt::me().lane;
  int s = lane ^ lane_mask;
  if (s >= ((lane + width) & ~(width - 1))) s = lane;
  return simt::from_bits<T>(simt::warp_exchange("__shfl_xor_sync", mask, simt::to_bits(v), s, 0, nullptr, loc));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                          std::source_location loc = std::source_location::current()) {
  int lane = (int)simt::me().lane;
  int s = ((lane & (width - 1)) + (int)delta >= width) ? lane : lane + (int)delta;
  return simt::from_bits<T>(simt::warp_exchange("__shfl_down_sync", mask, simt::to_bits(v), s, 0, nullptr, loc));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                        std::source_location loc = std::source_location::current()) {
  int lane = (int)simt::me().lane;
  int s = ((lane & (width - 1)) - (int)delta < 0) ? lane : lane - (int)delta;
  return simt::from_bits<T>(simt::warp_exchange("__shfl_up_sync", mask, simt::to_bits(v), s, 0, nullptr, loc));
}
inline unsigned __ballot_sync(unsigned mask, int pred, std::source_location loc = std::source_location::current()) {
  unsigned b = 0;
  simt::warp_exchange("__ballot_sync", mask, 0, (int)simt::me().lane, pred != 0, &b, loc);
  return b & mask;
}
inline int __any_sync(unsigned mask, int pred, std::source_location loc = std::source_location::current()) {
  return __ballot_sync(mask, pred, loc) != 0;
}
inline int __all_sync(unsigned mask, int pred, std::source_location loc = std::source_location::current()) {
  unsigned b = 0;
  simt::warp_exchange("__all_sync", mask, 0, (int)simt::me().lane, pred != 0, &b, loc);
  unsigned l = 0;
  simt::Launch* la = simt::cur_launch();
  unsigned w = simt::me().warp;
  for (unsigned i = 0; i < 32 && w * 32 + i < la->nthreads; i++) l |= 1u << i;
  return (b & mask & l) == (mask & l) ? 1 : 0;
}

inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz((unsigned)v); }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __frsqrt_rn(float x) { return (float)(1.0 / std::sqrt((double)x)); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
// IEEE round-to-nearest fp32 operations (never contracted: the C++20 build has -ffp-contract=off).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __expf(float x) { return std::exp(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
template <class T>
inline T __ldg(const T* p) { return *p; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

template <class T>
inline T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
inline float atomicAdd(float* p, float v) {
  std::atomic_ref<float> r(*p);
  float o = r.load();
  while (!r.compare_exchange_weak(o, o + v)) {}
  return o;
}
template <class T>
inline T atomicCAS(T* p, T cmp, T v) { std::atomic_ref<T>(*p).compare_exchange_strong(cmp, v); return cmp; }
template <class T>
inline T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <class T>
inline T atomicMax(T* p, T v) {
  std::atomic_ref<T> r(*p);
  T o = r.load();
  while (o < v && !r.compare_exchange_weak(o, v)) {}
  return o;
}

// ---------------------------------------------------------------- 16-bit floats
namespace simt {
// float -> IEEE binary16, round to nearest even; NaN -> canonical 0x7fff as NVIDIA's host code.
inline uint16_t f32_to_f16_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return ax == 0x7f800000u ? (uint16_t)(sign | 0x7c00u) : (uint16_t)0x7fffu;
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (ax < 0x33000000u) return (uint16_t)sign;                  // < 2^-25 rounds to zero
  int e = (int)(ax >> 23) - 127;
  if (e < -14) {
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    int shift = -(e + 1);  // value in units of 2^-24 is mant * 2^(e+1)
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)(e + 15) << 10) | ((ax >> 13) & 0x3ffu);
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return (uint16_t)(sign | r);
}
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    float v = std::ldexp((float)m, -24);
    std::memcpy(&x, &v, 4);
    x |= sign;
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline uint16_t f32_to_bf16_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
}  // namespace simt

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

struct alignas(2) __half {
  unsigned short __x;
  __half() = default;
  __half(const __half_raw& r) : __x(r.x) {}
  __half(float f) : __x(simt::f32_to_f16_rn(f)) {}
  operator float() const { return simt::f16_to_f32(__x); }
};
struct alignas(2) __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(simt::f32_to_bf16_rn(f)) {}
  operator float() const { return simt::bf16_to_f32(__x); }
};
struct alignas(4) __half2 { __half x, y; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return simt::f16_to_f32(h.__x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return simt::bf16_to_f32(h.__x); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{(float)h.x, (float)h.y}; }

// Arithmetic in float, rounded once (exact rounding for 11- and 8-bit significands).
#define SIMT_HALF_OPS(T)                                                                         \
  inline T operator+(T a, T b) { return T((float)a + (float)b); }                                \
  inline T operator-(T a, T b) { return T((float)a - (float)b); }                                \
  inline T operator*(T a, T b) { return T((float)a * (float)b); }                                \
  inline T operator/(T a, T b) { return T((float)a / (float)b); }                                \
  inline T operator-(T a) { T r = a; r.__x ^= 0x8000u; return r; }                               \
  inline bool operator<(T a, T b) { return (float)a < (float)b; }                                \
  inline bool operator>(T a, T b) { return (float)a > (float)b; }                                \
  inline bool operator<=(T a, T b) { return (float)a <= (float)b; }                              \
  inline bool operator>=(T a, T b) { return (float)a >= (float)b; }                              \
  inline bool operator==(T a, T b) { return (float)a == (float)b; }                              \
  inline bool operator!=(T a, T b) { return (float)a != (float)b; }                              \
  inline T __hadd(T a, T b) { return a + b; }                                                     \
  inline T __hsub(T a, T b) { return a - b; }                                                     \
  inline T __hmul(T a, T b) { return a * b; }                                                     \
  inline T __hdiv(T a, T b) { return a / b; }                                                     \
  inline T __hadd_rn(T a, T b) { return a + b; }                                                  \
  inline T __hmul_rn(T a, T b) { return a * b; }                                                  \
  inline T __hfma(T a, T b, T c) { return T((float)((double)(float)a * (float)b + (float)c)); }   \
  inline T __hneg(T a) { return -a; }                                                             \
  inline T __habs(T a) { T r = a; r.__x &= 0x7fffu; return r; }                                   \
  inline T __hmax(T a, T b) { return (float)a >= (float)b || isnan((float)b) ? a : b; }           \
  inline T __hmin(T a, T b) { return (float)a <= (float)b || isnan((float)b) ? a : b; }           \
  inline T hsqrt(T a) { return T(std::sqrt((float)a)); }                                          \
  inline bool __hisnan(T a) { return isnan((float)a); }                                           \
  inline int __hisinf(T a) { float f = (float)a; return isinf(f) ? (f > 0 ? 1 : -1) : 0; }
SIMT_HALF_OPS(__half)
SIMT_HALF_OPS(__nv_bfloat16)
#undef SIMT_HALF_OPS
