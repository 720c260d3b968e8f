//! Kernel arguments: the `#[repr(C)]` parameter structs of `normlab_kernels::params` filled
//! from a launch plan and device addresses, and their passing to `cuLaunchKernel`.
//!
//! Every row kernel takes ONE argument, its parameter struct by value (`nl::FwdParams p`), so
//! the launch passes a single pointer to the struct; the struct's size and alignment must be
//! those of the CUDA declaration, which tests/gpu_runtime.rs checks against the `.param`
//! declarations in NVRTC's PTX.
//!
//! `vec_ok` (16-byte vector path) is set when every row buffer of the launch has the same
//! address modulo 16, as the CPU emulation does: the kernels then align x, y (dy, dx) together.

use std::ffi::c_void;

use cudarc::driver::DeviceRepr;
use normlab_kernels::list::FwdVariant;
use normlab_kernels::params::{BwdParams, FinalizeParams, FwdParams, FwdVarParams, KernelStats, RowCounts};
use normlab_kernels::LaunchPlan;

/// A device address (`CUdeviceptr`).
pub type DevPtr = u64;

/// A parameter struct passed by value as a kernel's only argument.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct ParamArg<P: Copy>(pub P);

// SAFETY: the wrapped structs are `#[repr(C)]` plain data (integers, floats and device
// addresses) laid out as the kernels' parameter structs.
unsafe impl DeviceRepr for ParamArg<FwdParams> {}
unsafe impl DeviceRepr for ParamArg<BwdParams> {}
unsafe impl DeviceRepr for ParamArg<FinalizeParams> {}
unsafe impl DeviceRepr for ParamArg<FwdVarParams> {}

/// Buffers of a forward launch over `rows` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwdBuffers {
    pub rows: usize,
    pub x: DevPtr,
    pub y: DevPtr,
    pub weight: Option<DevPtr>,
    pub bias: Option<DevPtr>,
    /// One [`KernelStats`] (16 bytes) per row.
    pub stats: Option<DevPtr>,
}

/// Buffers of a backward launch. `dw_part` / `db_part` are `[grid][n]` fp32 partials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwdBuffers {
    pub rows: usize,
    pub x: DevPtr,
    pub dy: DevPtr,
    pub stats: DevPtr,
    pub weight: Option<DevPtr>,
    pub dx: DevPtr,
    pub dw_part: Option<DevPtr>,
    pub db_part: Option<DevPtr>,
}

/// A device address as a parameter struct's pointer field (also for the update and batch
/// families' structs).
pub(crate) fn ptr(a: DevPtr) -> *const c_void {
    a as usize as *const c_void
}
pub(crate) fn ptr_mut(a: DevPtr) -> *mut c_void {
    a as usize as *mut c_void
}
/// An optional address, null when absent.
pub(crate) fn opt(a: Option<DevPtr>) -> *const c_void {
    a.map_or(std::ptr::null(), ptr)
}

/// All addresses equal modulo 16.
pub fn congruent16(addrs: &[DevPtr]) -> bool {
    addrs.iter().all(|&a| a % 16 == addrs[0] % 16)
}

pub fn fwd_params(plan: &LaunchPlan, b: &FwdBuffers) -> FwdParams {
    FwdParams {
        x: ptr(b.x),
        y: ptr_mut(b.y),
        weight: opt(b.weight),
        bias: opt(b.bias),
        stats: b.stats.map_or(std::ptr::null_mut(), |s| s as usize as *mut KernelStats),
        rows: b.rows as i64,
        n: plan.n,
        centred: plan.centred as i32,
        eps: plan.eps,
        c: plan.c,
        k: plan.k,
        vec_ok: congruent16(&[b.x, b.y]) as i32,
    }
}

/// Parameters of a forward variant. `counts` (pure: one 16-byte `RowCounts` per row) may be
/// absent. The fp8 output rows (`E4M3`) are one byte per element: the 8-byte vector path needs
/// x / 2 and y congruent modulo 8 (`normlab_kernels::cpu::e4m3_vec_ok`).
pub fn fwd_var_params(plan: &LaunchPlan, b: &FwdBuffers, variant: FwdVariant, counts: Option<DevPtr>, out_scale: f32) -> FwdVarParams {
    let mut f = fwd_params(plan, b);
    if variant == FwdVariant::E4M3 {
        f.vec_ok = normlab_kernels::cpu::e4m3_vec_ok(b.x as usize, b.y as usize) as i32;
    }
    FwdVarParams { f, counts: counts.map_or(std::ptr::null_mut(), |a| a as usize as *mut RowCounts), out_scale, reserved: 0 }
}

pub fn bwd_params(plan: &LaunchPlan, b: &BwdBuffers) -> BwdParams {
    BwdParams {
        x: ptr(b.x),
        dy: ptr(b.dy),
        stats: b.stats as usize as *const KernelStats,
        weight: opt(b.weight),
        dx: ptr_mut(b.dx),
        dw_part: b.dw_part.map_or(std::ptr::null_mut(), |a| a as usize as *mut f32),
        db_part: b.db_part.map_or(std::ptr::null_mut(), |a| a as usize as *mut f32),
        rows: b.rows as i64,
        n: plan.n,
        centred: plan.centred as i32,
        c: plan.c,
        k: plan.k,
        vec_ok: congruent16(&[b.x, b.dy, b.dx]) as i32,
    }
}

pub fn finalize_params(part: DevPtr, out: DevPtr, nparts: usize, n: i32) -> FinalizeParams {
    FinalizeParams { part: part as usize as *const f32, out: ptr_mut(out), nparts: nparts as i32, n }
}

#[cfg(test)]
mod tests {
    use super::*;
    use normlab_kernels::list::{Direction, Storage};
    use normlab_kernels::plan::{plan, Device};
    use normlab_norms::{NormKind, NormSpec};

    #[test]
    fn forward_fields_come_from_the_plan_and_the_buffers() {
        let spec = NormSpec::new(NormKind::TopK { k: 5 }, 1e-5);
        let p = plan(&spec, Storage::BF16, Direction::Forward, 10, 300, false, false, &Device::H100).unwrap();
        let b = FwdBuffers { rows: 10, x: 0x7000_0000_0010, y: 0x7000_0100_0020, weight: Some(0x10), bias: None, stats: Some(0x40) };
        let f = fwd_params(&p, &b);
        assert_eq!(f.x as usize, 0x7000_0000_0010);
        assert_eq!(f.y as usize, 0x7000_0100_0020);
        assert_eq!((f.weight as usize, f.bias.is_null(), f.stats as usize), (0x10, true, 0x40));
        assert_eq!((f.rows, f.n, f.k, f.centred), (10, 300, 5, spec.centred as i32));
        assert_eq!((f.eps, f.c), (p.eps, p.c));
        assert_eq!(f.vec_ok, 1);
        let f = fwd_params(&p, &FwdBuffers { y: b.y + 2, stats: None, ..b });
        assert_eq!((f.vec_ok, f.stats.is_null()), (0, true));
    }

    #[test]
    fn backward_fields_and_vector_condition() {
        let spec = NormSpec::layer(1e-5);
        let p = plan(&spec, Storage::F16, Direction::Backward, 3, 2048, true, false, &Device::A100).unwrap();
        let b = BwdBuffers { rows: 3, x: 256, dy: 512, stats: 1024, weight: Some(2048), dx: 4096, dw_part: Some(8192), db_part: None };
        let q = bwd_params(&p, &b);
        assert_eq!((q.x as usize, q.dy as usize, q.stats as usize, q.weight as usize, q.dx as usize), (256, 512, 1024, 2048, 4096));
        assert_eq!((q.dw_part as usize, q.db_part.is_null()), (8192, true));
        assert_eq!((q.rows, q.n, q.centred, q.c, q.k, q.vec_ok), (3, 2048, 1, p.c, 0, 1));
        assert_eq!(bwd_params(&p, &BwdBuffers { dx: 4098, ..b }).vec_ok, 0);
        let f = finalize_params(64, 128, 7, 2048);
        assert_eq!((f.part as usize, f.out as usize, f.nparts, f.n), (64, 128, 7, 2048));
    }

    #[test]
    fn variant_fields_and_fp8_vector_condition() {
        use normlab_kernels::plan::plan_variant;
        let spec = NormSpec::rms(1e-6);
        let p = plan_variant(&spec, Storage::F16, FwdVariant::E4M3, 4, 256, 2.5, &Device::H100).unwrap();
        assert_eq!(p.kernel, "nl_rms_fwd_f16_e4m3_warp");
        // x at 32 (element address 16), y at 8: congruent modulo 8 -> vectors; y at 12: not.
        let b = FwdBuffers { rows: 4, x: 32, y: 8, weight: None, bias: None, stats: None };
        let v = fwd_var_params(&p, &b, FwdVariant::E4M3, None, 2.5);
        assert_eq!((v.f.vec_ok, v.out_scale, v.counts.is_null()), (1, 2.5, true));
        assert_eq!(fwd_var_params(&p, &FwdBuffers { y: 12, ..b }, FwdVariant::E4M3, None, 2.5).f.vec_ok, 0);
        let q = plan_variant(&spec, Storage::BF16, FwdVariant::Pure, 4, 2048, 1.0, &Device::H100).unwrap();
        assert_eq!(q.kernel, "nl_rms_fwd_bf16_pure_block");
        let v = fwd_var_params(&q, &FwdBuffers { y: 48, ..b }, FwdVariant::Pure, Some(0x100), 1.0);
        assert_eq!((v.f.vec_ok, v.counts as usize, v.f.eps), (1, 0x100, half::bf16::from_f64(1e-6).to_f32()));
    }

    #[test]
    fn layouts_are_those_of_the_cuda_structs() {
        use std::mem::{align_of, offset_of, size_of};
        // nl::FwdParams: 5 pointers, i64 rows, then int n, int centred, float eps, float c, int k, int vec_ok.
        assert_eq!((size_of::<FwdParams>(), align_of::<FwdParams>()), (72, 8));
        assert_eq!((offset_of!(FwdParams, rows), offset_of!(FwdParams, n), offset_of!(FwdParams, vec_ok)), (40, 48, 68));
        // nl::BwdParams: 7 pointers, i64 rows, int n, int centred, float c, int k, int vec_ok (+4 padding).
        assert_eq!((size_of::<BwdParams>(), align_of::<BwdParams>()), (88, 8));
        assert_eq!((offset_of!(BwdParams, rows), offset_of!(BwdParams, vec_ok)), (56, 80));
        assert_eq!((size_of::<FinalizeParams>(), offset_of!(FinalizeParams, nparts)), (24, 16));
        assert_eq!(size_of::<KernelStats>(), 16);
        assert_eq!(size_of::<ParamArg<FwdParams>>(), size_of::<FwdParams>());
        // nl::FwdVarParams: FwdParams, RowCounts* counts, float out_scale, int reserved.
        assert_eq!((size_of::<FwdVarParams>(), align_of::<FwdVarParams>()), (88, 8));
        assert_eq!((offset_of!(FwdVarParams, counts), offset_of!(FwdVarParams, out_scale)), (72, 80));
        assert_eq!(size_of::<RowCounts>(), 16);
    }
}
