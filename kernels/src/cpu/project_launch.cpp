// CPU execution of the weight-projection kernels: project.cu compiled as C++20 against the SIMT
// emulator (its own translation unit, next to launch.cpp's row kernels), with one extern "C"
// launcher for Rust (normlab_kernels::cpu::project). Parameters cross the FFI as the same
// #[repr(C)] struct the GPU launch uses.
#include "simt_cpu.h"
#include "project.cu"

namespace {
struct ProjEntry {
  const char* name;
  void (*fn)(nlp::ProjParams);
};

#define NL_PROJECT_ENTRY(tn, T, ...) {"nl_project_" #tn, &nl_project_##tn},
const ProjEntry kProjEntries[] = {NL_PROJECT_FOR_EACH_DTYPE(NL_PROJECT_ENTRY, _)};
}  // namespace

extern "C" {

/// Number of projection kernels and their names (for the list cross-check).
size_t nl_cpu_project_kernel_count() { return sizeof(kProjEntries) / sizeof(kProjEntries[0]); }
const char* nl_cpu_project_kernel_name(size_t i) {
  return i < nl_cpu_project_kernel_count() ? kProjEntries[i].name : nullptr;
}

/// Launch projection kernel `name` on the emulator (order: 0 fwd, 1 rev, 2 random(seed); engine:
/// 0 serial, 1 parallel, -1 default). Returns 0, or -1 for an unknown name.
int nl_cpu_project_launch(const char* name, unsigned grid, unsigned block, const void* params, int order,
                          unsigned long long seed, int engine, int reverse_blocks) {
  simt::Options o;
  o.order = order == 1 ? simt::Order::Rev : order == 2 ? simt::Order::Random : simt::Order::Fwd;
  o.seed = seed;
  if (engine == 0) o.engine = simt::Engine::Serial;
  if (engine == 1) o.engine = simt::Engine::Parallel;
  o.reverse_blocks = reverse_blocks != 0;
  for (const ProjEntry& e : kProjEntries) {
    if (std::strcmp(e.name, name) != 0) continue;
    simt::launch(o, e.fn, dim3(grid), dim3(block), 0, *static_cast<const nlp::ProjParams*>(params));
    return 0;
  }
  return -1;
}
}
