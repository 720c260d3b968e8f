//! Compiling an embedded CUDA source for a context's device and loading it as a module, through
//! the process-wide image cache (memory, then `~/.cache/normlab/ptx`, then NVRTC), and
//! [`FamilyModule`], the loaded module as the launch wrappers of the kernel families use it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use normlab_kernels::plan::Device;

use crate::gpu::cache::{CacheKey, DiskCache, ImageCache, ImageKind, Origin};
use crate::gpu::device::{describe, DeviceInfo};
use crate::gpu::error::{GpuError, PlanError, Result};
use crate::gpu::nvrtc;

/// Where a module's image came from and what it targets.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ImageInfo {
    pub module: String,
    /// `sm_90` (CUBIN) or `compute_90` (PTX).
    pub target: String,
    pub kind: String,
    /// "memory", "disk" or "compiled".
    pub origin: String,
    pub nvrtc_version: (i32, i32),
    /// The disk cache entry (absent without a cache directory).
    pub cache_file: Option<PathBuf>,
}

/// The process-wide image cache.
pub fn images() -> &'static ImageCache {
    static CACHE: OnceLock<ImageCache> = OnceLock::new();
    CACHE.get_or_init(|| ImageCache::new(DiskCache::default_dir().map(DiskCache::new)))
}

/// An embedded source to compile.
pub struct Source {
    pub module: &'static str,
    pub file_name: &'static str,
    pub text: &'static str,
    /// Base NVRTC options (the architecture and include path are added).
    pub options: &'static [&'static str],
    /// Whether it includes the CUDA headers (cuda_fp16.h ...).
    pub needs_headers: bool,
}

/// The image of `src` for a device of compute capability `major.minor`, through the image
/// caches (memory, disk, then NVRTC): the target ([`nvrtc::target_for`]), the options with the
/// architecture and the header directory, and the cache key all depend on that capability and
/// on nothing else of the device, so an image compiled here without a GPU (see [`precompile`])
/// is the one a device of that capability later finds on disk.
fn image_for(src: &Source, major: i32, minor: i32) -> Result<(Arc<[u8]>, ImageInfo, ImageKind)> {
    let version = nvrtc::version()?;
    let (arch, kind) = nvrtc::target_for(major, minor, &nvrtc::supported_archs()?)?;
    let mut options: Vec<String> = src.options.iter().map(|s| s.to_string()).collect();
    options.push(format!("--gpu-architecture={arch}"));
    if src.needs_headers {
        options.push(format!("-I{}", nvrtc::include_dir()?.display()));
    }
    let key = CacheKey::new(src.module, src.text, &options, &arch, version, kind);
    let (image, origin) = images().get_or_compile(
        &key,
        || nvrtc::compile(src.text, src.file_name, &options, kind, &arch),
        |path, e| eprintln!("warning: could not write the kernel cache entry {}: {e} (the kernels will be recompiled next time)", path.display()),
    )?;
    let info = ImageInfo {
        module: src.module.to_string(),
        target: arch,
        kind: kind.ext().to_string(),
        origin: match origin {
            Origin::Memory => "memory",
            Origin::Disk => "disk",
            Origin::Compiled => "compiled",
        }
        .to_string(),
        nvrtc_version: version,
        cache_file: images().disk().map(|d| d.path(&key)),
    };
    Ok((image, info, kind))
}

/// Compile `src` for the device of `ctx` (cached) and load it.
pub fn load(ctx: &Arc<CudaContext>, src: &Source) -> Result<(Arc<CudaModule>, ImageInfo)> {
    let (major, minor) = ctx.compute_capability().map_err(GpuError::driver("cuDeviceGetAttribute(compute capability)"))?;
    let (image, info, kind) = image_for(src, major, minor)?;
    let ptx = match kind {
        ImageKind::Cubin => Ptx::from_binary(image.to_vec()),
        ImageKind::Ptx => Ptx::from_src(String::from_utf8_lossy(&image).into_owned()),
    };
    let module = ctx.load_module(ptx).map_err(GpuError::driver("cuModuleLoadData"))?;
    Ok((module, info))
}

/// Compile `src` for devices of compute capability `major.minor` into the image caches without
/// a GPU or driver (`normlab gpu-check --precompile`): a GPU machine given the disk cache then
/// loads the image instead of running NVRTC at first use (about a minute for the row kernels).
pub fn precompile(src: &Source, major: i32, minor: i32) -> Result<ImageInfo> {
    image_for(src, major, minor).map(|(_, info, _)| info)
}

/// Dynamic shared memory a kernel may use without opting in.
const SMEM_DEFAULT_LIMIT: usize = 48 * 1024;

/// One kernel family's source loaded in one context: the part that the launch wrappers
/// ([`crate::gpu::rows::RowKernels`], [`crate::gpu::updates::UpdateKernels`],
/// [`crate::gpu::batch::BatchKernels`], [`crate::gpu::project::ProjectKernels`], all declared
/// by `family_kernels!`) have in common, so that each of them keeps only its
/// plans, parameter structs and launch sequences.
pub struct FamilyModule {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    module: Arc<CudaModule>,
    image: ImageInfo,
    /// Shared memory kept for the family's static arrays when planning dynamic shared memory.
    static_smem_reserve: usize,
    /// Function handles and the dynamic shared memory each was opted in to.
    funcs: Mutex<HashMap<String, (CudaFunction, usize)>>,
}

impl FamilyModule {
    /// Describe `ctx`'s device, then compile (or fetch from the caches) and load `src` for it.
    pub fn load(ctx: &Arc<CudaContext>, src: &Source, static_smem_reserve: usize) -> Result<Self> {
        let info = describe(ctx)?;
        let (module, image) = load(ctx, src)?;
        Ok(FamilyModule { ctx: ctx.clone(), info, module, image, static_smem_reserve, funcs: Mutex::new(HashMap::new()) })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    pub fn image(&self) -> &ImageInfo {
        &self.image
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// `Debug` of a wrapper: its name, the device and the image (not the handles).
    pub fn fmt_as(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name).field("info", &self.info).field("image", &self.image).finish()
    }

    /// The planning view of the device: the opt-in shared memory less the family's reserve.
    pub fn device(&self, blocks_per_sm: u32) -> Device {
        Device {
            sm_count: self.info.sm_count,
            blocks_per_sm: blocks_per_sm.max(1),
            smem_per_block: self.info.smem_per_block_optin.saturating_sub(self.static_smem_reserve),
        }
    }

    /// The function `name` (looked up once), opted in to `smem` bytes of dynamic shared memory
    /// when that is more than it may already use (48 KiB without opting in).
    pub fn function(&self, name: &str, smem: usize) -> Result<CudaFunction> {
        let mut funcs = self.funcs.lock().unwrap_or_else(|p| p.into_inner());
        if !funcs.contains_key(name) {
            let f = self.module.load_function(name).map_err(GpuError::driver("cuModuleGetFunction"))?;
            funcs.insert(name.to_string(), (f, SMEM_DEFAULT_LIMIT));
        }
        let (f, allowed) = funcs.get_mut(name).expect("inserted above");
        if smem > *allowed {
            f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
                .map_err(GpuError::driver("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"))?;
            *allowed = smem;
        }
        Ok(f.clone())
    }

    /// Resident blocks of `f` per SM for blocks of `block` threads with `smem` bytes of dynamic
    /// shared memory (0 when none fits).
    pub fn occupancy(&self, f: &CudaFunction, block: u32, smem: usize) -> Result<u32> {
        f.occupancy_max_active_blocks_per_multiprocessor(block, smem, None)
            .map_err(GpuError::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    }

    /// A persistent-grid plan: `plan` for one block per SM, then again for the planned kernel's
    /// real occupancy (`launch` reads the kernel's name, block and dynamic shared memory from a
    /// plan), so that grid = min(blocks needed, SMs x resident blocks per SM).
    pub fn plan_persistent<P, E: Into<GpuError>>(
        &self,
        plan: impl Fn(&Device) -> std::result::Result<P, E>,
        launch: impl Fn(&P) -> (&str, u32, usize),
    ) -> Result<(P, CudaFunction)> {
        let first = plan(&self.device(1)).map_err(Into::into)?;
        let (kernel, block, smem) = launch(&first);
        let f = self.function(kernel, smem)?;
        let occ = self.occupancy(&f, block, smem)?;
        if occ == 0 {
            return Err(GpuError::Plan(PlanError(format!(
                "{kernel}: no block of {block} threads with {smem} bytes of shared memory fits on an SM of {}",
                self.info.name
            ))));
        }
        Ok((plan(&self.device(occ)).map_err(Into::into)?, f))
    }
}

/// Declares a kernel family's launch wrapper: the struct around its [`FamilyModule`], its
/// `Debug`, `load` (compile or fetch from the caches, with the family's static shared-memory
/// reserve), `for_context` (loaded once per CUDA context for the process, e.g. candle's) and
/// the `info`/`image`/`context` accessors. Each family's module keeps only its plans,
/// parameter structs and launch sequences.
macro_rules! family_kernels {
    ($(#[$doc:meta])* $name:ident, $source:expr, reserve: $reserve:expr) => {
        $(#[$doc])*
        pub struct $name {
            m: $crate::gpu::module::FamilyModule,
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.m.fmt_as(stringify!($name), f)
            }
        }

        impl $name {
            /// Compile (or fetch from the caches) and load the kernels for `ctx`'s device.
            pub fn load(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> $crate::gpu::error::Result<Self> {
                Ok($name { m: $crate::gpu::module::FamilyModule::load(ctx, &$source, $reserve)? })
            }

            /// The kernels of `ctx`, loaded once per context for the process (candle's contexts).
            pub fn for_context(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> $crate::gpu::error::Result<std::sync::Arc<Self>> {
                static ALL: $crate::gpu::module::PerContext<$name> = $crate::gpu::module::PerContext::new();
                ALL.get_or_load(ctx, Self::load)
            }

            pub fn info(&self) -> &$crate::gpu::device::DeviceInfo {
                self.m.info()
            }
            pub fn image(&self) -> &$crate::gpu::module::ImageInfo {
                self.m.image()
            }
            pub fn context(&self) -> &std::sync::Arc<cudarc::driver::CudaContext> {
                self.m.context()
            }
        }
    };
}
pub(crate) use family_kernels;

/// One value per CUDA context for the process (a family's kernels in candle's contexts, say),
/// loaded at the first request; a `static` of each wrapper.
pub struct PerContext<T>(OnceLock<Mutex<HashMap<usize, Arc<T>>>>);

impl<T> Default for PerContext<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PerContext<T> {
    pub const fn new() -> Self {
        PerContext(OnceLock::new())
    }

    /// The value of `ctx`, made by `load` if there is none yet (an error is not kept).
    pub fn get_or_load(&self, ctx: &Arc<CudaContext>, load: impl FnOnce(&Arc<CudaContext>) -> Result<T>) -> Result<Arc<T>> {
        let mut all = self.0.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        let key = ctx.cu_ctx() as usize;
        if let Some(k) = all.get(&key) {
            return Ok(k.clone());
        }
        let k = Arc::new(load(ctx)?);
        all.insert(key, k.clone());
        Ok(k)
    }
}
