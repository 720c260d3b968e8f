//! NVRTC through cudarc, loaded at run time: finding the library and the CUDA headers, choosing
//! the target for a device, and compiling a source to a CUBIN or PTX image (with the compile log
//! as a typed error). Nothing here needs a GPU or a driver, so the compile path is tested on
//! machines without one (tests/gpu_runtime.rs, with the NVRTC of `.ci/cuda-wheels.sh`).
//!
//! # Finding libnvrtc
//! cudarc dlopens libnvrtc by name (`libnvrtc.so`, `libnvrtc.so.12`, ...), i.e. through the
//! loader's search path. A library outside that path (NVIDIA's PyPI wheel) is named by
//! `NORMLAB_NVRTC_LIB` (or found in the wheel cache `$HOME/.cache/normlab/cuda-wheels`): it is
//! opened first and kept open, and cudarc's later dlopen of its soname returns that very library.
//!
//! # Target
//! A device of compute capability X.Y gets a CUBIN for `sm_XY` when this NVRTC supports it (no
//! JIT at load time); a device newer than NVRTC knows gets PTX for the newest `compute_ZZ` it
//! supports, which the driver compiles forward. Devices older than sm_80 are refused.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::nvrtc::{result, sys};

use crate::gpu::cache::ImageKind;
use crate::gpu::error::{GpuError, Result};

/// Oldest architecture the kernels are written for (fp16/bf16 arithmetic, 227 KiB smem).
pub const MIN_ARCH: i32 = 80;

fn env_path(k: &str) -> Option<PathBuf> {
    std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// `.ci/cuda-wheels.sh`'s cache (`$NORMLAB_CUDA_WHEELS`, else `$HOME/.cache/normlab/cuda-wheels`).
fn wheel_cache() -> Option<PathBuf> {
    env_path("NORMLAB_CUDA_WHEELS").or_else(|| env_path("HOME").map(|h| h.join(".cache/normlab/cuda-wheels")))
}

/// First file under `dir` (depth <= 4) whose name satisfies `pred`.
fn find_file(dir: &Path, depth: usize, pred: &dyn Fn(&str) -> bool) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in &entries {
        if p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(pred) {
            return Some(p.clone());
        }
    }
    if depth == 0 {
        return None;
    }
    entries.iter().filter(|p| p.is_dir()).find_map(|p| find_file(p, depth - 1, pred))
}

/// The explicit libnvrtc to open before cudarc looks for it by name, if any.
pub fn explicit_library() -> Option<PathBuf> {
    env_path("NORMLAB_NVRTC_LIB").or_else(|| {
        let dir = wheel_cache()?.join("nvidia/cuda_nvrtc/lib");
        find_file(&dir, 0, &|n| n.starts_with("libnvrtc.so") && !n.contains("builtins"))
    })
}

static PRELOADED: OnceLock<std::result::Result<Option<PathBuf>, String>> = OnceLock::new();

/// Open the explicit library (once per process) and keep it open.
fn preload() -> std::result::Result<Option<PathBuf>, String> {
    PRELOADED
        .get_or_init(|| match explicit_library() {
            None => Ok(None),
            Some(path) => {
                // SAFETY: loading libnvrtc runs only its (side-effect free) initialisers.
                match unsafe { libloading::Library::new(&path) } {
                    Ok(lib) => {
                        std::mem::forget(lib); // stays loaded for the process, as cudarc's handle does
                        Ok(Some(path))
                    }
                    Err(e) => Err(format!("{}: {e}", path.display())),
                }
            }
        })
        .clone()
}

/// Is libnvrtc loadable? (Checked before any NVRTC call: cudarc panics on a missing library.)
fn library_present() -> Result<()> {
    let explicit = preload().map_err(|detail| GpuError::NvrtcMissing { detail })?;
    #[cfg(not(feature = "candle-cuda"))]
    {
        // SAFETY: only tries to dlopen the candidate names.
        if !unsafe { sys::is_culib_present() } {
            let detail = match explicit {
                Some(p) => format!("{} was opened but does not provide a libnvrtc soname cudarc looks for", p.display()),
                None => "not on the loader path and NORMLAB_NVRTC_LIB is not set".to_string(),
            };
            return Err(GpuError::NvrtcMissing { detail });
        }
    }
    // With `candle-cuda`, candle's CUDA build links libnvrtc: the process could not have started
    // without it.
    #[cfg(feature = "candle-cuda")]
    let _ = explicit;
    Ok(())
}

/// NVRTC's (major, minor) version; a typed error when the library is missing.
pub fn version() -> Result<(i32, i32)> {
    library_present()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(GpuError::nvrtc("nvrtcVersion"))?;
    Ok((major, minor))
}

/// The architectures (e.g. 75, 80, ..., 120) this NVRTC compiles for.
pub fn supported_archs() -> Result<Vec<i32>> {
    library_present()?;
    let mut n = 0;
    // SAFETY: out-pointer, then a buffer of the size NVRTC reported.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }.result().map_err(GpuError::nvrtc("nvrtcGetNumSupportedArchs"))?;
    let mut archs = vec![0; n.max(0) as usize];
    if n > 0 {
        unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }.result().map_err(GpuError::nvrtc("nvrtcGetSupportedArchs"))?;
    }
    archs.sort_unstable();
    Ok(archs)
}

/// What to compile for: `(--gpu-architecture value, image kind)`.
pub fn target_for(major: i32, minor: i32, supported: &[i32]) -> Result<(String, ImageKind)> {
    let arch = major * 10 + minor;
    if arch < MIN_ARCH {
        return Err(GpuError::UnsupportedArch { major, minor });
    }
    if supported.contains(&arch) {
        return Ok((format!("sm_{arch}"), ImageKind::Cubin));
    }
    match supported.iter().copied().filter(|&a| a >= MIN_ARCH && a < arch).max() {
        Some(best) => Ok((format!("compute_{best}"), ImageKind::Ptx)),
        None => Err(GpuError::UnsupportedArch { major, minor }),
    }
}

/// Directory with `cuda_fp16.h` / `cuda_bf16.h`: `$NORMLAB_CUDA_INCLUDE`, the toolkit
/// (`$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`), headers next to the NVRTC library, or the
/// wheel cache.
pub fn include_dir() -> Result<PathBuf> {
    let mut searched = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(d) = env_path("NORMLAB_CUDA_INCLUDE") {
        candidates.push(d);
    }
    for k in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(d) = env_path(k) {
            candidates.push(d.join("include"));
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates.push(PathBuf::from("/opt/cuda/include"));
    if let Some(lib) = explicit_library() {
        if let Some(root) = lib.parent().and_then(Path::parent) {
            candidates.push(root.join("include"));
            if let Some(nvidia) = root.parent() {
                candidates.push(nvidia.join("cuda_runtime/include"));
            }
        }
    }
    if let Some(w) = wheel_cache() {
        candidates.push(w.join("nvidia/cuda_runtime/include"));
    }
    for d in candidates {
        if d.join("cuda_fp16.h").is_file() && d.join("cuda_bf16.h").is_file() {
            return Ok(d);
        }
        searched.push(d);
    }
    Err(GpuError::HeadersMissing { searched })
}

fn c_string_lossy(v: &[c_char]) -> String {
    let bytes: Vec<u8> = v.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compile `source` (file name `name` in diagnostics) with `options` (which must include the
/// `--gpu-architecture`) and return the image of `kind`.
pub fn compile(source: &str, name: &str, options: &[String], kind: ImageKind, arch: &str) -> Result<Vec<u8>> {
    library_present()?;
    let bad = |what: &str| GpuError::Compile {
        source_name: name.into(),
        arch: arch.into(),
        code: "invalid input".into(),
        log: format!("{what} contains a NUL byte"),
    };
    let src = CString::new(source).map_err(|_| bad("the source"))?;
    let cname = CString::new(name).map_err(|_| bad("the name"))?;
    if options.iter().any(|o| o.contains('\0')) {
        return Err(bad("an option"));
    }
    let prog = result::create_program(&src, Some(cname.as_c_str())).map_err(GpuError::nvrtc("nvrtcCreateProgram"))?;
    // SAFETY: `prog` is a live program until the destroy below; buffers are sized by NVRTC.
    let out = unsafe {
        match result::compile_program(prog, options) {
            Err(e) => {
                let log = result::get_program_log(prog).map(|l| c_string_lossy(&l)).unwrap_or_default();
                Err(GpuError::Compile { source_name: name.into(), arch: arch.into(), code: format!("{:?}", e.0), log })
            }
            Ok(()) => match kind {
                ImageKind::Ptx => result::get_ptx(prog)
                    .map(|p| c_string_lossy(&p).into_bytes())
                    .map_err(GpuError::nvrtc("nvrtcGetPTX")),
                ImageKind::Cubin => {
                    let mut size = 0usize;
                    sys::nvrtcGetCUBINSize(prog, &mut size).result().map_err(GpuError::nvrtc("nvrtcGetCUBINSize")).and_then(|()| {
                        let mut buf = vec![0u8; size];
                        sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char)
                            .result()
                            .map_err(GpuError::nvrtc("nvrtcGetCUBIN"))
                            .map(|()| buf)
                    })
                }
            },
        }
    };
    // SAFETY: created above, destroyed once.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// The message of an NVRTC status code (for logs).
pub fn status_name(code: sys::nvrtcResult) -> String {
    // SAFETY: NVRTC returns a static string.
    unsafe {
        let p = sys::nvrtcGetErrorString(code);
        if p.is_null() {
            format!("{code:?}")
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_prefers_an_exact_cubin_and_falls_back_to_ptx() {
        let archs = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(target_for(9, 0, &archs).unwrap(), ("sm_90".to_string(), ImageKind::Cubin));
        assert_eq!(target_for(8, 0, &archs).unwrap(), ("sm_80".to_string(), ImageKind::Cubin));
        // A device newer than this NVRTC: PTX of the newest older architecture, JIT by the driver.
        assert_eq!(target_for(12, 1, &archs).unwrap(), ("compute_120".to_string(), ImageKind::Ptx));
        assert_eq!(target_for(8, 7, &archs).unwrap(), ("compute_86".to_string(), ImageKind::Ptx));
        for (ma, mi) in [(7, 5), (6, 1)] {
            let e = target_for(ma, mi, &archs).unwrap_err().to_string();
            assert!(e.contains(&format!("{ma}.{mi}")) && e.contains("sm_80"), "{e}");
        }
        assert!(matches!(target_for(9, 0, &[75]), Err(GpuError::UnsupportedArch { major: 9, minor: 0 })));
    }
}
