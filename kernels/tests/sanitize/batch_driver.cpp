// Sanitizer driver for the batch-norm kernels (batchnorm.cu): every kind (BN with the variance,
// RMS, unit L2, L1 centred and uncentred, L-inf, Top-k, mean-only), [N, C] and [N, C, H, W],
// train (stats1 -> finalize1 [-> stats2 -> finalize2] [-> cut] -> apply, running statistics
// updated) and eval (frozen -> apply), backward (reduce -> bwd_finalize -> dx, with dweight and
// dbias, or dx only in eval), f16 and bf16, with and without affine, with the parallel engine
// (one OS thread per CUDA thread). Shapes are small but keep every tail: C not a multiple of 8,
// 32 or 64 (partial NC tiles), H*W odd and a multiple of 8 (the 16-byte paths), m = N*H*W not a
// multiple of the chunk (several chunks per channel), a single sample, misaligned buffers (the
// scalar paths), a channel with a NaN input (its statistics and outputs are NaN: the bad-channel
// paths). The launch sequences are kernels/src/batch/cpu.rs's, through batch_launch.cpp's
// by-name launcher, so the names are checked too; every entry point of the family must have run.
// Built with -fsanitize=thread or -fsanitize=address,undefined by tests/sanitizers_batch.rs; any
// sanitizer report fails the test. Every output (y, dx, dweight, dbias, saved and running
// statistics) starts as NaN and must end finite (but those of the NaN channel), so a missed store
// or a NaN leaking into another channel exits 1 too.
//
// Grids: the blocks of a launch run one after another in the emulator, so a race can only be
// between threads of one block. The ThreadSanitizer build (~0.6 ms per OS thread, 256 threads per
// block) runs every launch as ONE block: the persistent grid-stride loops then take every work
// item in turn, which is where the shared scratch is reused; the ASan build uses up to 3 blocks
// (the blockIdx > 0 indexing).
#include "../../src/cpu/batch_launch.cpp"

#include <cstdio>
#include <set>
#include <string>

namespace {
using nlb::i64;
int g_bad = 0;
std::set<std::string> g_ran;
#ifdef SIMT_TSAN
constexpr i64 kMaxGrid = 1;
#else
constexpr i64 kMaxGrid = 3;
#endif

/// An exact-size heap buffer whose data start `off` elements after a 16-byte boundary (so the
/// vector paths are taken exactly when off == 0), filled with 0xFF bytes (NaN): AddressSanitizer
/// sees any access past the end, the finite checks any element left unwritten.
template <class T>
struct Buf {
  void* base = nullptr;
  T* p = nullptr;
  size_t len;
  explicit Buf(size_t n, int off = 0) : len(n) {
    if (posix_memalign(&base, 16, (n + off) * sizeof(T)) != 0) std::abort();
    std::memset(base, 0xFF, (n + off) * sizeof(T));
    p = static_cast<T*>(base) + off;
  }
  ~Buf() { std::free(base); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

template <class T>
void fill(Buf<T>& b, unsigned seed, float scale, float offset) {
  unsigned s = seed * 2654435761u + 1;
  for (size_t i = 0; i < b.len; i++) {
    s = s * 1664525u + 1013904223u;
    b.p[i] = T(offset + scale * ((float)(s >> 8) / 16777216.0f - 0.5f));
  }
}

/// Every element finite but those of channel `skip` (-1: none): element i of a tensor is in
/// channel (i / hw) % C; per-channel arrays (C = 0) hold channel i at i.
template <class T>
void check_finite(const T* p, size_t len, const char* what, const std::string& name, i64 skip = -1, i64 hw = 1, i64 C = 0) {
  for (size_t i = 0; i < len; i++)
    if (!std::isfinite((float)p[i]) && (C ? (i64)i / hw % C : (i64)i) != skip) {
      std::printf("non-finite %s of %s at %zu\n", what, name.c_str(), i);
      g_bad++;
      return;
    }
}
void check_stats(const Buf<float4>& st, const char* what, const std::string& name, i64 skip) {
  for (size_t i = 0; i < st.len; i++)
    if ((!std::isfinite(st.p[i].x) || !std::isfinite(st.p[i].y) || !std::isfinite(st.p[i].z)) && (i64)i != skip) {
      std::printf("non-finite %s statistics of %s, channel %zu\n", what, name.c_str(), i);
      g_bad++;
      return;
    }
}

template <class P>
void launch(const std::string& kernel, i64 items, const P& p) {
  const unsigned grid = (unsigned)std::max<i64>(1, std::min(items, kMaxGrid));
  g_ran.insert(kernel);
  if (nl_cpu_batch_launch(kernel.c_str(), grid, NLB_THREADS, &p, 0, 0, 1, 0) != 0) {
    std::printf("unknown kernel %s\n", kernel.c_str());
    g_bad++;
  }
}

bool al16(const void* p) { return (unsigned long long)p % 16 == 0; }

enum Kind { RMS = nlb::RMS, LAYER = nlb::LAYER, UNIT = nlb::UNIT_L2, L1 = nlb::L1, LINF = nlb::LINF, TOPK = nlb::TOPK, MEAN = nlb::MEAN };

/// One launch sequence: a kind on [N, C] (hw = 0) or [N, C, H*W], train then (optionally) eval.
struct Case {
  Kind kind;
  bool centred;
  int k;       // Top-k
  i64 n, c, hw;
  i64 chunk;   // positions per chunk, a multiple of 8 (BatchTuning::tiny)
  bool affine; // weight (not for mean-only) and bias, and their gradients
  int off;     // misalignment of x, y, dy, dx in elements (0: the 16-byte paths where the layout allows)
  int conv;    // running-statistics convention (nlb::Conv)
  bool eval;   // also eval forward and backward
  bool nan;    // x[0] (channel 0) is NaN
};

const char* kKindName[] = {"rms", "layer", "unit_l2", "l1", "linf", "topk", "mean-only"};
const char* fields_of(Kind k) { return k == RMS || k == UNIT ? "sq" : k == LAYER ? "mv" : k == L1 ? "l1" : k == LINF ? "mm" : "sum"; }
const char* reduce_of(Kind k, bool train) { return k == MEAN ? "mean" : !train || k <= UNIT ? "plain" : k == L1 ? "l1" : "sel"; }
const char* dx_of(Kind k, bool train) { return k == MEAN ? "mean" : !train ? "eval" : k <= UNIT ? "l2" : k == L1 ? "l1" : "sel"; }

template <class T>
void run_case(const char* tn, const Case& cs) {
  const bool nchw = cs.hw > 0;
  const i64 hw = nchw ? cs.hw : 1, C = cs.c, len = cs.n * C * hw, m = cs.n * hw;
  const int nchunks = (int)((m + cs.chunk - 1) / cs.chunk);
  const i64 nrec = C * nchunks;
  const std::string lay = nchw ? "nchw" : "nc", dt = tn;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %s%s k=%d %s [%lld, %lld, %lld] chunk %lld%s off %d%s", tn, kKindName[cs.kind],
                cs.centred ? "" : "-u", cs.k, nchw ? "nchw" : "nc", cs.n, C, hw, cs.chunk, cs.affine ? " affine" : "", cs.off,
                cs.nan ? " NaN channel" : "");
  const std::string name = buf;
  nlb::Geo g{cs.n, C, hw, m, cs.chunk, nchunks, 0, 1.0 / (double)hw, 1.0 / (double)C, 1.0 / nchunks};
  Buf<T> x(len, cs.off), dy(len, cs.off), y(len, cs.off), dx(len, cs.off);
  fill(x, 1, 4.0f, 0.5f);
  fill(dy, 2, 2.0f, 0.0f);
  const i64 bad = cs.nan ? 0 : -1;
  if (cs.nan) x.p[0] = T(std::nanf(""));
  const bool has_w = cs.affine && cs.kind != MEAN;
  Buf<T> w(C), b(C), dw(C), db(C);
  fill(w, 3, 0.5f, 1.0f);
  fill(b, 4, 0.5f, 0.0f);
  Buf<float4> st(C);
  Buf<nlb::Aux> aux(C);
  Buf<double> rmean(C), rspread(C);
  for (i64 i = 0; i < C; i++) rmean.p[i] = 0.0, rspread.p[i] = 1.0;
  Buf<nlb::Rec1> rec1(nrec);
  Buf<nlb::RecB> recb(nrec);
  Buf<float2> coef(C);
  const bool topk = cs.kind == TOPK, stats2 = topk || (cs.kind == L1 && cs.centred);
  Buf<double> part_l1(nrec);
  Buf<float> part_topk(nrec * (topk ? cs.k : 1));
  // The host's choices (kernels/src/batch): items per chunked launch, layout vectors, constants.
  const i64 items = (nchw ? C : (C + nlb::NC_TILE - 1) / nlb::NC_TILE) * nchunks;
  const i64 items_topk = (nchw ? C : (C + nlb::NCK_TILE - 1) / nlb::NCK_TILE) * nchunks;
  const i64 chans = (C + nlb::WARPS - 1) / nlb::WARPS, elems = (len + 8 * NLB_THREADS - 1) / (8 * NLB_THREADS);
  const bool lay_ok = nchw ? hw % 8 == 0 : C % 8 == 0;
  nlb::Geo gl = g, gx = g;
  gl.vec = lay_ok && al16(x.p) && al16(dy.p);  // chunked kernels (stats read x; reduce x and dy)
  gx.vec = al16(x.p) && al16(y.p) && al16(dy.p) && al16(dx.p);  // apply and dx
  const double eps = 1e-5, cconst = cs.kind == L1 || cs.kind == LINF || cs.kind == TOPK ? 1.25 : 1.0, a = 0.25;
  const void* wp = has_w ? w.p : nullptr;
  const void* bp = cs.affine ? b.p : nullptr;
  void* dwp = has_w ? dw.p : nullptr;
  void* dbp = cs.affine ? db.p : nullptr;

  // Train forward.
  launch("nl_bn_stats_" + std::string(fields_of(cs.kind)) + "_" + lay + "_" + dt, items, nlb::Stats1Params{x.p, rec1.p, gl});
  launch("nl_bn_finalize1", chans,
         nlb::Fin1Params{rec1.p, st.p, aux.p, rmean.p, rspread.p, g, eps, cconst, a, cs.kind, cs.centred, cs.conv, !stats2});
  if (stats2) {
    void* part = topk ? (void*)part_topk.p : (void*)part_l1.p;
    launch("nl_bn_stats2_" + std::string(topk ? "topk_" : "l1_") + lay + "_" + dt, topk ? items_topk : items,
           nlb::Stats2Params{x.p, st.p, part, gl, cs.k, 0});
    launch("nl_bn_finalize2", chans, nlb::Fin2Params{part, st.p, aux.p, rspread.p, g, eps, cconst, a, cs.kind, cs.conv, cs.k, 0});
  }
  if (cs.kind == LINF || topk) launch("nl_bn_cut_" + dt, chans, nlb::CutParams{x.p, st.p, aux.p, g});
  launch("nl_bn_apply_" + dt, elems, nlb::ApplyParams{x.p, y.p, st.p, wp, bp, gx});
  check_stats(st, "train", name, bad);
  check_finite(rmean.p, C, "running mean", name, bad);
  check_finite(rspread.p, C, "running spread", name, bad);
  check_finite(y.p, len, "train y", name, bad, hw, C);
  // Train backward.
  launch("nl_bn_reduce_" + std::string(reduce_of(cs.kind, true)) + "_" + lay + "_" + dt, items,
         nlb::RedParams{x.p, dy.p, st.p, aux.p, recb.p, gl});
  launch("nl_bn_bwd_finalize_" + dt, chans, nlb::BFinParams{recb.p, st.p, wp, dwp, dbp, coef.p, g, cconst, cs.kind, cs.centred, cs.k, 0});
  launch("nl_bn_dx_" + std::string(dx_of(cs.kind, true)) + "_" + dt, elems, nlb::DxParams{x.p, dy.p, st.p, aux.p, wp, coef.p, dx.p, gx});
  check_finite(dx.p, len, "train dx", name, bad, hw, C);
  if (has_w) check_finite(dw.p, C, "train dweight", name, bad);
  if (cs.affine) check_finite(db.p, C, "train dbias", name, bad);
  if (!cs.eval) return;
  // Eval forward and backward (dweight/dbias only with affine; else dx alone), fresh outputs.
  Buf<T> y2(len, cs.off), dx2(len, cs.off), dw2(C), db2(C);
  Buf<float4> st2(C);
  Buf<float2> coef2(C);  // zero without a reduction, as cpu.rs (mean-only dx reads it)
  std::memset(coef2.p, 0, C * sizeof(float2));
  const i64 frozen_grid = (C + NLB_THREADS - 1) / NLB_THREADS;
  launch("nl_bn_frozen", frozen_grid, nlb::FrozenParams{rmean.p, rspread.p, st2.p, C, eps, cs.kind, cs.centred, cs.conv, 0});
  launch("nl_bn_apply_" + dt, elems, nlb::ApplyParams{x.p, y2.p, st2.p, wp, bp, gx});
  check_stats(st2, "eval", name, bad);
  check_finite(y2.p, len, "eval y", name, bad, hw, C);
  if (cs.affine) {
    launch("nl_bn_reduce_" + std::string(reduce_of(cs.kind, false)) + "_" + lay + "_" + dt, items,
           nlb::RedParams{x.p, dy.p, st2.p, aux.p, recb.p, gl});
    launch("nl_bn_bwd_finalize_" + dt, chans,
           nlb::BFinParams{recb.p, st2.p, wp, has_w ? dw2.p : nullptr, db2.p, coef2.p, g, cconst, cs.kind, cs.centred, cs.k, 1});
    if (has_w) check_finite(dw2.p, C, "eval dweight", name, bad);
    check_finite(db2.p, C, "eval dbias", name, bad);
  }
  launch("nl_bn_dx_" + std::string(dx_of(cs.kind, false)) + "_" + dt, elems, nlb::DxParams{x.p, dy.p, st2.p, aux.p, wp, coef2.p, dx2.p, gx});
  check_finite(dx2.p, len, "eval dx", name, bad, hw, C);
}
}  // namespace

int main() {
  constexpr int PT = nlb::PYTORCH, NM = nlb::NORM_MATTERS;
  // Shapes (C not a multiple of 8 or of the 64- and 32-channel NC tiles unless said; m = N*H*W
  // never a multiple of the chunk): [N, C] = [37, 5] (scalar rows, chunks 16 16 5), [21, 24]
  // (16-byte rows, chunks 8 8 5), [21, 72] (16-byte rows, a second, partial 64-channel tile),
  // [40, 37] (two 32-channel Top-k tiles), [1, 9] (one sample: m = 1); [N, C, H*W] = [3, 3, 15]
  // (odd H*W, chunks 24 21), [2, 3, 24] (16-byte slabs; the first chunk of 40 ends inside a slab),
  // [2, 2, 8] (16-byte slabs, chunks 8 8), [1, 3, 35] (one sample). Each dtype runs every
  // (stats field set, layout) pair, so every entry point; eval runs with and without affine; the
  // L-inf and Top-k cases with a NaN channel keep nl_bn_cut's store after the lanes' reads.
  // kind, centred, k, n, c, hw (0: [N, C]), chunk, affine, off, conv, eval, NaN channel
  const Case f16_cases[] = {
      {LAYER, true, 0, 2, 3, 24, 40, true, 0, PT, true, true},
      {LAYER, true, 0, 21, 72, 0, 16, false, 0, NM, false, false},
      {RMS, false, 0, 37, 5, 0, 16, false, 3, NM, true, false},
      {UNIT, false, 0, 1, 3, 35, 24, true, 0, PT, false, false},
      {L1, true, 0, 3, 3, 15, 24, true, 0, PT, false, false},
      {L1, true, 0, 21, 24, 0, 8, true, 0, NM, false, false},
      {LINF, true, 0, 1, 3, 35, 24, true, 1, PT, false, true},
      {LINF, false, 0, 40, 37, 0, 16, false, 0, NM, false, false},
      {TOPK, true, 3, 2, 3, 24, 40, true, 0, NM, false, false},
      {TOPK, false, 32, 40, 37, 0, 16, false, 0, PT, false, true},
      {MEAN, true, 0, 3, 3, 15, 24, true, 5, PT, true, false},
      {MEAN, true, 0, 1, 9, 0, 8, false, 0, PT, false, false},
  };
  const Case bf16_cases[] = {
      {LAYER, true, 0, 3, 3, 15, 24, false, 0, NM, true, false},
      {LAYER, true, 0, 37, 5, 0, 16, true, 0, PT, true, false},
      {RMS, false, 0, 2, 2, 8, 8, true, 0, PT, false, false},
      {UNIT, false, 0, 21, 72, 0, 16, true, 0, NM, false, true},
      {L1, false, 0, 2, 3, 24, 40, false, 0, PT, false, false},
      {L1, true, 0, 1, 3, 35, 24, false, 2, NM, false, false},
      {L1, true, 0, 40, 37, 0, 16, true, 0, PT, false, true},
      {LINF, false, 0, 2, 2, 8, 8, false, 0, PT, false, true},
      {LINF, true, 0, 21, 24, 0, 8, true, 0, PT, false, false},
      {TOPK, false, 3, 3, 3, 15, 24, true, 0, PT, false, false},
      {TOPK, true, 7, 37, 5, 0, 16, true, 1, NM, false, true},
      {MEAN, true, 0, 21, 72, 0, 16, true, 0, NM, true, true},
      {MEAN, true, 0, 2, 3, 24, 40, false, 0, NM, false, false},
  };
  for (const Case& c : f16_cases) run_case<__half>("f16", c);
  for (const Case& c : bf16_cases) run_case<__nv_bfloat16>("bf16", c);
  for (size_t i = 0; i < nl_cpu_batch_kernel_count(); i++)
    if (!g_ran.count(nl_cpu_batch_kernel_name(i))) {
      std::printf("kernel %s did not run\n", nl_cpu_batch_kernel_name(i));
      g_bad++;
    }
  if (g_bad) {
    std::printf("FAILED: %d problems\n", g_bad);
    return 1;
  }
  std::printf("OK: all kernels ran clean\n");
  return 0;
}
