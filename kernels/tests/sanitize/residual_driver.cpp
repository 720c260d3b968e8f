// Sanitizer driver for the fused residual-update kernels (residual.cu): nGPT and anGPT, forward
// (out of place and in place) and backward with da (per-dimension and scalar a) plus finalize,
// both dtypes, warp and block mappings, aligned and misaligned rows, with the parallel engine
// (one OS thread per CUDA thread). Built with -fsanitize=thread or -fsanitize=address,undefined
// by tests/sanitizers_residual.rs; any sanitizer report fails. Outputs must be finite (the
// inputs are), so garbage exits 1 too.
#include "simt_cpu.h"
#include "residual.cu"

#include <cstdio>
#include <vector>

namespace {
int g_bad = 0;

template <class T>
std::vector<T> data(size_t len, unsigned seed, float scale) {
  std::vector<T> v(len);
  unsigned s = seed * 2654435761u + 1;
  for (auto& e : v) {
    s = s * 1664525u + 1013904223u;
    e = T(scale * ((float)(s >> 8) / 16777216.0f - 0.5f));
  }
  return v;
}

int slots(int n) { return (n + 15) / 8 * 8; }

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
void run(const char* name, void (*fwd)(nlr::UpdFwdParams), void (*bwd)(nlr::UpdBwdParams), int staged_fwd, int staged_bwd,
         int rows, int d, bool warp, int a_len, int off) {
  const int block = warp ? NL_UPD_WARP_THREADS : (d / 256 + 1) * 32 < 64 ? 64 : (d / 256 + 1) * 32;
  const int groups = warp ? NL_UPD_WARP_THREADS / 32 : 1;
  const unsigned grid = 2;
  const size_t n = (size_t)rows * d;
  // Exact-size buffers (plus the misalignment offset) so AddressSanitizer sees any overrun.
  std::vector<T> hb = data<T>(n + off, 1, 0.2f), bb = data<T>(n + off, 2, 4.0f), gb = data<T>(n + off, 3, 2.0f);
  std::vector<T> yb(n + off), dhb(n + off), dbb(n + off);
  std::vector<float> a(a_len);
  for (int i = 0; i < a_len; i++) a[i] = 0.05f + 0.5f * (float)((i * 7) % 11) / 11.0f;
  std::vector<float4> st(rows);
  std::vector<float> part((size_t)grid * a_len), da(a_len);
  const int vec = d % 8 == 0 ? 1 : 0;
  simt::Options o;
  o.engine = simt::Engine::Parallel;
  const size_t fsmem = 4 * (size_t)slots(d) + (size_t)groups * staged_fwd * 2 * slots(d);
  nlr::UpdFwdParams fp{hb.data() + off, bb.data() + off, a.data(), yb.data() + off, st.data(), rows, d, a_len, 1e-12f, vec};
  simt::launch(o, fwd, dim3(grid), dim3(block), fsmem, fp);
  check_finite(yb.data() + off, n, "y", name);
  const size_t bsmem = 4 * (size_t)slots(d) + (size_t)groups * (staged_bwd * 2 * slots(d) + 4 * (size_t)slots(d));
  nlr::UpdBwdParams bp{hb.data() + off, bb.data() + off, a.data(), gb.data() + off, st.data(), dhb.data() + off,
                       dbb.data() + off, part.data(), rows, d, a_len, vec};
  simt::launch(o, bwd, dim3(grid), dim3(block), bsmem, bp);
  check_finite(dhb.data() + off, n, "dh", name);
  check_finite(dbb.data() + off, n, "db", name);
  nlr::UpdFinalizeParams f{part.data(), da.data(), (int)grid, a_len};
  simt::launch(o, &nl_update_finalize, dim3(1), dim3(NL_UPD_FINALIZE_THREADS), 0, f);
  check_finite(da.data(), a_len, "da", name);
  // In place: y over h.
  nlr::UpdFwdParams ip{hb.data() + off, bb.data() + off, a.data(), hb.data() + off, st.data(), rows, d, a_len, 1e-12f, vec};
  simt::launch(o, fwd, dim3(grid), dim3(block), fsmem, ip);
  check_finite(hb.data() + off, n, "in-place y", name);
}
}  // namespace

int main() {
#define NL_SAN_KIND(kind, SF, SB)                                                                                      \
  run<__half>(#kind " f16 warp", &nl_update_##kind##_fwd_f16_warp, &nl_update_##kind##_bwd_f16_warp, SF, SB, 9, 40, true, 40, 0); \
  run<__half>(#kind " f16 warp scalar-a", &nl_update_##kind##_fwd_f16_warp, &nl_update_##kind##_bwd_f16_warp, SF, SB, 6, 37, true, 1, 3); \
  run<__nv_bfloat16>(#kind " bf16 block", &nl_update_##kind##_fwd_bf16_block, &nl_update_##kind##_bwd_bf16_block, SF, SB, 3, 1048, false, 1048, 5); \
  run<__nv_bfloat16>(#kind " bf16 block scalar-a", &nl_update_##kind##_fwd_bf16_block, &nl_update_##kind##_bwd_bf16_block, SF, SB, 3, 1029, false, 1, 0);
  NL_SAN_KIND(ngpt, 2, 3)
  NL_SAN_KIND(angpt, 0, 0)
  if (g_bad) return 1;
  std::printf("OK: all kernels ran clean\n");
  return 0;
}
