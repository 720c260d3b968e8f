//! Compiling an embedded CUDA source for a context's device and loading it as a module, through
//! the process-wide image cache (memory, then `~/.cache/normlab/ptx`, then NVRTC).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::Ptx;

use crate::gpu::cache::{CacheKey, DiskCache, ImageCache, ImageKind, Origin};
use crate::gpu::error::{GpuError, Result};
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

/// Compile `src` for the device of `ctx` (cached) and load it.
pub fn load(ctx: &Arc<CudaContext>, src: &Source) -> Result<(Arc<CudaModule>, ImageInfo)> {
    let (major, minor) = ctx.compute_capability().map_err(GpuError::driver("cuDeviceGetAttribute(compute capability)"))?;
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
    let ptx = match kind {
        ImageKind::Cubin => Ptx::from_binary(image.to_vec()),
        ImageKind::Ptx => Ptx::from_src(String::from_utf8_lossy(&image).into_owned()),
    };
    let module = ctx.load_module(ptx).map_err(GpuError::driver("cuModuleLoadData"))?;
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
    Ok((module, info))
}
