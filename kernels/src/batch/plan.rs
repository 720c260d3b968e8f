//! Host-side planning of the batch-norm kernels: validation with typed errors, the kernel names
//! of each step, chunking, grids. Shared by the CPU emulation and a GPU runtime.
//!
//! | step | kernel | work item | grid |
//! |---|---|---|---|
//! | stats1 | `nl_bn_stats_<fields>_<nc\|nchw>_<dt>` | (channel, chunk) NCHW; (64-channel tile, chunk of rows) NC | persistent |
//! | finalize1 | `nl_bn_finalize1` | one warp per channel | `ceil(C / 8)`, capped |
//! | stats2 (L1 centred, Top-k) | `nl_bn_stats2_<l1\|topk>_<nc\|nchw>_<dt>` | as stats1 (NC Top-k: 32-channel tiles) | persistent |
//! | finalize2 | `nl_bn_finalize2` | one warp per channel | |
//! | cut (L-inf, Top-k) | `nl_bn_cut_<dt>` | one warp per channel | |
//! | apply | `nl_bn_apply_<dt>` | 8 elements per thread, flat | persistent |
//! | eval statistics | `nl_bn_frozen` | one thread per channel | |
//! | backward reduce | `nl_bn_reduce_<class>_<nc\|nchw>_<dt>` | as stats1 | persistent |
//! | backward finalize | `nl_bn_bwd_finalize_<dt>` | one warp per channel | |
//! | dx | `nl_bn_dx_<class>_<dt>` | 8 elements per thread, flat | persistent |
//!
//! The chunk length depends on the layout only ([`BatchTuning`]): the f64 reductions are added
//! in the same order on every device, so results are bitwise reproducible across devices and
//! grids.

use normlab_norms::batch::{Convention, Layout, Mode, RunningStats};
use normlab_norms::{NormError, NormKind, NormSpec};

use crate::error::{KernelError, Result};
use crate::list::Storage;
use crate::plan::Device;

use super::params::Geo;

/// Threads per block of every batch kernel (`nlb::THREADS`).
pub const THREADS: u32 = 256;
/// Channels of an NC tile (`nlb::NC_TILE`), and of an NC Top-k tile (`nlb::NCK_TILE`).
pub const NC_TILE: usize = 64;
pub const NCK_TILE: usize = 32;
/// Largest k of the Top-k kernels (`nlb::TOPK_MAX`).
pub const TOPK_MAX: usize = 32;
/// Channels per block of the one-warp-per-channel kernels.
pub const WARPS: usize = 8;

/// What a batch launch normalizes: a spec's kind (each channel as a row of `N*H*W` elements), or
/// mean-only batch norm ("Norm matters" 3.4: `y = x - mu_c + b_c`, no scale, no weight).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BatchNorm {
    Spec(NormSpec),
    MeanOnly,
}

/// Kernel-side kind codes (`nlb::Kind`).
pub fn kind_code(norm: &BatchNorm) -> i32 {
    match norm {
        BatchNorm::Spec(s) => match s.kind {
            NormKind::Rms => 0,
            NormKind::Layer => 1,
            NormKind::UnitL2 => 2,
            NormKind::L1 => 3,
            NormKind::LInf => 4,
            NormKind::TopK { .. } => 5,
        },
        BatchNorm::MeanOnly => 6,
    }
}

/// How channels are cut into chunks (positions of the `(n, h, w)` order; rows for `[N, C]`):
/// `chunk = max(min_chunk, ceil(m / max_chunks))` rounded up to a multiple of 8, with
/// `topk_min_chunk` in place of `min_chunk` for Top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchTuning {
    pub min_chunk: usize,
    pub max_chunks: usize,
    /// Top-k: each thread keeps a 32-entry register list per chunk, and a list fills only after
    /// 32 of its elements (before that every insertion runs the full 32-step network), then
    /// 2k warp merge rounds close the chunk. Long chunks amortise both.
    pub topk_min_chunk: usize,
}

impl BatchTuning {
    /// 2048 positions (4 KiB of fp16 per channel) up to 256 chunks per channel: 3.2M-element
    /// channels (256 x 112 x 112) get 12544-position chunks; records stay below 0.4% of the input.
    /// Top-k: up to 32768 positions (128 per thread) while ~2048 work items remain.
    pub const DEFAULT: BatchTuning = BatchTuning { min_chunk: 2048, max_chunks: 256, topk_min_chunk: 32768 };
    /// Tiny chunks for the emulator tests, so that small shapes have many chunks.
    pub const fn tiny(min_chunk: usize) -> BatchTuning {
        BatchTuning { min_chunk, max_chunks: 1 << 30, topk_min_chunk: min_chunk }
    }
    /// Chunk length for `m` positions in each of `c` channels. Top-k: up to `topk_min_chunk`,
    /// but short enough that the tensor keeps about 2048 work items (a fixed 32768 left e.g.
    /// `[32, 64, 28, 28]` with 64 blocks), never below `min_chunk`. Depends on the layout only.
    pub fn chunk(&self, m: usize, c: usize, topk: bool) -> usize {
        let min = if topk {
            self.min_chunk.max(self.topk_min_chunk.min(m.saturating_mul(c).div_ceil(2048)))
        } else {
            self.min_chunk
        };
        min.max(m.div_ceil(self.max_chunks.max(1))).max(1).div_ceil(8) * 8
    }
}

impl Default for BatchTuning {
    fn default() -> Self {
        BatchTuning::DEFAULT
    }
}

/// A validated batch-norm launch sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchPlan {
    pub norm: BatchNorm,
    pub storage: Storage,
    pub layout: Layout,
    /// `nlb::Kind`.
    pub kind: i32,
    pub centred: bool,
    pub eps: f64,
    /// Scale constant C for `m` elements (1 for the L2 kinds and mean-only).
    pub c: f64,
    /// Top-k's k (0 otherwise).
    pub k: i32,
    /// Geometry with `vec = 0` (each launch sets it for its pointers).
    pub geo: Geo,
    pub stats1: String,
    /// Second statistics pass (L1 centred, Top-k).
    pub stats2: Option<String>,
    /// Tie cut (L-inf, Top-k).
    pub cut: Option<String>,
    pub apply: String,
    pub reduce_train: String,
    pub reduce_eval: String,
    pub bwd_finalize: String,
    pub dx_train: String,
    pub dx_eval: String,
    /// Blocks of the chunked kernels (stats1, stats2, reduce), of the stats2 Top-k NC kernel,
    /// of the one-warp-per-channel kernels, of the elementwise kernels and of `frozen`.
    pub grid_items: u32,
    pub grid_items_topk: u32,
    pub grid_channels: u32,
    pub grid_elems: u32,
    pub grid_frozen: u32,
}

pub const FINALIZE1: &str = "nl_bn_finalize1";
pub const FINALIZE2: &str = "nl_bn_finalize2";
pub const FROZEN: &str = "nl_bn_frozen";

fn lay(layout: &Layout) -> &'static str {
    match layout {
        Layout::Nc { .. } => "nc",
        Layout::Nchw { .. } => "nchw",
    }
}

/// The stats1 field set of a kind (`rms`/`unit_l2`: sum of squares; `layer`: sum and sum of
/// squares; `l1`: sum and sum of |x|; `linf`: sum, max and min; `topk` and mean-only: sum).
pub fn fields_name(kind: i32) -> &'static str {
    match kind {
        0 | 2 => "sq",
        1 => "mv",
        3 => "l1",
        4 => "mm",
        _ => "sum",
    }
}

fn reduce_class(kind: i32, mode: Mode) -> &'static str {
    match (kind, mode) {
        (6, _) => "mean",
        (_, Mode::Eval) | (0..=2, _) => "plain",
        (3, _) => "l1",
        _ => "sel",
    }
}

fn dx_class(kind: i32, mode: Mode) -> &'static str {
    match (kind, mode) {
        (6, _) => "mean",
        (_, Mode::Eval) => "eval",
        (0..=2, _) => "l2",
        (3, _) => "l1",
        _ => "sel",
    }
}

/// Every entry point of `batchnorm.cu`, sorted.
pub fn batch_names() -> Vec<String> {
    let mut v = vec![FINALIZE1.to_string(), FINALIZE2.to_string(), FROZEN.to_string()];
    for s in Storage::ALL {
        let dt = s.name();
        for l in ["nc", "nchw"] {
            for f in ["sq", "mv", "l1", "mm", "sum"] {
                v.push(format!("nl_bn_stats_{f}_{l}_{dt}"));
            }
            for f in ["l1", "topk"] {
                v.push(format!("nl_bn_stats2_{f}_{l}_{dt}"));
            }
            for r in ["plain", "l1", "sel", "mean"] {
                v.push(format!("nl_bn_reduce_{r}_{l}_{dt}"));
            }
        }
        v.push(format!("nl_bn_cut_{dt}"));
        v.push(format!("nl_bn_apply_{dt}"));
        v.push(format!("nl_bn_bwd_finalize_{dt}"));
        for d in ["l2", "l1", "sel", "mean", "eval"] {
            v.push(format!("nl_bn_dx_{d}_{dt}"));
        }
    }
    v.sort();
    v
}

/// Width in bytes of the read-only vector loads (`ld.global.nc.v4.u32`: 16, `.v2.u32`: 8) a kernel
/// streams its tensor with on the aligned path (the compile gate checks them), None for the
/// kernels without a vector path (finalize, frozen, cut, and the scalar NC Top-k pass, one
/// channel per thread). The NC reductions that need x, dy and the statistics of their channels
/// (plain, l1, sel) read 4 channels (8 bytes) per thread: 8 took 128 registers and spilled.
pub fn batch_vector_loads(name: &str) -> Option<u32> {
    if name.starts_with("nl_bn_stats2_topk_nc_") {
        return None;
    }
    if ["nl_bn_reduce_plain_nc_", "nl_bn_reduce_l1_nc_", "nl_bn_reduce_sel_nc_"].iter().any(|p| name.starts_with(p)) {
        return Some(8);
    }
    ["nl_bn_stats", "nl_bn_reduce", "nl_bn_apply", "nl_bn_dx"].iter().any(|p| name.starts_with(p)).then_some(16)
}

/// Kernels that store 16-byte vectors (`st.global.wb.v4`).
pub fn batch_vector_stores(name: &str) -> bool {
    name.starts_with("nl_bn_apply") || name.starts_with("nl_bn_dx")
}

/// Validate `norm` on `layout` and plan every step. Errors (typed, naming the value): the
/// layout's (zero dimensions, overflow), the spec's for `m = N*H*W` elements (eps, `k > m`, the
/// authors' constant for `m < 2`), `k > 32` ([`KernelError::TopKTooLarge`]), `m >= 2^31`.
pub fn plan_batch(norm: &BatchNorm, storage: Storage, layout: Layout, tuning: &BatchTuning, device: &Device) -> Result<BatchPlan> {
    layout.validate()?;
    let (n, c, hw) = (layout.batch(), layout.channels(), layout.spatial());
    let m = layout.per_channel();
    let (kind, centred, eps, cconst, k) = match norm {
        BatchNorm::Spec(spec) => {
            spec.validate(m)?;
            let k = match spec.kind {
                NormKind::TopK { k } if k > TOPK_MAX => return Err(KernelError::TopKTooLarge { k, max: TOPK_MAX }),
                NormKind::TopK { k } => k as i32,
                _ => 0,
            };
            (kind_code(norm), spec.centred, spec.eps, spec.scale_constant(m)?, k)
        }
        BatchNorm::MeanOnly => (6, true, 0.0, 1.0, 0),
    };
    if m > i32::MAX as usize {
        return Err(KernelError::TooLarge { what: "elements per channel (N*H*W)", value: m, bits: 31 });
    }
    // Flat indices are divided through f64 (exact below 2^52, see `Geo`).
    if layout.len() >= 1usize << 52 {
        return Err(KernelError::TooLarge { what: "elements", value: layout.len(), bits: 52 });
    }
    let chunk = tuning.chunk(m, c, kind == 5);
    let nchunks = m.div_ceil(chunk);
    let geo = Geo {
        n: n as i64,
        c: c as i64,
        hw: hw as i64,
        m: m as i64,
        chunk: chunk as i64,
        nchunks: nchunks as i32,
        vec: 0,
        rhw: 1.0 / hw as f64,
        rc: 1.0 / c as f64,
        rnch: 1.0 / nchunks as f64,
    };
    let cap = (device.sm_count * device.blocks_per_sm).max(1) as usize;
    let grid = |items: usize| items.clamp(1, cap) as u32;
    let (tiles, tiles_topk) = match layout {
        Layout::Nc { .. } => (c.div_ceil(NC_TILE), c.div_ceil(NCK_TILE)),
        Layout::Nchw { .. } => (c, c),
    };
    let dt = storage.name();
    let l = lay(&layout);
    let stats2 = match kind {
        3 if centred => Some(format!("nl_bn_stats2_l1_{l}_{dt}")),
        5 => Some(format!("nl_bn_stats2_topk_{l}_{dt}")),
        _ => None,
    };
    Ok(BatchPlan {
        norm: *norm,
        storage,
        layout,
        kind,
        centred,
        eps,
        c: cconst,
        k,
        geo,
        stats1: format!("nl_bn_stats_{}_{l}_{dt}", fields_name(kind)),
        stats2,
        cut: matches!(kind, 4 | 5).then(|| format!("nl_bn_cut_{dt}")),
        apply: format!("nl_bn_apply_{dt}"),
        reduce_train: format!("nl_bn_reduce_{}_{l}_{dt}", reduce_class(kind, Mode::Train)),
        reduce_eval: format!("nl_bn_reduce_{}_{l}_{dt}", reduce_class(kind, Mode::Eval)),
        bwd_finalize: format!("nl_bn_bwd_finalize_{dt}"),
        dx_train: format!("nl_bn_dx_{}_{dt}", dx_class(kind, Mode::Train)),
        dx_eval: format!("nl_bn_dx_{}_{dt}", dx_class(kind, Mode::Eval)),
        grid_items: grid(tiles * nchunks),
        grid_items_topk: grid(tiles_topk * nchunks),
        grid_channels: grid(c.div_ceil(WARPS)),
        grid_elems: grid(layout.len().div_ceil(8 * THREADS as usize)),
        grid_frozen: grid(c.div_ceil(THREADS as usize)),
    })
}

impl BatchPlan {
    /// Whether finalize1 completes the statistics (no second pass).
    pub fn final_pass1(&self) -> bool {
        self.stats2.is_none()
    }
    /// Weight of the new batch value in the running update (`RunningStats::update`).
    pub fn batch_weight(running: &RunningStats) -> f64 {
        match running.convention {
            Convention::PyTorch => running.momentum,
            Convention::NormMattersCode => 1.0 - running.momentum,
        }
    }
    /// `nlb::Conv` of a convention.
    pub fn conv_code(c: Convention) -> i32 {
        match c {
            Convention::PyTorch => 0,
            Convention::NormMattersCode => 1,
        }
    }
    /// The running statistics are usable for this plan in `mode` (the CPU path's rules).
    pub fn check_running(&self, mode: Mode, running: Option<&RunningStats>) -> Result<()> {
        if let Some(r) = running {
            r.validate(self.layout.channels())?;
            if mode == Mode::Train && self.kind == 1 && self.geo.m == 1 && r.convention == Convention::PyTorch {
                return Err(NormError::Unsupported {
                    what: format!("an unbiased running variance over m = {} element per channel", self.geo.m),
                    why: "m / (m - 1) is undefined: use a batch with N·H·W >= 2".into(),
                }
                .into());
            }
        } else if mode == Mode::Eval {
            return Err(NormError::Unsupported {
                what: "eval mode without running statistics".into(),
                why: "eval normalizes with the running statistics: pass Some(&mut RunningStats)".into(),
            }
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_chunks() {
        let p = plan_batch(&BatchNorm::Spec(NormSpec::topk(5, 1e-5)), Storage::F16, Layout::Nchw { n: 256, c: 64, h: 56, w: 56 }, &BatchTuning::DEFAULT, &Device::H100).unwrap();
        assert_eq!(p.stats1, "nl_bn_stats_sum_nchw_f16");
        assert_eq!(p.stats2.as_deref(), Some("nl_bn_stats2_topk_nchw_f16"));
        assert_eq!(p.cut.as_deref(), Some("nl_bn_cut_f16"));
        assert_eq!((p.reduce_train.as_str(), p.reduce_eval.as_str()), ("nl_bn_reduce_sel_nchw_f16", "nl_bn_reduce_plain_nchw_f16"));
        assert_eq!((p.dx_train.as_str(), p.dx_eval.as_str()), ("nl_bn_dx_sel_f16", "nl_bn_dx_eval_f16"));
        assert_eq!(p.geo.m, 802816);
        assert_eq!(p.geo.chunk, 25088);
        assert_eq!(p.geo.nchunks, 32);
        let t = plan_batch(&BatchNorm::Spec(NormSpec::topk(5, 1e-5)), Storage::F16, Layout::Nchw { n: 32, c: 64, h: 28, w: 28 }, &BatchTuning::DEFAULT, &Device::H100).unwrap();
        assert_eq!((t.geo.chunk, t.geo.nchunks), (2048, 13));
        let t = plan_batch(&BatchNorm::Spec(NormSpec::topk(5, 1e-5)), Storage::F16, Layout::Nchw { n: 256, c: 64, h: 112, w: 112 }, &BatchTuning::DEFAULT, &Device::H100).unwrap();
        assert_eq!((t.geo.chunk, t.geo.nchunks), (32768, 98));
        assert_eq!(p.grid_items, 132 * 8);
        let l = plan_batch(&BatchNorm::Spec(NormSpec::layer(1e-5)), Storage::F16, Layout::Nchw { n: 256, c: 64, h: 56, w: 56 }, &BatchTuning::DEFAULT, &Device::H100).unwrap();
        assert_eq!((l.geo.chunk, l.geo.nchunks), (3136, 256));
        let names = batch_names();
        for n in [&p.stats1, p.stats2.as_ref().unwrap(), &p.apply, &p.reduce_train, &p.dx_train, &p.bwd_finalize] {
            assert!(names.contains(n), "{n}");
        }
        let q = plan_batch(&BatchNorm::MeanOnly, Storage::BF16, Layout::Nc { n: 3, c: 5 }, &BatchTuning::tiny(1), &Device::A100).unwrap();
        assert_eq!((q.geo.chunk, q.geo.nchunks), (8, 1));
        assert_eq!((q.stats1.as_str(), q.dx_train.as_str(), q.dx_eval.as_str()), ("nl_bn_stats_sum_nc_bf16", "nl_bn_dx_mean_bf16", "nl_bn_dx_mean_bf16"));
    }

    #[test]
    fn typed_errors() {
        let l = Layout::Nchw { n: 2, c: 3, h: 4, w: 5 };
        let e = plan_batch(&BatchNorm::Spec(NormSpec::topk(33, 0.0)), Storage::F16, l, &BatchTuning::DEFAULT, &Device::H100).unwrap_err();
        assert_eq!(e, KernelError::TopKTooLarge { k: 33, max: 32 });
        let e = plan_batch(&BatchNorm::Spec(NormSpec::topk(41, 0.0)), Storage::F16, l, &BatchTuning::DEFAULT, &Device::H100).unwrap_err();
        assert_eq!(e, KernelError::Norm(NormError::InvalidK { k: 41, n: 40 }));
        let e = plan_batch(&BatchNorm::Spec(NormSpec::l1(1e-5)), Storage::F16, Layout::Nc { n: 0, c: 3 }, &BatchTuning::DEFAULT, &Device::H100).unwrap_err();
        assert!(matches!(e, KernelError::Norm(NormError::Empty { .. })), "{e}");
        let big = Layout::Nchw { n: 1 << 16, c: 1, h: 1 << 8, w: 1 << 8 };
        let e = plan_batch(&BatchNorm::MeanOnly, Storage::F16, big, &BatchTuning::DEFAULT, &Device::H100).unwrap_err();
        assert!(matches!(e, KernelError::TooLarge { bits: 31, .. }) && e.to_string().contains("4294967296"), "{e}");
        let e = plan_batch(&BatchNorm::Spec(NormSpec::l1(-1.0)), Storage::F16, l, &BatchTuning::DEFAULT, &Device::H100).unwrap_err();
        assert!(e.to_string().contains("-1"), "{e}");
    }
}
