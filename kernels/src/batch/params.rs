//! `#[repr(C)]` parameter structs of the batch-norm kernels, the same layout as `nlb::*Params`
//! in `src/cuda/batchnorm.cu` (sizes checked by tests), and the per-channel state the forward
//! saves for the backward.

use std::ffi::c_void;

use crate::params::KernelStats;

/// Layout and chunking of one launch (`nlb::Geo`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Geo {
    pub n: i64,
    pub c: i64,
    /// `H * W` (1 for `[N, C]`).
    pub hw: i64,
    /// Positions per channel, `N * H * W`.
    pub m: i64,
    /// Positions per chunk (a multiple of 8).
    pub chunk: i64,
    pub nchunks: i32,
    /// 16-byte vectors allowed for this launch's pointers (see `plan`).
    pub vec: i32,
    /// `1 / hw`, `1 / c`, `1 / nchunks` rounded to f64: the kernels divide 64-bit indices by an
    /// f64 multiplication with an exact integer correction (a 64-bit integer division is a
    /// subroutine call in PTX, whose calling convention spills registers).
    pub rhw: f64,
    pub rc: f64,
    pub rnch: f64,
}

/// stats1 record (`nlb::Rec1`, 32 bytes): opaque to the host.
pub const REC1_BYTES: usize = 32;
/// Backward record (`nlb::RecB`, 32 bytes).
pub const RECB_BYTES: usize = 32;

/// Per-channel selection of L-inf and Top-k (`nlb::Aux`): the threshold `t` (the k-th largest
/// `|z|` in the scaled channel, fp32), the chunk and rank of the last selected element equal to
/// `t`, how many elements equal to `t` are selected, and its channel position `cut`. Selected:
/// `|z| > t`, or `|z| == t` and position `<= cut`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Aux {
    pub t: f32,
    pub chunk: i32,
    pub rank: i32,
    pub needed: i32,
    pub cut: i64,
}

/// What the forward saves for the backward: per-channel statistics (the meaning of
/// normlab-norms' `RowStats`: batch statistics in train mode, the frozen running statistics in
/// eval mode) and, for L-inf and Top-k in train mode, the selection.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Saved {
    pub stats: Vec<KernelStats>,
    pub aux: Vec<Aux>,
}

impl Saved {
    pub fn new(channels: usize) -> Self {
        Saved { stats: vec![KernelStats::default(); channels], aux: vec![Aux::default(); channels] }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Stats1Params {
    pub x: *const c_void,
    pub rec: *mut c_void,
    pub g: Geo,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Stats2Params {
    pub x: *const c_void,
    pub stats: *const KernelStats,
    pub out: *mut c_void,
    pub g: Geo,
    pub k: i32,
    pub pad: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Fin1Params {
    pub rec: *const c_void,
    pub stats: *mut KernelStats,
    pub aux: *mut Aux,
    pub run_mean: *mut f64,
    pub run_spread: *mut f64,
    pub g: Geo,
    pub eps: f64,
    pub c: f64,
    pub a: f64,
    pub kind: i32,
    pub centred: i32,
    pub conv: i32,
    pub final_pass: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Fin2Params {
    pub part: *const c_void,
    pub stats: *mut KernelStats,
    pub aux: *mut Aux,
    pub run_spread: *mut f64,
    pub g: Geo,
    pub eps: f64,
    pub c: f64,
    pub a: f64,
    pub kind: i32,
    pub conv: i32,
    pub k: i32,
    pub pad: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FrozenParams {
    pub run_mean: *const f64,
    pub run_spread: *const f64,
    pub stats: *mut KernelStats,
    pub c: i64,
    pub eps: f64,
    pub kind: i32,
    pub centred: i32,
    pub conv: i32,
    pub pad: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CutParams {
    pub x: *const c_void,
    pub stats: *const KernelStats,
    pub aux: *mut Aux,
    pub g: Geo,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ApplyParams {
    pub x: *const c_void,
    pub y: *mut c_void,
    pub stats: *const KernelStats,
    pub weight: *const c_void,
    pub bias: *const c_void,
    pub g: Geo,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RedParams {
    pub x: *const c_void,
    pub dy: *const c_void,
    pub stats: *const KernelStats,
    pub aux: *const Aux,
    pub rec: *mut c_void,
    pub g: Geo,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BFinParams {
    pub rec: *const c_void,
    pub stats: *const KernelStats,
    pub weight: *const c_void,
    pub dweight: *mut c_void,
    pub dbias: *mut c_void,
    /// `[C]` pairs (k1, mean of dz) for the dx kernel.
    pub coef: *mut [f32; 2],
    pub g: Geo,
    pub c: f64,
    pub kind: i32,
    pub centred: i32,
    pub k: i32,
    pub eval: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DxParams {
    pub x: *const c_void,
    pub dy: *const c_void,
    pub stats: *const KernelStats,
    pub aux: *const Aux,
    pub weight: *const c_void,
    pub coef: *const [f32; 2],
    pub dx: *mut c_void,
    pub g: Geo,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn layouts_match_the_kernel_structs() {
        assert_eq!(size_of::<Geo>(), 72);
        assert_eq!(size_of::<Aux>(), 24);
        assert_eq!(size_of::<Stats1Params>(), 16 + 72);
        assert_eq!(size_of::<Stats2Params>(), 24 + 72 + 8);
        assert_eq!(size_of::<Fin1Params>(), 40 + 72 + 24 + 16);
        assert_eq!(size_of::<Fin2Params>(), 32 + 72 + 24 + 16);
        assert_eq!(size_of::<FrozenParams>(), 24 + 16 + 16);
        assert_eq!(size_of::<CutParams>(), 24 + 72);
        assert_eq!(size_of::<ApplyParams>(), 40 + 72);
        assert_eq!(size_of::<RedParams>(), 40 + 72);
        assert_eq!(size_of::<BFinParams>(), 48 + 72 + 8 + 16);
        assert_eq!(size_of::<DxParams>(), 56 + 72);
    }
}
