//! Opening a CUDA device through the driver API (libcuda loaded at run time), with the checks
//! that turn "no GPU here" into typed errors: the driver library is looked for before any call
//! (cudarc would panic on a missing library), `cuInit`'s "no device" becomes
//! [`GpuError::NoDevice`], as does an ordinal beyond the device count.

use std::sync::Arc;

use cudarc::driver::sys::{CUdevice_attribute, CUresult};
use cudarc::driver::{result, CudaContext};

use crate::gpu::error::{GpuError, Result};

/// What the runtime needs to know about the device it runs on.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sm_count: u32,
    /// Largest dynamic + static shared memory a block may opt in to.
    pub smem_per_block_optin: usize,
    pub total_mem_bytes: usize,
    /// cuDriverGetVersion, e.g. 12090.
    pub driver_version: i32,
}

/// `CUDA_VISIBLE_DEVICES` as set, for error messages.
fn visible_devices() -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!("CUDA_VISIBLE_DEVICES='{v}'"),
        Err(_) => "CUDA_VISIBLE_DEVICES unset".to_string(),
    }
}

/// Load the driver library and initialise it. Typed errors for "no driver" and "no device".
pub fn init_driver() -> Result<()> {
    #[cfg(not(feature = "candle-cuda"))]
    {
        // SAFETY: only tries to dlopen libcuda's candidate names.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
    }
    match result::init() {
        Ok(()) => Ok(()),
        Err(e) if e.0 == CUresult::CUDA_ERROR_NO_DEVICE => {
            Err(GpuError::NoDevice { reason: format!("cuInit found no CUDA-capable device ({})", visible_devices()) })
        }
        Err(e) => Err(GpuError::NoDevice { reason: format!("cuInit failed with {:?} ({})", e.0, visible_devices()) }),
    }
}

/// Number of visible devices (after [`init_driver`]).
pub fn device_count() -> Result<usize> {
    init_driver()?;
    let n = result::device::get_count().map_err(GpuError::driver("cuDeviceGetCount"))?;
    Ok(n.max(0) as usize)
}

/// A context on device `ordinal` (its primary context, shared with anyone else in the process
/// using the same device, e.g. candle).
pub fn open(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo)> {
    let count = device_count()?;
    if count == 0 {
        return Err(GpuError::NoDevice { reason: format!("the driver reports 0 devices ({})", visible_devices()) });
    }
    if ordinal >= count {
        return Err(GpuError::NoDevice { reason: format!("device {ordinal} requested, but only {count} visible ({})", visible_devices()) });
    }
    let ctx = CudaContext::new(ordinal).map_err(GpuError::driver("cuDevicePrimaryCtxRetain"))?;
    let info = describe(&ctx)?;
    Ok((ctx, info))
}

/// Device properties of a context's device.
pub fn describe(ctx: &Arc<CudaContext>) -> Result<DeviceInfo> {
    let attr = |a: CUdevice_attribute, call: &'static str| ctx.attribute(a).map_err(GpuError::driver(call));
    let compute_capability = ctx.compute_capability().map_err(GpuError::driver("cuDeviceGetAttribute(compute capability)"))?;
    let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "cuDeviceGetAttribute(SM count)")?;
    let smem = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "cuDeviceGetAttribute(smem opt-in)")?;
    let mut driver_version = 0;
    // SAFETY: one out-pointer.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(GpuError::driver("cuDriverGetVersion"))?;
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        name: ctx.name().map_err(GpuError::driver("cuDeviceGetName"))?,
        compute_capability,
        sm_count: sm_count.max(1) as u32,
        smem_per_block_optin: smem.max(0) as usize,
        total_mem_bytes: ctx.total_mem().map_err(GpuError::driver("cuDeviceTotalMem"))?,
        driver_version,
    })
}
