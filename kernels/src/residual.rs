//! Host side of the fused residual updates (`src/cuda/residual.cu`): the kernel names, the
//! `#[repr(C)]` parameter structs, the saved per-row statistics, and launch planning with typed
//! errors, shared by the CPU emulation ([`crate::cpu::update`]) and the GPU runtime.
//!
//! | update | forward | reference |
//! |---|---|---|
//! | [`Update::Ngpt`] | `y = Norm(h + a (Norm(b) - h))`, `Norm(x) = x / max(‖x‖, eps)` | `normlab_norms::residual::ngpt_forward` |
//! | [`Update::Angpt`] | `y = ν(a) (h + a (b - h))`, `ν(a) = (1 - 2a + 2a²)^(-1/2)` | `normlab_norms::residual::angpt_forward` |
//!
//! `a` is fp32, of length `d` (per dimension) or 1 (scalar); the backward returns `dh`, `db` in
//! the storage type and `da` in fp32 (per-block partials summed in block order by
//! [`FINALIZE_KERNEL`]).
//!
//! | rows of d elements | mapping | threads per block | rows per block at a time |
//! |---|---|---|---|
//! | d <= 1024 | warp per row | 128 | 4 |
//! | d > 1024 | block per row | `min(512, 32 ceil(d / 256))` (at least 64) | 1 |
//!
//! Shared memory per block: `a` as fp32 (`4 row_slots(d)` bytes), then per row group the staged
//! rows in the storage type (nGPT: h, b in the forward; h, b, dy in the backward; anGPT: none)
//! and, in a backward with `da`, an fp32 accumulator (`4 row_slots(d)`).

use std::ffi::c_void;

use normlab_norms::NormError;

use crate::error::{KernelError, Result};
use crate::list::{Direction, Mapping, Storage};
use crate::plan::{row_slots, Device, BLOCK_THREADS_MAX, VEC, WARP_MAX_N, WARP_THREADS};

/// The da finalize kernel (fp32 partials -> fp32, block order).
pub const FINALIZE_KERNEL: &str = "nl_update_finalize";
/// Threads per block of [`FINALIZE_KERNEL`].
pub const FINALIZE_THREADS: u32 = 256;

/// Which fused update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Update {
    /// nGPT: `Norm(h + a (Norm(b) - h))` (algorithms.md 1.3 steps 6 and 10).
    Ngpt,
    /// anGPT: `ν(a) (h + a (b - h))` (algorithms.md 2.4).
    Angpt,
}

impl Update {
    pub const ALL: [Update; 2] = [Update::Ngpt, Update::Angpt];
    pub fn name(self) -> &'static str {
        match self {
            Update::Ngpt => "ngpt",
            Update::Angpt => "angpt",
        }
    }
    /// Rows of the storage type each row group stages in shared memory.
    fn staged_rows(self, dir: Direction) -> usize {
        match (self, dir) {
            (Update::Ngpt, Direction::Forward) => 2,
            (Update::Ngpt, Direction::Backward) => 3,
            (Update::Angpt, _) => 0,
        }
    }
}

/// One update kernel instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UpdateKernel {
    pub update: Update,
    pub dir: Direction,
    pub storage: Storage,
    pub mapping: Mapping,
}

impl UpdateKernel {
    pub fn name(&self) -> String {
        let d = match self.dir {
            Direction::Forward => "fwd",
            Direction::Backward => "bwd",
        };
        let m = match self.mapping {
            Mapping::Warp => "warp",
            Mapping::Block => "block",
        };
        format!("nl_update_{}_{}_{}_{}", self.update.name(), d, self.storage.name(), m)
    }
}

/// Every update kernel (without the finalize kernel).
pub fn update_kernels() -> Vec<UpdateKernel> {
    let mut v = Vec::new();
    for storage in Storage::ALL {
        for update in Update::ALL {
            for dir in [Direction::Forward, Direction::Backward] {
                for mapping in [Mapping::Warp, Mapping::Block] {
                    v.push(UpdateKernel { update, dir, storage, mapping });
                }
            }
        }
    }
    v
}

/// The nGPT forward's statistics of one row (16 bytes, `float4` in the kernel): what the
/// backward needs to recompute `B = Norm(b)`, `r` and `y` with the same operations.
///
/// - `b_rscale`: `1/max(‖b‖, eps)` of the row scaled by `2^-b_exp2()`;
/// - `r_rscale`: `1/max(‖r‖, eps)` of `r` scaled by `2^-(r_prescale() + r_exp2())`;
/// - `b_meta = b_exp2 * 2 + clamped`, `r_meta = ((r_exp2 * 256 + r_prescale) * 2 + clamped)`.
///
/// A row with a non-finite input (or a non-finite `a`) has NaN reciprocals.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UpdateStats {
    pub b_rscale: f32,
    pub r_rscale: f32,
    pub b_meta: i32,
    pub r_meta: i32,
}

impl UpdateStats {
    pub fn b_exp2(&self) -> i32 {
        self.b_meta >> 1
    }
    pub fn b_clamped(&self) -> bool {
        self.b_meta & 1 != 0
    }
    /// `q`: r was formed as `r 2^-q` (0 unless `max |(1 - a) h| >= 2^100`).
    pub fn r_prescale(&self) -> i32 {
        (self.r_meta >> 1) & 255
    }
    pub fn r_exp2(&self) -> i32 {
        (self.r_meta >> 1) >> 8
    }
    pub fn r_clamped(&self) -> bool {
        self.r_meta & 1 != 0
    }
    /// `max(‖b‖, eps)` as the kernel computed it.
    pub fn b_denominator(&self) -> f64 {
        2f64.powi(self.b_exp2()) / self.b_rscale as f64
    }
    /// `max(‖r‖, eps)` as the kernel computed it.
    pub fn r_denominator(&self) -> f64 {
        2f64.powi(self.r_prescale() + self.r_exp2()) / self.r_rscale as f64
    }
}

/// `nlr::UpdFwdParams` (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UpdFwdParams {
    pub h: *const c_void,
    pub b: *const c_void,
    pub a: *const f32,
    /// May equal `h` (in place).
    pub y: *mut c_void,
    /// nGPT only, optional (null).
    pub stats: *mut UpdateStats,
    pub rows: i64,
    pub d: i32,
    pub a_len: i32,
    pub eps: f32,
    pub vec_ok: i32,
}

/// `nlr::UpdBwdParams` (88 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UpdBwdParams {
    pub h: *const c_void,
    pub b: *const c_void,
    pub a: *const f32,
    pub dy: *const c_void,
    /// nGPT: the forward's (anGPT ignores it).
    pub stats: *const UpdateStats,
    /// May equal `dy` or `h`.
    pub dh: *mut c_void,
    /// May equal `b`.
    pub db: *mut c_void,
    /// Optional: `[grid][a_len]` fp32 partials of da.
    pub da_part: *mut f32,
    pub rows: i64,
    pub d: i32,
    pub a_len: i32,
    pub vec_ok: i32,
}

/// `nlr::UpdFinalizeParams` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UpdFinalizeParams {
    pub part: *const f32,
    pub out: *mut f32,
    pub nparts: i32,
    pub n: i32,
}

/// Whether the kernels may use 16-byte vectors: every row buffer at the same address modulo 16
/// and `d % 8 == 0` (then every row starts at the same offset; the kernel checks it too).
pub fn vec_ok(d: usize, addrs: &[usize]) -> bool {
    d.is_multiple_of(VEC) && addrs.iter().all(|&a| a % 16 == addrs[0] % 16)
}

/// A validated update launch.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdatePlan {
    pub kernel: String,
    pub mapping: Mapping,
    pub grid: u32,
    pub block: u32,
    pub smem: usize,
    pub d: i32,
    pub a_len: i32,
    /// nGPT's eps in fp32 (0 for anGPT).
    pub eps: f32,
    /// The backward's da finalize (when da is wanted).
    pub finalize: Option<&'static str>,
    pub finalize_grid: u32,
}

/// Plan a forward or backward launch over `rows` rows of `d` elements with `a_len` coefficients
/// (1 or d). Typed errors name the value: `d = 0`, `a_len` not 1 or d, eps negative, not finite
/// or beyond fp32 (nGPT), `d` beyond i32, shared memory beyond the device's limit.
#[allow(clippy::too_many_arguments)]
pub fn plan_update(
    update: Update,
    storage: Storage,
    dir: Direction,
    rows: usize,
    d: usize,
    a_len: usize,
    eps: f64,
    want_da: bool,
    device: &Device,
) -> Result<UpdatePlan> {
    if d == 0 {
        return Err(NormError::Empty { what: "the update width d", value: d }.into());
    }
    if a_len != 1 && a_len != d {
        return Err(NormError::Length { what: "a (one value, or one per dimension)", expected: d, got: a_len }.into());
    }
    if d > i32::MAX as usize {
        return Err(KernelError::TooLarge { what: "d", value: d, bits: 31 });
    }
    if rows > i64::MAX as usize {
        return Err(KernelError::TooLarge { what: "rows", value: rows, bits: 63 });
    }
    let eps32 = match update {
        Update::Ngpt => {
            if !eps.is_finite() || eps < 0.0 {
                return Err(NormError::InvalidEps { eps }.into());
            }
            let e = eps as f32;
            if !e.is_finite() || (eps > 0.0 && e == 0.0) {
                return Err(KernelError::EpsNotF32 { eps });
            }
            e
        }
        Update::Angpt => 0.0,
    };
    let mapping = if d <= WARP_MAX_N { Mapping::Warp } else { Mapping::Block };
    let (block, groups) = match mapping {
        Mapping::Warp => (WARP_THREADS, (WARP_THREADS / 32) as usize),
        Mapping::Block => ((32 * d.div_ceil(32 * VEC)).min(BLOCK_THREADS_MAX as usize).max(64) as u32, 1),
    };
    let slots = row_slots(d);
    let want_da = want_da && dir == Direction::Backward;
    let per_group = update.staged_rows(dir) * 2 * slots + if want_da { 4 * slots } else { 0 };
    let smem = 4 * slots + groups * per_group;
    if smem > device.smem_per_block {
        return Err(KernelError::RowTooWide { n: d, needed: smem, limit: device.smem_per_block });
    }
    let blocks_needed = rows.div_ceil(groups).max(1);
    let grid = blocks_needed.min((device.sm_count * device.blocks_per_sm) as usize) as u32;
    let id = UpdateKernel { update, dir, storage, mapping };
    Ok(UpdatePlan {
        kernel: id.name(),
        mapping,
        grid,
        block,
        smem,
        d: d as i32,
        a_len: a_len as i32,
        eps: eps32,
        finalize: want_da.then_some(FINALIZE_KERNEL),
        finalize_grid: a_len.div_ceil(FINALIZE_THREADS as usize).clamp(1, 65535) as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn layouts_are_those_of_the_cuda_structs() {
        assert_eq!((size_of::<UpdFwdParams>(), align_of::<UpdFwdParams>()), (64, 8));
        assert_eq!((offset_of!(UpdFwdParams, rows), offset_of!(UpdFwdParams, d), offset_of!(UpdFwdParams, vec_ok)), (40, 48, 60));
        assert_eq!((size_of::<UpdBwdParams>(), align_of::<UpdBwdParams>()), (88, 8));
        assert_eq!((offset_of!(UpdBwdParams, rows), offset_of!(UpdBwdParams, vec_ok)), (64, 80));
        assert_eq!((size_of::<UpdFinalizeParams>(), offset_of!(UpdFinalizeParams, nparts)), (24, 16));
        assert_eq!(size_of::<UpdateStats>(), 16);
    }

    #[test]
    fn stats_fields_decode() {
        let s = UpdateStats { b_rscale: 0.5, r_rscale: 0.25, b_meta: -31 * 2 + 1, r_meta: ((-3 * 256 + 7) * 2) };
        assert_eq!((s.b_exp2(), s.b_clamped(), s.r_prescale(), s.r_exp2(), s.r_clamped()), (-31, true, 7, -3, false));
        assert_eq!(s.b_denominator(), 2f64.powi(-31) * 2.0);
        assert_eq!(s.r_denominator(), 2f64.powi(4) * 4.0);
    }

    #[test]
    fn mapping_grid_and_shared_memory() {
        let p = plan_update(Update::Ngpt, Storage::F16, Direction::Forward, 10, 1024, 1024, 1e-12, false, &Device::H100).unwrap();
        assert_eq!((p.mapping, p.block, p.grid), (Mapping::Warp, 128, 3));
        assert_eq!(p.smem, 4 * 1032 + 4 * 2 * 2 * 1032);
        assert_eq!(p.kernel, "nl_update_ngpt_fwd_f16_warp");
        let p = plan_update(Update::Ngpt, Storage::BF16, Direction::Backward, 1 << 20, 4096, 1, 1e-12, true, &Device::H100).unwrap();
        assert_eq!((p.mapping, p.block, p.grid, p.finalize, p.finalize_grid), (Mapping::Block, 512, 132 * 8, Some(FINALIZE_KERNEL), 1));
        assert_eq!(p.smem, 4 * 4104 + 3 * 2 * 4104 + 4 * 4104);
        let p = plan_update(Update::Angpt, Storage::F16, Direction::Backward, 3, 1025, 1025, 0.0, false, &Device::A100).unwrap();
        assert_eq!((p.mapping, p.block, p.finalize, p.smem), (Mapping::Block, 160, None, 4 * 1040));
        assert_eq!(p.kernel, "nl_update_angpt_bwd_f16_block");
        assert!(vec_ok(64, &[16, 48, 4096]) && !vec_ok(60, &[16, 48]) && !vec_ok(64, &[16, 50]));
    }

    #[test]
    fn typed_errors_name_the_value() {
        let dev = Device::H100;
        let e = plan_update(Update::Ngpt, Storage::F16, Direction::Forward, 1, 0, 1, 1e-12, false, &dev).unwrap_err();
        assert!(matches!(e, KernelError::Norm(NormError::Empty { .. })), "{e}");
        let e = plan_update(Update::Angpt, Storage::F16, Direction::Forward, 1, 8, 3, 0.0, false, &dev).unwrap_err();
        assert!(e.to_string().contains("expected length 8, got 3"), "{e}");
        let e = plan_update(Update::Ngpt, Storage::F16, Direction::Forward, 1, 8, 8, -1.0, false, &dev).unwrap_err();
        assert!(e.to_string().contains("-1"), "{e}");
        let e = plan_update(Update::Ngpt, Storage::F16, Direction::Forward, 1, 8, 8, 1e300, false, &dev).unwrap_err();
        assert!(matches!(e, KernelError::EpsNotF32 { .. }), "{e}");
        let e = plan_update(Update::Ngpt, Storage::F16, Direction::Forward, 1, 8, 8, 1e-50, false, &dev).unwrap_err();
        assert!(matches!(e, KernelError::EpsNotF32 { .. }), "{e}");
        // 14 bytes per element of d in the nGPT backward with da: too wide above ~16.6k on H100.
        let e = plan_update(Update::Ngpt, Storage::BF16, Direction::Backward, 1, 20000, 20000, 1e-12, true, &dev).unwrap_err();
        assert!(matches!(e, KernelError::RowTooWide { n: 20000, .. }), "{e}");
        assert!(plan_update(Update::Ngpt, Storage::BF16, Direction::Backward, 1, 16000, 16000, 1e-12, true, &dev).is_ok());
    }
}
