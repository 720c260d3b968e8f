// Sanitizer driver for the real kernels: every row kernel (forward, backward with weight/bias
// gradients, finalize), both dtypes, warp and block mappings, on small shapes, with the
// parallel engine (one OS thread per CUDA thread). Built with -fsanitize=thread or
// -fsanitize=address,undefined by tests/sanitizers.rs; any sanitizer report fails the test.
// It also checks that every output is finite (the inputs are), so it exits 1 on garbage.
#include "simt_cpu.h"
#include "rownorm.cu"

#include <cstdio>
#include <vector>

namespace {
int g_bad = 0;

template <class T>
std::vector<T> data(size_t len, unsigned seed, float scale, float offset) {
  std::vector<T> v(len);
  unsigned s = seed * 2654435761u + 1;
  for (auto& e : v) {
    s = s * 1664525u + 1013904223u;
    e = T(offset + scale * ((float)(s >> 8) / 16777216.0f - 0.5f));
  }
  return v;
}

int row_slots(int n) { return (n + 15) / 8 * 8; }

template <class T>
void check_finite(const T* p, size_t len, const char* what, const char* name) {
  for (size_t i = 0; i < len; i++)
    if (!std::isfinite((float)p[i])) {
      std::printf("non-finite %s of %s at %zu\n", what, name, i);
      g_bad++;
      return;
    }
}

template <class T>
void run(const char* name, void (*fwd)(nl::FwdParams), void (*bwd)(nl::BwdParams), void (*fin)(nl::FinalizeParams),
         int rows, int n, bool warp, int k, int off) {
  const int block = warp ? NL_WARP_THREADS : (n / 256 + 1) * 32 < 64 ? 64 : (n / 256 + 1) * 32;
  const int groups = warp ? NL_WARP_THREADS / 32 : 1;
  const unsigned grid = 2;
  // Exact-size buffers (plus the misalignment offset) so AddressSanitizer sees any overrun.
  std::vector<T> xb = data<T>((size_t)rows * n + off, 1, 4.0f, 0.5f), dyb = data<T>((size_t)rows * n + off, 2, 2.0f, 0.0f);
  std::vector<T> w = data<T>(n, 3, 0.5f, 1.0f), b = data<T>(n, 4, 0.5f, 0.0f);
  std::vector<T> yb((size_t)rows * n + off), dxb((size_t)rows * n + off), dw(n), db(n);
  std::vector<float4> st(rows);
  std::vector<float> pw((size_t)grid * n), pb((size_t)grid * n);
  nl::FwdParams fp{xb.data() + off, yb.data() + off, w.data(), b.data(), st.data(), rows, n, 1, 1e-5f, 1.25f, k, 1};
  simt::Options o;
  o.engine = simt::Engine::Parallel;
  simt::launch(o, fwd, dim3(grid), dim3(block), (size_t)groups * row_slots(n) * sizeof(T), fp);
  check_finite(yb.data() + off, (size_t)rows * n, "y", name);
  nl::BwdParams bp{xb.data() + off, dyb.data() + off, st.data(), w.data(), dxb.data() + off, pw.data(), pb.data(),
                   rows, n, 1, 1.25f, k, 1};
  const size_t bsmem = (size_t)groups * ((2 * row_slots(n) * sizeof(T) + 8 * (size_t)n + 15) / 16 * 16);
  simt::launch(o, bwd, dim3(grid), dim3(block), bsmem, bp);
  check_finite(dxb.data() + off, (size_t)rows * n, "dx", name);
  nl::FinalizeParams f1{pw.data(), dw.data(), (int)grid, n}, f2{pb.data(), db.data(), (int)grid, n};
  simt::launch(o, fin, dim3(2), dim3(64), 0, f1);
  simt::launch(o, fin, dim3(2), dim3(64), 0, f2);
  check_finite(dw.data(), n, "dweight", name);
  check_finite(db.data(), n, "dbias", name);
}
/// A forward variant (pure-half or fp8 E4M3 output) on the same data; the e4m3 output is a byte
/// row, NaN being 0x7F / 0xFF; the pure counters must report a clean row.
template <class T>
void run_variant(const char* name, void (*fwd)(nl::FwdVarParams), int rows, int n, bool warp, int k, int off, bool e4m3) {
  const int block = warp ? NL_WARP_THREADS : (n / 256 + 1) * 32 < 64 ? 64 : (n / 256 + 1) * 32;
  const int groups = warp ? NL_WARP_THREADS / 32 : 1;
  std::vector<T> xb = data<T>((size_t)rows * n + off, 1, 4.0f, 0.5f);
  std::vector<T> w = data<T>(n, 3, 0.5f, 1.0f), b = data<T>(n, 4, 0.5f, 0.0f);
  std::vector<T> yb((size_t)rows * n + off);
  std::vector<unsigned char> y8((size_t)rows * n + off / 2);
  std::vector<float4> st(rows);
  std::vector<nl::RowCounts> counts(rows);
  void* y = e4m3 ? (void*)(y8.data() + off / 2) : (void*)(yb.data() + off);
  // fp8 rows: 8-byte vectors iff x / 2 and y are congruent modulo 8 (as the host computes it).
  const unsigned long long xa = (unsigned long long)(xb.data() + off), ya = (unsigned long long)y;
  const int vec_ok = e4m3 ? ((xa / 2) % 8 == ya % 8) : (xa % 16 == ya % 16);
  nl::FwdVarParams fp{{xb.data() + off, y, w.data(), b.data(), st.data(), rows, n, 1, 1e-5f, 1.25f, k, vec_ok},
                      counts.data(), 4.0f, 0};
  simt::Options o;
  o.engine = simt::Engine::Parallel;
  simt::launch(o, fwd, dim3(2), dim3(block), (size_t)groups * row_slots(n) * sizeof(T), fp);
  if (e4m3) {
    for (size_t i = 0; i < (size_t)rows * n; i++)
      if ((y8[off / 2 + i] & 0x7F) == 0x7F) {
        std::printf("NaN e4m3 output of %s at %zu\n", name, i);
        g_bad++;
        break;
      }
  } else {
    check_finite(yb.data() + off, (size_t)rows * n, "y (pure)", name);
    for (int r = 0; r < rows; r++)
      if (counts[r].nonfinite_in || counts[r].acc_overflow || counts[r].nonfinite_out) {
        std::printf("pure counters of %s row %d not clean\n", name, r);
        g_bad++;
        break;
      }
  }
}
}  // namespace

#define NL_RUN_VARIANT_KIND(kname, KIND, tn, T)                                                                \
  run_variant<T>("nl_" #kname "_fwd_" #tn "_pure_warp", nl_##kname##_fwd_##tn##_pure_warp, 9, 45, true, 3, 3, false); \
  run_variant<T>("nl_" #kname "_fwd_" #tn "_pure_block", nl_##kname##_fwd_##tn##_pure_block, 3, 1100, false, 5, 1, false); \
  run_variant<T>("nl_" #kname "_fwd_" #tn "_e4m3_warp", nl_##kname##_fwd_##tn##_e4m3_warp, 9, 45, true, 3, 2, true); \
  run_variant<T>("nl_" #kname "_fwd_" #tn "_e4m3_block", nl_##kname##_fwd_##tn##_e4m3_block, 3, 1100, false, 5, 16, true); \
  run_variant<T>("nl_" #kname "_fwd_" #tn "_e4m3_warp_regs", nl_##kname##_fwd_##tn##_e4m3_warp, 9, 64, true, 3, 0, true); \
  run_variant<T>("nl_" #kname "_fwd_" #tn "_e4m3_block_regs", nl_##kname##_fwd_##tn##_e4m3_block, 5, 1040, false, 5, 0, true);
#define NL_RUN_VARIANT_DTYPE(tn, T, ...) NL_FOR_EACH_KIND(NL_RUN_VARIANT_KIND, tn, T)

#define NL_RUN_KIND(kname, KIND, tn, T)                                                                            \
  run<T>("nl_" #kname "_" #tn "_warp", nl_##kname##_fwd_##tn##_warp, nl_##kname##_bwd_##tn##_warp, nl_finalize_##tn, \
         9, 45, true, 3, 3);                                                                                       \
  run<T>("nl_" #kname "_" #tn "_block", nl_##kname##_fwd_##tn##_block, nl_##kname##_bwd_##tn##_block,              \
         nl_finalize_##tn, 3, 1100, false, 5, 1);                                                                  \
  /* the register paths: aligned rows of whole vectors (warp: 8-lane segments, 4 rows a warp) */                  \
  run<T>("nl_" #kname "_" #tn "_warp_regs", nl_##kname##_fwd_##tn##_warp, nl_##kname##_bwd_##tn##_warp,            \
         nl_finalize_##tn, 9, 64, true, 3, 0);                                                                     \
  run<T>("nl_" #kname "_" #tn "_block_regs", nl_##kname##_fwd_##tn##_block, nl_##kname##_bwd_##tn##_block,         \
         nl_finalize_##tn, 5, 1040, false, 5, 0);
#define NL_RUN_DTYPE(tn, T, ...) NL_FOR_EACH_KIND(NL_RUN_KIND, tn, T)

int main() {
  NL_FOR_EACH_DTYPE(NL_RUN_DTYPE, _)
  NL_FOR_EACH_DTYPE(NL_RUN_VARIANT_DTYPE, _)
  if (g_bad) {
    std::printf("FAILED: %d kernels wrote non-finite outputs\n", g_bad);
    return 1;
  }
  std::printf("OK: all kernels ran clean\n");
  return 0;
}
