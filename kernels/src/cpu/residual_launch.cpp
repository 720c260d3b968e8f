// CPU execution of the fused residual-update kernels: residual.cu compiled as C++20 against the
// SIMT emulator (its own translation unit, beside launch.cpp's row kernels and
// project_launch.cpp's projections), with one extern "C" launcher for Rust
// (normlab_kernels::cpu::update_*). Parameters cross the FFI as the same #[repr(C)] structs the
// GPU launch uses.
#include "simt_cpu.h"
#include "residual.cu"

namespace {
enum UpdSig { UFWD = 0, UBWD = 1, UFIN = 2 };
struct UpdEntry {
  const char* name;
  UpdSig sig;
  void* fn;
};

#define NL_UPD_ENTRY_KIND(kind, tn, T)                                                          \
  {"nl_update_" #kind "_fwd_" #tn "_warp", UFWD, (void*)&nl_update_##kind##_fwd_##tn##_warp},   \
  {"nl_update_" #kind "_fwd_" #tn "_block", UFWD, (void*)&nl_update_##kind##_fwd_##tn##_block}, \
  {"nl_update_" #kind "_bwd_" #tn "_warp", UBWD, (void*)&nl_update_##kind##_bwd_##tn##_warp},   \
  {"nl_update_" #kind "_bwd_" #tn "_block", UBWD, (void*)&nl_update_##kind##_bwd_##tn##_block},
#define NL_UPD_ENTRY_DTYPE(tn, T, ...) NL_UPDATE_FOR_EACH_KIND(NL_UPD_ENTRY_KIND, tn, T)

const UpdEntry kUpdEntries[] = {NL_FOR_EACH_DTYPE(NL_UPD_ENTRY_DTYPE, _){"nl_update_finalize", UFIN,
                                                                              (void*)&nl_update_finalize}};
}  // namespace

extern "C" {

/// Number of update kernels and their names (for the list cross-check).
size_t nl_cpu_update_kernel_count() { return sizeof(kUpdEntries) / sizeof(kUpdEntries[0]); }
const char* nl_cpu_update_kernel_name(size_t i) { return i < nl_cpu_update_kernel_count() ? kUpdEntries[i].name : nullptr; }

/// Launch update kernel `name` on the emulator (order: 0 fwd, 1 rev, 2 random(seed); engine:
/// 0 serial, 1 parallel, -1 default). Returns 0, or -1 for an unknown name.
int nl_cpu_update_launch(const char* name, unsigned grid, unsigned block, size_t smem, const void* params, int order,
                         unsigned long long seed, int engine, int reverse_blocks) {
  simt::Options o;
  o.order = order == 1 ? simt::Order::Rev : order == 2 ? simt::Order::Random : simt::Order::Fwd;
  o.seed = seed;
  if (engine == 0) o.engine = simt::Engine::Serial;
  if (engine == 1) o.engine = simt::Engine::Parallel;
  o.reverse_blocks = reverse_blocks != 0;
  for (const UpdEntry& e : kUpdEntries) {
    if (std::strcmp(e.name, name) != 0) continue;
    switch (e.sig) {
      case UFWD:
        simt::launch(o, (void (*)(nlr::UpdFwdParams))e.fn, dim3(grid), dim3(block), smem,
                     *static_cast<const nlr::UpdFwdParams*>(params));
        return 0;
      case UBWD:
        simt::launch(o, (void (*)(nlr::UpdBwdParams))e.fn, dim3(grid), dim3(block), smem,
                     *static_cast<const nlr::UpdBwdParams*>(params));
        return 0;
      case UFIN:
        simt::launch(o, (void (*)(nlr::UpdFinalizeParams))e.fn, dim3(grid), dim3(block), smem,
                     *static_cast<const nlr::UpdFinalizeParams*>(params));
        return 0;
    }
  }
  return -1;
}
}
