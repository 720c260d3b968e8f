//! Host-side launch planning, shared by the CPU emulation and a GPU runtime: validates the
//! request (typed errors, never a bad launch), picks the thread mapping, grid and shared memory.
//!
//! | rows of n elements | mapping | threads per block | rows per block at a time |
//! |---|---|---|---|
//! | n <= 1024 | warp per row | 128 (4 warps) | 4 |
//! | n > 1024 | block per row | forward min(512, 32 * ceil(n / 512)), backward min(512, 32 * ceil(n / 256)) | 1 |
//!
//! A forward block has a thread per two 16-byte vectors of its row, a backward block one per
//! vector ([`reg_vecs`]), so that the kernels' register paths (rows of whole vectors) hold a row
//! in those vectors per thread. In the forward, 16 elements a thread halve the per-row
//! reductions' instructions per element against 8, which on an H200 bounded the forward at 72%
//! of copy bandwidth (README "CUDA kernels on an H200"); the backward holds x and dy of two
//! rows, and at 2 vectors needed 96 registers.
//!
//! The grid is persistent: at most `sm_count * blocks_per_sm` blocks loop over the rows with a
//! grid stride. Shared memory holds the staged row(s) in the storage type
//! (`row_slots(n) = 8 * ceil((n + 8) / 8)` elements per row: up to 7 head elements are shifted so
//! that 16-byte vectors stay aligned) and, in the backward with weight/bias gradients, two fp32
//! accumulators of n per row group. The weight/bias gradients are reproducible bit for bit for
//! a given grid (their partials are per block and summed in block order), so a given device
//! always gives the same bits.

use normlab_norms::{NormKind, NormSpec};

use crate::error::{KernelError, Result};
use crate::list::{finalize_name, kind_name, Direction, FwdVariant, KernelId, Mapping, Storage, VariantId};

/// Largest k of the register top-k (`nl::TOPK_MAX`). Above it the plan is an error.
pub const TOPK_MAX: usize = 32;
/// Rows up to this length get a warp each.
pub const WARP_MAX_N: usize = 1024;
/// Threads per block of the warp-per-row kernels (`NL_WARP_THREADS`).
pub const WARP_THREADS: u32 = 128;
/// Most threads per block of the block-per-row kernels (`NL_BLOCK_THREADS_MAX`).
pub const BLOCK_THREADS_MAX: u32 = 512;
/// 16-byte vectors of a row each thread of a block kernel holds in registers (`nl::FWD_REG_VECS`,
/// `nl::BWD_REG_VECS`): the block kernels get 32 * ceil(n / (32 * VEC * this)) threads.
pub const fn reg_vecs(dir: Direction) -> usize {
    match dir {
        Direction::Forward => 2,
        Direction::Backward => 1,
    }
}
/// Elements per 16-byte vector.
pub const VEC: usize = 8;
/// Threads per block of the finalize kernel.
pub const FINALIZE_THREADS: u32 = 256;

/// What the plan needs to know about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    pub sm_count: u32,
    pub blocks_per_sm: u32,
    /// Largest dynamic shared memory per block (opt-in limit).
    pub smem_per_block: usize,
}

impl Device {
    /// H100 SXM: 132 SMs, 227 KiB opt-in shared memory per block.
    pub const H100: Device = Device { sm_count: 132, blocks_per_sm: 8, smem_per_block: 227 * 1024 };
    /// A100: 108 SMs, 163 KiB opt-in shared memory per block.
    pub const A100: Device = Device { sm_count: 108, blocks_per_sm: 8, smem_per_block: 163 * 1024 };
    /// The CPU emulator: a small persistent grid (so that the grid-stride loops run more than
    /// once per block in tests) and the H100's shared memory limit.
    pub fn emulator(max_blocks: u32) -> Device {
        Device { sm_count: max_blocks.max(1), blocks_per_sm: 1, smem_per_block: 227 * 1024 }
    }
}

/// Shared-memory elements per staged row.
pub fn row_slots(n: usize) -> usize {
    (n + 2 * VEC - 1) / VEC * VEC
}

/// A validated launch.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    pub kernel: String,
    pub mapping: Mapping,
    pub grid: u32,
    pub block: u32,
    pub smem: usize,
    pub n: i32,
    pub centred: bool,
    /// Scale constant C in fp32.
    pub c: f32,
    pub eps: f32,
    pub k: i32,
    /// Finalize kernel for weight/bias gradients (backward with dweight or dbias).
    pub finalize: Option<String>,
    pub finalize_grid: u32,
}

/// Plan a forward or backward launch over `rows` rows of `n` elements.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    spec: &NormSpec,
    storage: Storage,
    dir: Direction,
    rows: usize,
    n: usize,
    want_dw: bool,
    want_db: bool,
    device: &Device,
) -> Result<LaunchPlan> {
    spec.validate(n)?;
    let k = match spec.kind {
        NormKind::TopK { k } if k > TOPK_MAX => return Err(KernelError::TopKTooLarge { k, max: TOPK_MAX }),
        NormKind::TopK { k } => k as i32,
        _ => 0,
    };
    if n > i32::MAX as usize {
        return Err(KernelError::TooLarge { what: "n", value: n, bits: 31 });
    }
    if rows > i64::MAX as usize {
        return Err(KernelError::TooLarge { what: "rows", value: rows, bits: 63 });
    }
    let eps = spec.eps as f32;
    if !eps.is_finite() {
        return Err(KernelError::EpsNotF32 { eps: spec.eps });
    }
    let c = spec.scale_constant(n)? as f32;
    let mapping = if n <= WARP_MAX_N { Mapping::Warp } else { Mapping::Block };
    let (block, groups) = match mapping {
        Mapping::Warp => (WARP_THREADS, (WARP_THREADS / 32) as usize),
        Mapping::Block => ((32 * n.div_ceil(32 * VEC * reg_vecs(dir))).min(BLOCK_THREADS_MAX as usize).max(64) as u32, 1),
    };
    let slots = row_slots(n);
    let per_group = match dir {
        Direction::Forward => slots * 2,
        // Rounded to 16 bytes (as the kernel does) so each group's rows stay vector-aligned.
        Direction::Backward => (2 * slots * 2 + if want_dw { 4 * n } else { 0 } + if want_db { 4 * n } else { 0 }).div_ceil(16) * 16,
    };
    let smem = per_group * groups;
    if smem > device.smem_per_block {
        return Err(KernelError::RowTooWide { n, needed: smem, limit: device.smem_per_block });
    }
    let blocks_needed = rows.div_ceil(groups).max(1);
    let grid = blocks_needed.min((device.sm_count * device.blocks_per_sm) as usize) as u32;
    let id = KernelId { kind: kind_name(spec.kind), dir, storage, mapping };
    let finalize = (dir == Direction::Backward && (want_dw || want_db)).then(|| finalize_name(storage));
    Ok(LaunchPlan {
        kernel: id.name(),
        mapping,
        grid,
        block,
        smem,
        n: n as i32,
        centred: spec.centred,
        c,
        eps,
        k,
        finalize,
        finalize_grid: n.div_ceil(FINALIZE_THREADS as usize).min(65535) as u32,
    })
}

/// Plan a forward-variant launch (`nl::FwdVarParams`): the forward's plan (same mapping, grid
/// and shared memory) with the variant's kernel.
///
/// - `Pure`: `eps` and `c` are rounded to the storage type here, exactly as normlab-norms'
///   pure accumulators round them (`PureF16::from_f64` and `PureBf16::from_f64` are
///   [`normlab_norms::Element::from_f64`]: rounded once to nearest), so that the kernel starts
///   from the same values as the CPU path.
/// - `E4M3`: `out_scale` must be finite and positive ([`KernelError::InvalidScale`]).
#[allow(clippy::too_many_arguments)]
pub fn plan_variant(
    spec: &NormSpec,
    storage: Storage,
    variant: FwdVariant,
    rows: usize,
    n: usize,
    out_scale: f32,
    device: &Device,
) -> Result<LaunchPlan> {
    let mut p = plan(spec, storage, Direction::Forward, rows, n, false, false, device)?;
    match variant {
        FwdVariant::Pure => {
            let c = spec.scale_constant(n)?;
            p.eps = round_to(storage, spec.eps);
            p.c = round_to(storage, c);
        }
        FwdVariant::E4M3 => {
            if !(out_scale.is_finite() && out_scale > 0.0) {
                return Err(KernelError::InvalidScale { scale: out_scale });
            }
        }
    }
    p.kernel = VariantId { kind: kind_name(spec.kind), storage, variant, mapping: p.mapping }.name();
    Ok(p)
}

/// `v` rounded to the storage type as normlab-norms' pure accumulators round constants, widened.
pub fn round_to(storage: Storage, v: f64) -> f32 {
    match storage {
        Storage::F16 => <half::f16 as normlab_norms::Element>::from_f64(v).to_f32(),
        Storage::BF16 => <half::bf16 as normlab_norms::Element>::from_f64(v).to_f32(),
    }
}
