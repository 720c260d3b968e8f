// Sanitizer driver for the fused weight projections (project.cu): nl_project_<f32|f16|bf16>,
// each with ONE launch over a descriptor table of several matrices (unit rows and columns, ball
// rows and columns with radius 1 and 0.75, Frobenius balls smaller and larger than a block,
// widths and heights not multiples of 8 or of the 32-column tile, partial row and column tiles,
// a 1 x 1 matrix, a zero row, misaligned matrices), then a second launch over the projected
// weights (the "unchanged" path, nothing stored), with the parallel engine (one OS thread per
// CUDA thread). The table and the grid are project.rs's (plan_project), the launch goes through
// project_launch.cpp's by-name launcher. Built with -fsanitize=thread or
// -fsanitize=address,undefined by tests/sanitizers_project.rs; any sanitizer report fails the
// test. The weights must stay finite and every block's outcome counts (they start at -1) must add
// up to each matrix's line count, so a missed store or count exits 1 too.
#include "../../src/cpu/project_launch.cpp"

#include <cstdio>
#include <memory>
#include <vector>

namespace {
using nlp::i64;
int g_bad = 0;

/// An exact-size heap allocation starting `off` elements into it, so AddressSanitizer sees any
/// access past the end.
template <class T>
std::unique_ptr<T[]> data(size_t len, int off, unsigned seed, float scale) {
  std::unique_ptr<T[]> v(new T[len + off]);
  unsigned s = seed * 2654435761u + 1;
  for (size_t i = 0; i < len + off; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = T(scale * ((float)(s >> 8) / 16777216.0f - 0.5f));
  }
  return v;
}

struct Mat {
  i64 rows, cols;
  int kind, axis;  // nlp::Kind, nlp::Axis
  double radius;
  int off;
  float scale;     // of the data: 4 puts most ball lines outside, 0.05 most inside
  bool zero_row;   // row 0 all zero (unit: ZERO, ball: UNCHANGED)
};

/// Blocks of one matrix (project.rs blocks_of).
i64 blocks_of(const Mat& m) {
  if (m.kind == nlp::FROBENIUS) return 1;
  return m.axis == nlp::ROWS ? (m.rows + nlp::ROW_TILE - 1) / nlp::ROW_TILE : (m.cols + nlp::COL_TILE - 1) / nlp::COL_TILE;
}

template <class T>
void run(const char* tn, const std::vector<Mat>& mats) {
  const int count = (int)mats.size();
  std::unique_ptr<nlp::ProjDesc[]> desc(new nlp::ProjDesc[count]);  // exact size: the binary search
  std::vector<std::unique_ptr<T[]>> store;
  i64 grid = 0;
  for (int i = 0; i < count; i++) {
    const Mat& m = mats[i];
    store.push_back(data<T>((size_t)(m.rows * m.cols), m.off, 10 + i, m.scale));
    T* w = store.back().get() + m.off;
    if (m.zero_row)
      for (i64 j = 0; j < m.cols; j++) w[j] = T(0.0f);
    desc[i] = nlp::ProjDesc{w, m.rows, m.cols, grid, m.radius, m.axis, m.kind};
    grid += blocks_of(m);
  }
  const std::string kernel = std::string("nl_project_") + tn;
  for (int pass = 0; pass < 2; pass++) {
    std::unique_ptr<int[]> counts(new int[grid * 4]);
    std::memset(counts.get(), 0xFF, grid * 4 * sizeof(int));
    const nlp::ProjParams p{desc.get(), count, counts.get()};
    if (nl_cpu_project_launch(kernel.c_str(), (unsigned)grid, nlp::THREADS, &p, 0, 0, 1, 0) != 0) {
      std::printf("unknown kernel %s\n", kernel.c_str());
      g_bad++;
      return;
    }
    for (int i = 0; i < count; i++) {
      const Mat& m = mats[i];
      const T* w = static_cast<const T*>(desc[i].w);
      for (i64 j = 0; j < m.rows * m.cols; j++)
        if (!std::isfinite((float)w[j])) {
          std::printf("%s pass %d: non-finite weight in matrix %d at %lld\n", tn, pass, i, j);
          g_bad++;
          break;
        }
      const i64 lines = m.kind == nlp::FROBENIUS ? 1 : m.axis == nlp::ROWS ? m.rows : m.cols;
      i64 sum = 0;
      for (i64 b = desc[i].block_start; b < desc[i].block_start + blocks_of(m); b++)
        for (int o = 0; o < 4; o++) sum += counts[b * 4 + o];
      if (sum != lines) {
        std::printf("%s pass %d: outcome counts of matrix %d add up to %lld, not %lld lines\n", tn, pass, i, sum, lines);
        g_bad++;
      }
    }
  }
}
}  // namespace

int main() {
  using namespace nlp;
  // rows, cols, kind, axis, radius, off, scale, zero row
  const std::vector<Mat> mats = {
      {9, 37, UNIT, ROWS, 1.0, 0, 4.0f, true},         // 2 row tiles, the second with 1 row
      {1, 1, UNIT, ROWS, 1.0, 1, 4.0f, false},
      {37, 45, UNIT, COLS, 1.0, 3, 4.0f, false},       // 2 column tiles, the second with 13 columns
      {5, 70, BALL, ROWS, 0.75, 0, 4.0f, false},
      {6, 21, BALL, ROWS, 1.0, 2, 0.05f, true},        // inside the ball: unchanged lines
      {20, 33, BALL, COLS, 1.0, 0, 4.0f, true},
      {7, 13, FROBENIUS, ROWS, 1.0, 1, 4.0f, false},   // fewer elements than threads
      {17, 19, FROBENIUS, ROWS, 0.75, 0, 4.0f, false}, // more (323)
  };
  run<float>("f32", mats);
  run<__half>("f16", mats);
  run<__nv_bfloat16>("bf16", mats);
  if (g_bad) {
    std::printf("FAILED: %d problems\n", g_bad);
    return 1;
  }
  std::printf("OK: all kernels ran clean\n");
  return 0;
}
