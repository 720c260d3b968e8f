// CPU execution of the CUDA kernels: rownorm.cu compiled as C++20 against the SIMT emulator,
// with one extern "C" launcher for Rust (normlab_kernels::cpu). Parameters cross the FFI as the
// same #[repr(C)] structs the GPU launch uses.
#include "simt_cpu.h"
#include "rownorm.cu"

namespace {
enum Sig { FWD = 0, BWD = 1, FIN = 2, FWDV = 3 };
struct Entry {
  const char* name;
  Sig sig;
  void* fn;
};

#define NL_ENTRY_KIND(name, KIND, tn, T)                                                    \
  {"nl_" #name "_fwd_" #tn "_warp", FWD, (void*)&nl_##name##_fwd_##tn##_warp},             \
  {"nl_" #name "_fwd_" #tn "_block", FWD, (void*)&nl_##name##_fwd_##tn##_block},           \
  {"nl_" #name "_bwd_" #tn "_warp", BWD, (void*)&nl_##name##_bwd_##tn##_warp},             \
  {"nl_" #name "_bwd_" #tn "_block", BWD, (void*)&nl_##name##_bwd_##tn##_block},
#define NL_ENTRY_DTYPE(tn, T, ...) NL_FOR_EACH_KIND(NL_ENTRY_KIND, tn, T) \
  {"nl_finalize_" #tn, FIN, (void*)&nl_finalize_##tn},

#define NL_ENTRY_VARIANT_KIND(name, KIND, tn, T)                                               \
  {"nl_" #name "_fwd_" #tn "_pure_warp", FWDV, (void*)&nl_##name##_fwd_##tn##_pure_warp},     \
  {"nl_" #name "_fwd_" #tn "_pure_block", FWDV, (void*)&nl_##name##_fwd_##tn##_pure_block},   \
  {"nl_" #name "_fwd_" #tn "_e4m3_warp", FWDV, (void*)&nl_##name##_fwd_##tn##_e4m3_warp},     \
  {"nl_" #name "_fwd_" #tn "_e4m3_block", FWDV, (void*)&nl_##name##_fwd_##tn##_e4m3_block},
#define NL_ENTRY_VARIANT_DTYPE(tn, T, ...) NL_FOR_EACH_KIND(NL_ENTRY_VARIANT_KIND, tn, T)

const Entry kEntries[] = {NL_FOR_EACH_DTYPE(NL_ENTRY_DTYPE, _) NL_FOR_EACH_DTYPE(NL_ENTRY_VARIANT_DTYPE, _)};
}  // namespace

extern "C" {

/// Number of kernels and their names (for the list cross-check).
size_t nl_cpu_kernel_count() { return sizeof(kEntries) / sizeof(kEntries[0]); }
const char* nl_cpu_kernel_name(size_t i) { return i < nl_cpu_kernel_count() ? kEntries[i].name : nullptr; }

/// Launch kernel `name` on the emulator. `params` points to the kernel's parameter struct.
/// order: 0 fwd, 1 rev, 2 random(seed); engine: 0 serial, 1 parallel (OS threads), -1 default.
/// Returns 0, or -1 for an unknown name. Emulator diagnostics abort the process.
int nl_cpu_launch(const char* name, unsigned grid, unsigned block, size_t smem, const void* params, int order,
                  unsigned long long seed, int engine, int reverse_blocks) {
  simt::Options o;
  o.order = order == 1 ? simt::Order::Rev : order == 2 ? simt::Order::Random : simt::Order::Fwd;
  o.seed = seed;
  if (engine == 0) o.engine = simt::Engine::Serial;
  if (engine == 1) o.engine = simt::Engine::Parallel;
  o.reverse_blocks = reverse_blocks != 0;
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, name) != 0) continue;
    switch (e.sig) {
      case FWD:
        simt::launch(o, (void (*)(nl::FwdParams))e.fn, dim3(grid), dim3(block), smem,
                     *static_cast<const nl::FwdParams*>(params));
        return 0;
      case BWD:
        simt::launch(o, (void (*)(nl::BwdParams))e.fn, dim3(grid), dim3(block), smem,
                     *static_cast<const nl::BwdParams*>(params));
        return 0;
      case FWDV:
        simt::launch(o, (void (*)(nl::FwdVarParams))e.fn, dim3(grid), dim3(block), smem,
                     *static_cast<const nl::FwdVarParams*>(params));
        return 0;
      case FIN:
        simt::launch(o, (void (*)(nl::FinalizeParams))e.fn, dim3(grid), dim3(block), smem,
                     *static_cast<const nl::FinalizeParams*>(params));
        return 0;
    }
  }
  return -1;
}
}
