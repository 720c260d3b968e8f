// CPU execution of the batch-norm kernels: batchnorm.cu compiled as C++20 against the SIMT
// emulator (its own translation unit, beside the row and projection launchers), with one
// extern "C" launcher for Rust (normlab_kernels::batch::cpu). Parameters cross the FFI as the
// same #[repr(C)] structs the GPU launch uses.
#include "simt_cpu.h"
#include "batchnorm.cu"

// The Rust side (normlab_kernels::batch::params) mirrors these layouts.
static_assert(sizeof(nlb::Geo) == 72);
static_assert(sizeof(nlb::Aux) == 24);
static_assert(sizeof(nlb::Rec1) == 32 && sizeof(nlb::RecB) == 32);
static_assert(sizeof(nlb::Stats1Params) == 16 + 72 && sizeof(nlb::Stats2Params) == 24 + 72 + 8);
static_assert(sizeof(nlb::Fin1Params) == 40 + 72 + 24 + 16 && sizeof(nlb::Fin2Params) == 32 + 72 + 24 + 16);
static_assert(sizeof(nlb::FrozenParams) == 56 && sizeof(nlb::CutParams) == 24 + 72);
static_assert(sizeof(nlb::ApplyParams) == 40 + 72 && sizeof(nlb::RedParams) == 40 + 72);
static_assert(sizeof(nlb::BFinParams) == 48 + 72 + 8 + 16 && sizeof(nlb::DxParams) == 56 + 72);

namespace {
enum BSig { S1, S2, F1, F2, FR, CU, AP, RD, BF, DX };
struct BEntry {
  const char* name;
  BSig sig;
  void* fn;
};

#define NLB_E_S1(fname, FV, tn, T)                                                     \
  {"nl_bn_stats_" #fname "_nc_" #tn, S1, (void*)&nl_bn_stats_##fname##_nc_##tn},     \
  {"nl_bn_stats_" #fname "_nchw_" #tn, S1, (void*)&nl_bn_stats_##fname##_nchw_##tn},
#define NLB_E_RED(rname, RV, CPT, tn, T)                                                \
  {"nl_bn_reduce_" #rname "_nc_" #tn, RD, (void*)&nl_bn_reduce_##rname##_nc_##tn},     \
  {"nl_bn_reduce_" #rname "_nchw_" #tn, RD, (void*)&nl_bn_reduce_##rname##_nchw_##tn},
#define NLB_E_DX(dname, DV, tn, T) {"nl_bn_dx_" #dname "_" #tn, DX, (void*)&nl_bn_dx_##dname##_##tn},
#define NLB_E_DT(tn, T, ...)                                                             \
  NLB_FOR_EACH_FIELDS(NLB_E_S1, tn, T)                                                   \
  {"nl_bn_stats2_l1_nc_" #tn, S2, (void*)&nl_bn_stats2_l1_nc_##tn},                       \
  {"nl_bn_stats2_l1_nchw_" #tn, S2, (void*)&nl_bn_stats2_l1_nchw_##tn},                   \
  {"nl_bn_stats2_topk_nc_" #tn, S2, (void*)&nl_bn_stats2_topk_nc_##tn},                   \
  {"nl_bn_stats2_topk_nchw_" #tn, S2, (void*)&nl_bn_stats2_topk_nchw_##tn},               \
  {"nl_bn_cut_" #tn, CU, (void*)&nl_bn_cut_##tn},                                         \
  {"nl_bn_apply_" #tn, AP, (void*)&nl_bn_apply_##tn},                                     \
  NLB_FOR_EACH_RED(NLB_E_RED, tn, T)                                                     \
  {"nl_bn_bwd_finalize_" #tn, BF, (void*)&nl_bn_bwd_finalize_##tn},                       \
  NLB_FOR_EACH_DX(NLB_E_DX, tn, T)

const BEntry kBEntries[] = {
    NL_FOR_EACH_DTYPE(NLB_E_DT, _)
    {"nl_bn_finalize1", F1, (void*)&nl_bn_finalize1},
    {"nl_bn_finalize2", F2, (void*)&nl_bn_finalize2},
    {"nl_bn_frozen", FR, (void*)&nl_bn_frozen},
};

template <class P>
void run(const simt::Options& o, void* fn, unsigned grid, unsigned block, const void* params) {
  simt::launch(o, (void (*)(P))fn, dim3(grid), dim3(block), 0, *static_cast<const P*>(params));
}
}  // namespace

extern "C" {

/// Number of batch-norm kernels and their names (for the list cross-check).
size_t nl_cpu_batch_kernel_count() { return sizeof(kBEntries) / sizeof(kBEntries[0]); }
const char* nl_cpu_batch_kernel_name(size_t i) { return i < nl_cpu_batch_kernel_count() ? kBEntries[i].name : nullptr; }

/// Launch batch-norm kernel `name` on the emulator (order: 0 fwd, 1 rev, 2 random(seed); engine:
/// 0 serial, 1 parallel, -1 default). Returns 0, or -1 for an unknown name.
int nl_cpu_batch_launch(const char* name, unsigned grid, unsigned block, const void* params, int order,
                        unsigned long long seed, int engine, int reverse_blocks) {
  simt::Options o;
  o.order = order == 1 ? simt::Order::Rev : order == 2 ? simt::Order::Random : simt::Order::Fwd;
  o.seed = seed;
  if (engine == 0) o.engine = simt::Engine::Serial;
  if (engine == 1) o.engine = simt::Engine::Parallel;
  o.reverse_blocks = reverse_blocks != 0;
  for (const BEntry& e : kBEntries) {
    if (std::strcmp(e.name, name) != 0) continue;
    switch (e.sig) {
      case S1: run<nlb::Stats1Params>(o, e.fn, grid, block, params); return 0;
      case S2: run<nlb::Stats2Params>(o, e.fn, grid, block, params); return 0;
      case F1: run<nlb::Fin1Params>(o, e.fn, grid, block, params); return 0;
      case F2: run<nlb::Fin2Params>(o, e.fn, grid, block, params); return 0;
      case FR: run<nlb::FrozenParams>(o, e.fn, grid, block, params); return 0;
      case CU: run<nlb::CutParams>(o, e.fn, grid, block, params); return 0;
      case AP: run<nlb::ApplyParams>(o, e.fn, grid, block, params); return 0;
      case RD: run<nlb::RedParams>(o, e.fn, grid, block, params); return 0;
      case BF: run<nlb::BFinParams>(o, e.fn, grid, block, params); return 0;
      case DX: run<nlb::DxParams>(o, e.fn, grid, block, params); return 0;
    }
  }
  return -1;
}
}
