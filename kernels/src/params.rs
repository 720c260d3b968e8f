//! Kernel parameter structs (`#[repr(C)]`, the same layout as `nl::FwdParams` etc. in
//! rownorm.cu) and the per-row statistics the forward saves.

use normlab_norms::{Counters, RowStats};
use std::ffi::c_void;

/// fp32 statistics of one row as saved by the forward kernel: the same meaning as
/// normlab-norms' [`RowStats`]: `x̂ = ((x * 2^-exp2 - mean_hi) - mean_lo) * rscale`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KernelStats {
    pub mean_hi: f32,
    pub mean_lo: f32,
    pub rscale: f32,
    /// `exp2 * 2 + clamped` (unit-L2 clamp flag in the low bit).
    pub meta: i32,
}

impl KernelStats {
    pub fn exp2(&self) -> i32 {
        self.meta >> 1
    }
    pub fn clamped(&self) -> bool {
        self.meta & 1 != 0
    }
    pub fn to_row_stats(&self) -> RowStats {
        RowStats {
            mean_hi: self.mean_hi as f64,
            mean_lo: self.mean_lo as f64,
            rscale: self.rscale as f64,
            exp2: self.exp2(),
            clamped: self.clamped(),
        }
    }
    /// Statistics of the CPU path, narrowed to fp32 (for a backward kernel after a CPU forward).
    pub fn from_row_stats(s: &RowStats) -> Self {
        KernelStats {
            mean_hi: s.mean_hi as f32,
            mean_lo: s.mean_lo as f32,
            rscale: s.rscale as f32,
            meta: s.exp2 * 2 + s.clamped as i32,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FwdParams {
    pub x: *const c_void,
    pub y: *mut c_void,
    pub weight: *const c_void,
    pub bias: *const c_void,
    pub stats: *mut KernelStats,
    pub rows: i64,
    pub n: i32,
    pub centred: i32,
    pub eps: f32,
    pub c: f32,
    pub k: i32,
    pub vec_ok: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BwdParams {
    pub x: *const c_void,
    pub dy: *const c_void,
    pub stats: *const KernelStats,
    pub weight: *const c_void,
    pub dx: *mut c_void,
    pub dw_part: *mut f32,
    pub db_part: *mut f32,
    pub rows: i64,
    pub n: i32,
    pub centred: i32,
    pub c: f32,
    pub k: i32,
    pub vec_ok: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FinalizeParams {
    pub part: *const f32,
    pub out: *mut c_void,
    pub nparts: i32,
    pub n: i32,
}

/// Per-row counters of the pure-half forward (`nl::RowCounts`), with the meaning of
/// normlab-norms' [`Counters`]: non-finite inputs, 1 if the statistics overflowed although every
/// input was finite, non-finite outputs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowCounts {
    pub nonfinite_in: u32,
    pub acc_overflow: u32,
    pub nonfinite_out: u32,
    pub reserved: u32,
}

impl RowCounts {
    pub fn to_counters(&self) -> Counters {
        Counters {
            nonfinite_in: self.nonfinite_in as u64,
            acc_overflow: self.acc_overflow as u64,
            nonfinite_out: self.nonfinite_out as u64,
        }
    }
    /// The sum over rows (integer adds: exact and order-free).
    pub fn total(rows: &[RowCounts]) -> Counters {
        rows.iter().map(RowCounts::to_counters).sum()
    }
}

/// Parameters of the forward variants (`nl::FwdVarParams`): pure-half accumulation and fp8
/// E4M3 output.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FwdVarParams {
    pub f: FwdParams,
    /// Pure variant: one [`RowCounts`] per row, or null.
    pub counts: *mut RowCounts,
    /// E4M3 variant: `y = round_e4m3(y_f32 * out_scale)`.
    pub out_scale: f32,
    pub reserved: i32,
}
