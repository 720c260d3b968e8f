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
}  // namespace

#define NL_RUN_KIND(kname, KIND, tn, T)                                                                            \
  run<T>("nl_" #kname "_" #tn "_warp", nl_##kname##_fwd_##tn##_warp, nl_##kname##_bwd_##tn##_warp, nl_finalize_##tn, \
         9, 45, true, 3, 3);                                                                                       \
  run<T>("nl_" #kname "_" #tn "_block", nl_##kname##_fwd_##tn##_block, nl_##kname##_bwd_##tn##_block,              \
         nl_finalize_##tn, 3, 1100, false, 5, 1);
#define NL_RUN_DTYPE(tn, T, ...) NL_FOR_EACH_KIND(NL_RUN_KIND, tn, T)

int main() {
  NL_FOR_EACH_DTYPE(NL_RUN_DTYPE, _)
  if (g_bad) {
    std::printf("FAILED: %d kernels wrote non-finite outputs\n", g_bad);
    return 1;
  }
  std::printf("OK: all kernels ran clean\n");
  return 0;
}
