// Test-only kernels with planted bugs, to prove the emulator (and the sanitizer builds) catch
// them. Driver: `planted <case> [fwd|rev|par]`; exit 0 when the result matches the reference,
// 1 with "MISMATCH" on stdout when it does not. Emulator diagnostics abort (exit by signal).
//
// cases: ok        block sum of squares, correct
//        nosync1   first __syncthreads removed: warp 0 reads other warps' partials too early
//        nosync2   second __syncthreads removed: threads read the broadcast before it is written
//        oob       reads x[n] (one past the row): caught by AddressSanitizer
//        divergent __syncthreads inside `if (warp == 0)`: reported by the emulator
#include "simt_cpu.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// y[row] = sum of x[row, :]^2 written by every thread's view of the broadcast value (out[row*blockDim + t]).
__global__ void sumsq(const float* x, float* out, int n, int plant) {
  __shared__ float partial[32];
  __shared__ float total;
  const int row = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = blockDim.x >> 5;
  float a = 0.0f;
  const int limit = plant == 3 ? n + 1 : n;  // oob: i <= n
  for (int i = t; i < limit; i += blockDim.x) a += x[(long long)row * n + i] * x[(long long)row * n + i];
  a = warp_sum(a);
  if (lane == 0) partial[warp] = a;
  if (plant != 1) __syncthreads();
  if (warp == 0) {
    float s = lane < nw ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) total = s;
    if (plant == 4) __syncthreads();  // divergent barrier
  }
  if (plant != 2) __syncthreads();
  out[(long long)row * blockDim.x + t] = total;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: planted ok|nosync1|nosync2|oob|divergent [fwd|rev|par]\n");
    return 2;
  }
  const std::string c = argv[1], mode = argc > 2 ? argv[2] : "fwd";
  const int plant = c == "ok" ? 0 : c == "nosync1" ? 1 : c == "nosync2" ? 2 : c == "oob" ? 3 : c == "divergent" ? 4 : -1;
  if (plant < 0) return 2;
  const int rows = 3, n = 1000, threads = 256;
  // Exact-size heap buffer so AddressSanitizer sees x[n] of the last row.
  std::vector<float> x((size_t)rows * n);
  for (size_t i = 0; i < x.size(); i++) x[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
  std::vector<float> out((size_t)rows * threads, -1.0f);
  simt::Options o;
  if (mode == "rev") o.order = simt::Order::Rev;
  if (mode == "fwd") o.order = simt::Order::Fwd;
  if (mode == "par") o.engine = simt::Engine::Parallel;
  if (mode == "fwd" || mode == "rev") o.engine = simt::Engine::Serial;
  simt::launch(o, sumsq, dim3(rows), dim3(threads), 0, x.data(), out.data(), n, plant);
  int bad = 0;
  for (int r = 0; r < rows; r++) {
    double want = 0;
    for (int i = 0; i < n; i++) want += (double)x[(size_t)r * n + i] * x[(size_t)r * n + i];
    for (int t = 0; t < threads; t++) {
      const float g = out[(size_t)r * threads + t];
      if (!(std::fabs(g - want) <= 1e-4 * want)) bad++;
    }
  }
  if (bad) {
    std::printf("MISMATCH: %d of %d outputs wrong\n", bad, rows * threads);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
