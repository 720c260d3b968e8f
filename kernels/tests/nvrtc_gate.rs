//! The NVRTC compile gate: every kernel of src/cuda/rownorm.cu is compiled by NVRTC (from NVIDIA's
//! `nvidia-cuda-nvrtc-cu12` wheel, loaded at run time) for compute_80 and compute_90, then
//! assembled by ptxas (`nvidia-cuda-nvcc-cu12` wheel) with `-v`, and the resource report is
//! checked for every entry point:
//!
//! - the set of entries is exactly `normlab_kernels::list::all_names()`;
//! - no local memory: stack frame, spill stores and spill loads all zero (`LOCAL_MEMORY_BUDGET`);
//! - registers <= `REGISTER_CAP` (128: the most a 512-thread block kernel may use, and half
//!   of the hardware maximum for the 128-thread warp kernels);
//! - every row kernel has 128-bit global loads and stores (`ld.global[.nc].v4`,
//!   `st.global[.wb].v4` in the PTX, i.e. LDG.E.128 / STG.E.128); the fp8-output forward
//!   variants 128-bit loads and 64-bit stores (`st.global.wb.v2`: 8 one-byte elements);
//! - the parameter ABI: every entry's single `.param` struct has the size and alignment of the
//!   `#[repr(C)]` Rust struct its launcher passes (`params`; `residual` and `batch::params` for
//!   the residual-update and batch-norm families), on both architectures. Checked here, on the
//!   PTX the gate compiles anyway (compiling rownorm.cu takes NVRTC about a minute).
//!
//! The toolchain comes from `.ci/cuda-wheels.sh` (env NORMLAB_NVRTC_LIB, NORMLAB_PTXAS,
//! NORMLAB_CUDA_INCLUDE; without them the default cache $HOME/.cache/normlab/cuda-wheels is
//! searched). If it is absent the test FAILS when NORMLAB_REQUIRE_NVRTC=1 (CI), and otherwise
//! prints that the gate did not run.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_int, c_void, CString};
use std::mem::{align_of, size_of};
use std::path::{Path, PathBuf};

use normlab_kernels::{list, ptx, sources};

/// Registers per thread allowed for any kernel.
const REGISTER_CAP: u32 = 128;

/// Local-memory budget per kernel (bytes): stack frame, spill stores, spill loads. Zero: no
/// kernel may touch local memory. ptxas 12.9 used to spill 4-16 bytes in some kernels: with only
/// `.maxntid` it picks its own occupancy target (e.g. 32 registers for a 512-thread block) and
/// spills what does not fit it. The kernels now give `__launch_bounds__` a minimum of resident
/// blocks per SM (NL_MINB_* in rownorm.cu), which fixes the register budget instead.
const LOCAL_MEMORY_BUDGET: (u32, u32, u32) = (0, 0, 0);

struct Toolchain {
    nvrtc: PathBuf,
    ptxas: PathBuf,
    include: PathBuf,
}

fn find_in(dir: &Path, pred: &dyn Fn(&str) -> bool) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().and_then(|n| n.to_str()).is_some_and(pred) {
                return Some(p);
            }
        }
    }
    None
}

fn toolchain() -> Result<Toolchain, String> {
    let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let cache = env("NORMLAB_CUDA_WHEELS")
        .or_else(|| env("HOME").map(|h| h.join(".cache/normlab/cuda-wheels")))
        .unwrap_or_default();
    let nvrtc = env("NORMLAB_NVRTC_LIB")
        .or_else(|| find_in(&cache, &|n| n.starts_with("libnvrtc.so") && !n.contains("builtins")))
        .ok_or("libnvrtc not found (set NORMLAB_NVRTC_LIB or run .ci/cuda-wheels.sh)")?;
    let ptxas = env("NORMLAB_PTXAS").or_else(|| find_in(&cache, &|n| n == "ptxas")).ok_or("ptxas not found")?;
    let include = env("NORMLAB_CUDA_INCLUDE")
        .or_else(|| find_in(&cache, &|n| n == "cuda_fp16.h").and_then(|p| p.parent().map(Path::to_path_buf)))
        .ok_or("cuda_fp16.h not found")?;
    for p in [&nvrtc, &ptxas, &include] {
        if !p.exists() {
            return Err(format!("{} does not exist", p.display()));
        }
    }
    Ok(Toolchain { nvrtc, ptxas, include })
}

type Prog = *mut c_void;

/// NVRTC through dlopen (no link-time dependency on the CUDA toolkit).
struct Nvrtc {
    _lib: libloading::Library,
    create: unsafe extern "C" fn(*mut Prog, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> c_int,
    compile: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    ptx_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    ptx: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Prog) -> c_int,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
}

impl Nvrtc {
    fn load(path: &Path) -> Nvrtc {
        // SAFETY: libnvrtc's C API with its documented signatures.
        unsafe {
            let lib = libloading::Library::new(path).unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()));
            macro_rules! sym {
                ($n:literal) => {
                    *lib.get($n).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy($n)))
                };
            }
            Nvrtc {
                create: sym!(b"nvrtcCreateProgram"),
                compile: sym!(b"nvrtcCompileProgram"),
                log_size: sym!(b"nvrtcGetProgramLogSize"),
                log: sym!(b"nvrtcGetProgramLog"),
                ptx_size: sym!(b"nvrtcGetPTXSize"),
                ptx: sym!(b"nvrtcGetPTX"),
                destroy: sym!(b"nvrtcDestroyProgram"),
                version: sym!(b"nvrtcVersion"),
                _lib: lib,
            }
        }
    }

    /// Compile `src` with `opts`; returns the PTX or the log.
    fn compile(&self, src: &str, name: &str, opts: &[String]) -> Result<String, String> {
        let src = CString::new(src).unwrap();
        let name = CString::new(name).unwrap();
        let copts: Vec<CString> = opts.iter().map(|o| CString::new(o.as_str()).unwrap()).collect();
        let ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
        // SAFETY: valid C strings and out-pointers, buffers sized by NVRTC's own size queries.
        unsafe {
            let mut prog: Prog = std::ptr::null_mut();
            assert_eq!((self.create)(&mut prog, src.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()), 0);
            let rc = (self.compile)(prog, ptrs.len() as c_int, ptrs.as_ptr());
            let mut n = 0usize;
            (self.log_size)(prog, &mut n);
            let mut log = vec![0u8; n.max(1)];
            (self.log)(prog, log.as_mut_ptr() as *mut c_char);
            let log = String::from_utf8_lossy(&log).trim_end_matches('\0').to_string();
            let out = if rc == 0 {
                (self.ptx_size)(prog, &mut n);
                let mut ptx = vec![0u8; n];
                (self.ptx)(prog, ptx.as_mut_ptr() as *mut c_char);
                Ok(String::from_utf8_lossy(&ptx).trim_end_matches('\0').to_string())
            } else {
                Err(format!("NVRTC error {rc}:\n{log}"))
            };
            (self.destroy)(&mut prog);
            out
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Resources {
    registers: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
    smem: u32,
}

fn num_before(s: &str, unit: &str) -> Option<u32> {
    let i = s.find(unit)?;
    s[..i].trim_end().rsplit([' ', ',']).next()?.parse().ok()
}

/// Parse `ptxas -v` output into per-entry resources.
fn parse_ptxas(report: &str) -> BTreeMap<String, Resources> {
    let mut out: BTreeMap<String, Resources> = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in report.lines() {
        if let Some(i) = line.find("Function properties for ") {
            cur = Some(line[i + "Function properties for ".len()..].trim().to_string());
            out.entry(cur.clone().unwrap()).or_default();
        } else if let Some(name) = &cur {
            let r = out.get_mut(name).unwrap();
            if line.contains("bytes stack frame") {
                r.stack = num_before(line, "bytes stack frame").unwrap();
                r.spill_stores = num_before(line, "bytes spill stores").unwrap();
                r.spill_loads = num_before(line, "bytes spill loads").unwrap();
            } else if line.contains("Used") && line.contains("registers") {
                r.registers = num_before(line, "registers").unwrap();
                r.smem = num_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

/// (alignment, size) of `T`: what a kernel's `.param` struct must have.
fn abi<T>() -> (usize, usize) {
    (align_of::<T>(), size_of::<T>())
}

/// Failures where an entry's PTX parameter differs from `want(name)`, the Rust struct's.
fn check_abi(what: &str, ptx_text: &str, want: impl Fn(&str) -> (usize, usize)) -> Vec<String> {
    match ptx::entry_params(ptx_text) {
        Ok(params) => {
            let bad: Vec<String> = params
                .iter()
                .filter(|(name, got)| **got != want(name))
                .map(|(name, got)| format!("{what}: {name}: PTX parameter (align, size) {got:?}, the Rust struct {:?}", want(name)))
                .collect();
            println!("{what}: {} entries, {} parameter structs differ from the Rust ones", params.len(), bad.len());
            bad
        }
        Err(e) => vec![format!("{what}: {e}")],
    }
}

/// The Rust struct an entry of rownorm.cu takes (normlab_kernels::params).
fn rownorm_abi(name: &str) -> (usize, usize) {
    use normlab_kernels::params::{BwdParams, FinalizeParams, FwdParams, FwdVarParams};
    if name.starts_with("nl_finalize_") {
        abi::<FinalizeParams>()
    } else if name.contains("_pure_") || name.contains("_e4m3_") {
        abi::<FwdVarParams>()
    } else if name.contains("_fwd_") {
        abi::<FwdParams>()
    } else {
        abi::<BwdParams>()
    }
}

/// The Rust struct an entry of residual.cu takes (normlab_kernels::residual).
fn update_abi(name: &str) -> (usize, usize) {
    use normlab_kernels::residual::{UpdBwdParams, UpdFinalizeParams, UpdFwdParams, FINALIZE_KERNEL};
    if name == FINALIZE_KERNEL {
        abi::<UpdFinalizeParams>()
    } else if name.contains("_fwd_") {
        abi::<UpdFwdParams>()
    } else {
        abi::<UpdBwdParams>()
    }
}

/// The Rust struct an entry of batchnorm.cu takes (normlab_kernels::batch::params); an entry
/// of no known kind gets (0, 0), which no PTX parameter has.
fn batch_abi(name: &str) -> (usize, usize) {
    use normlab_kernels::batch::params::*;
    match name {
        "nl_bn_finalize1" => abi::<Fin1Params>(),
        "nl_bn_finalize2" => abi::<Fin2Params>(),
        "nl_bn_frozen" => abi::<FrozenParams>(),
        n if n.starts_with("nl_bn_stats2_") => abi::<Stats2Params>(),
        n if n.starts_with("nl_bn_stats_") => abi::<Stats1Params>(),
        n if n.starts_with("nl_bn_cut_") => abi::<CutParams>(),
        n if n.starts_with("nl_bn_apply_") => abi::<ApplyParams>(),
        n if n.starts_with("nl_bn_reduce_") => abi::<RedParams>(),
        n if n.starts_with("nl_bn_bwd_finalize_") => abi::<BFinParams>(),
        n if n.starts_with("nl_bn_dx_") => abi::<DxParams>(),
        _ => (0, 0),
    }
}

fn gate(arch: u32, tc: &Toolchain, nvrtc: &Nvrtc) -> Vec<String> {
    let mut failures = Vec::new();
    let mut opts: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture=compute_{arch}"));
    opts.push(format!("-I{}", tc.include.display()));
    let t0 = std::time::Instant::now();
    let ptx = match nvrtc.compile(sources::ROWNORM_CU, sources::ROWNORM_CU_NAME, &opts) {
        Ok(p) => p,
        Err(e) => return vec![format!("compute_{arch}: {e}")],
    };
    let t_nvrtc = t0.elapsed();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ptx_path = dir.join(format!("rownorm_sm{arch}.ptx"));
    std::fs::write(&ptx_path, &ptx).unwrap();
    let t1 = std::time::Instant::now();
    let o = std::process::Command::new(&tc.ptxas)
        .args(["-v", &format!("-arch=sm_{arch}")])
        .arg(&ptx_path)
        .arg("-o")
        .arg(dir.join(format!("rownorm_sm{arch}.cubin")))
        .output()
        .expect("run ptxas");
    let report = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        return vec![format!("sm_{arch}: ptxas failed:\n{report}")];
    }
    std::fs::write(dir.join(format!("rownorm_sm{arch}.ptxas.txt")), &report).unwrap();
    let res = parse_ptxas(&report);
    let entries = ptx::entries(&ptx);
    failures.extend(check_abi(&format!("rownorm.cu compute_{arch}"), &ptx, rownorm_abi));
    let want: BTreeSet<String> = list::all_names().into_iter().collect();
    let got: BTreeSet<String> = entries.keys().cloned().collect();
    if want != got {
        failures.push(format!(
            "sm_{arch}: PTX entries differ from list::all_names(): missing {:?}, extra {:?}",
            want.difference(&got).collect::<Vec<_>>(),
            got.difference(&want).collect::<Vec<_>>()
        ));
    }
    let mut row: BTreeSet<String> = list::row_kernels().iter().map(|k| k.name()).collect();
    // Forward variants: the pure ones store 16-bit rows (16-byte vectors); the E4M3 ones store
    // one byte per element, 8 per thread and vector: 8-byte stores (st.global.wb.v2).
    let mut e4m3: BTreeSet<String> = BTreeSet::new();
    for v in list::variant_kernels() {
        match v.variant {
            list::FwdVariant::Pure => row.insert(v.name()),
            list::FwdVariant::E4M3 => e4m3.insert(v.name()),
        };
    }
    let mut spilled: Vec<String> = Vec::new();
    println!("sm_{arch}: NVRTC {:.1} s, ptxas {:.1} s", t_nvrtc.as_secs_f64(), t1.elapsed().as_secs_f64());
    println!("| kernel | sm | registers | spill st/ld (B) | stack (B) | static smem (B) | ld.global.v4 | st.global.v4 | st.global.v2 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for name in &want {
        let Some(r) = res.get(name) else {
            failures.push(format!("sm_{arch}: {name}: no ptxas report"));
            continue;
        };
        let body = entries.get(name).copied().unwrap_or("");
        // 128-bit global accesses whatever the cache qualifier (ld.global.nc.v4, st.global.wb.v4).
        let ld4 = body.lines().filter(|l| l.contains("ld.global") && l.contains(".v4")).count();
        let st4 = body.lines().filter(|l| l.contains("st.global") && l.contains(".v4")).count();
        let st2 = body.lines().filter(|l| l.contains("st.global") && l.contains(".v2")).count();
        println!(
            "| {name} | {arch} | {} | {}/{} | {} | {} | {ld4} | {st4} | {st2} |",
            r.registers, r.spill_stores, r.spill_loads, r.stack, r.smem
        );
        let allowed = LOCAL_MEMORY_BUDGET;
        if r.stack != 0 || r.spill_stores != 0 || r.spill_loads != 0 {
            spilled.push(format!("{name}: {}/{}/{} B", r.stack, r.spill_stores, r.spill_loads));
        }
        if r.stack > allowed.0 || r.spill_stores > allowed.1 || r.spill_loads > allowed.2 {
            failures.push(format!(
                "sm_{arch}: {name}: {} B spill stores, {} B spill loads, {} B stack frame (local memory)",
                r.spill_stores, r.spill_loads, r.stack
            ));
        }
        if r.registers == 0 || r.registers > REGISTER_CAP {
            failures.push(format!("sm_{arch}: {name}: {} registers (cap {REGISTER_CAP})", r.registers));
        }
        if row.contains(name) && (ld4 == 0 || st4 == 0) {
            failures.push(format!("sm_{arch}: {name}: no 128-bit global loads/stores ({ld4} ld.v4, {st4} st.v4)"));
        }
        if e4m3.contains(name) && (ld4 == 0 || st2 == 0) {
            failures.push(format!("sm_{arch}: {name}: no 128-bit loads / 64-bit fp8 stores ({ld4} ld.v4, {st2} st.v2)"));
        }
    }
    println!(
        "sm_{arch}: {} of {} kernels use local memory (stack/spill stores/spill loads; target 0, budget {:?}): {}",
        spilled.len(),
        want.len(),
        LOCAL_MEMORY_BUDGET,
        if spilled.is_empty() { "none".to_string() } else { spilled.join(", ") }
    );
    failures
}

#[test]
fn nvrtc_compile_gate() {
    let required = std::env::var("NORMLAB_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let tc = match toolchain() {
        Ok(tc) => tc,
        Err(why) if required => panic!("NORMLAB_REQUIRE_NVRTC=1 but the NVRTC toolchain is missing: {why}"),
        Err(why) => {
            eprintln!("\n*** NVRTC COMPILE GATE DID NOT RUN: {why}.\n*** Run `eval \"$(bash .ci/cuda-wheels.sh)\"` first; CI sets NORMLAB_REQUIRE_NVRTC=1 so that this fails there.\n");
            return;
        }
    };
    let nvrtc = Nvrtc::load(&tc.nvrtc);
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers.
    unsafe { (nvrtc.version)(&mut major, &mut minor) };
    println!("NVRTC {major}.{minor} from {}, ptxas {}", tc.nvrtc.display(), tc.ptxas.display());
    let (tc, nvrtc) = (&tc, &nvrtc);
    let failures: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = [80u32, 90].iter().map(|&a| s.spawn(move || gate(a, tc, nvrtc))).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "compile gate failed:\n{}", failures.join("\n"));
}

/// The weight-projection kernels (src/cuda/project.cu) through the same toolchain, with a
/// stricter budget: zero local memory (no stack frame, no spills) and at most `REGISTER_CAP`
/// registers, on sm_80 and sm_90; the PTX entries are exactly `list::project_names()`.
fn gate_project(arch: u32, tc: &Toolchain, nvrtc: &Nvrtc) -> Vec<String> {
    let mut failures = Vec::new();
    let mut opts: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture=compute_{arch}"));
    opts.push(format!("-I{}", tc.include.display()));
    let ptx = match nvrtc.compile(sources::PROJECT_CU, sources::PROJECT_CU_NAME, &opts) {
        Ok(p) => p,
        Err(e) => return vec![format!("project.cu compute_{arch}: {e}")],
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ptx_path = dir.join(format!("project_sm{arch}.ptx"));
    std::fs::write(&ptx_path, &ptx).unwrap();
    let o = std::process::Command::new(&tc.ptxas)
        .args(["-v", &format!("-arch=sm_{arch}")])
        .arg(&ptx_path)
        .arg("-o")
        .arg(dir.join(format!("project_sm{arch}.cubin")))
        .output()
        .expect("run ptxas");
    let report = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        return vec![format!("project.cu sm_{arch}: ptxas failed:\n{report}")];
    }
    let res = parse_ptxas(&report);
    let got: BTreeSet<String> = ptx::entries(&ptx).keys().cloned().collect();
    let want: BTreeSet<String> = list::project_names().into_iter().collect();
    if want != got {
        failures.push(format!("project.cu sm_{arch}: PTX entries {got:?}, expected {want:?}"));
    }
    for name in &want {
        let Some(r) = res.get(name) else {
            failures.push(format!("sm_{arch}: {name}: no ptxas report"));
            continue;
        };
        println!("| {name} | {arch} | {} | {}/{} | {} | {} |", r.registers, r.spill_stores, r.spill_loads, r.stack, r.smem);
        if r.stack != 0 || r.spill_stores != 0 || r.spill_loads != 0 {
            failures.push(format!("sm_{arch}: {name}: local memory {} B stack, {} B spill stores, {} B spill loads (must be 0)", r.stack, r.spill_stores, r.spill_loads));
        }
        if r.registers == 0 || r.registers > REGISTER_CAP {
            failures.push(format!("sm_{arch}: {name}: {} registers (cap {REGISTER_CAP})", r.registers));
        }
    }
    failures
}

#[test]
fn nvrtc_project_gate() {
    let required = std::env::var("NORMLAB_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let tc = match toolchain() {
        Ok(tc) => tc,
        Err(why) if required => panic!("NORMLAB_REQUIRE_NVRTC=1 but the NVRTC toolchain is missing: {why}"),
        Err(why) => {
            eprintln!("\n*** NVRTC PROJECT GATE DID NOT RUN: {why}.\n");
            return;
        }
    };
    let nvrtc = Nvrtc::load(&tc.nvrtc);
    println!("| kernel | sm | registers | spill st/ld (B) | stack (B) | static smem (B) |");
    println!("|---|---|---|---|---|---|");
    let failures: Vec<String> = [80u32, 90].iter().flat_map(|&a| gate_project(a, &tc, &nvrtc)).collect();
    assert!(failures.is_empty(), "project compile gate failed:\n{}", failures.join("\n"));
}

/// The fused residual-update kernels (src/cuda/residual.cu): zero local memory (no stack frame,
/// no spills) and at most `REGISTER_CAP` registers on sm_80 and sm_90, 128-bit global loads and
/// stores in every update kernel (not the finalize kernel); the PTX entries are exactly
/// `list::update_names()`.
fn gate_residual(arch: u32, tc: &Toolchain, nvrtc: &Nvrtc) -> Vec<String> {
    let mut failures = Vec::new();
    let mut opts: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture=compute_{arch}"));
    opts.push(format!("-I{}", tc.include.display()));
    let ptx = match nvrtc.compile(sources::RESIDUAL_CU, sources::RESIDUAL_CU_NAME, &opts) {
        Ok(p) => p,
        Err(e) => return vec![format!("residual.cu compute_{arch}: {e}")],
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ptx_path = dir.join(format!("residual_sm{arch}.ptx"));
    std::fs::write(&ptx_path, &ptx).unwrap();
    let o = std::process::Command::new(&tc.ptxas)
        .args(["-v", &format!("-arch=sm_{arch}")])
        .arg(&ptx_path)
        .arg("-o")
        .arg(dir.join(format!("residual_sm{arch}.cubin")))
        .output()
        .expect("run ptxas");
    let report = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        return vec![format!("residual.cu sm_{arch}: ptxas failed:\n{report}")];
    }
    std::fs::write(dir.join(format!("residual_sm{arch}.ptxas.txt")), &report).unwrap();
    let res = parse_ptxas(&report);
    let entries = ptx::entries(&ptx);
    failures.extend(check_abi(&format!("residual.cu compute_{arch}"), &ptx, update_abi));
    let got: BTreeSet<String> = entries.keys().cloned().collect();
    let want: BTreeSet<String> = list::update_names().into_iter().collect();
    if want != got {
        failures.push(format!("residual.cu sm_{arch}: PTX entries {got:?}, expected {want:?}"));
    }
    for name in &want {
        let Some(r) = res.get(name) else {
            failures.push(format!("sm_{arch}: {name}: no ptxas report"));
            continue;
        };
        let body = entries.get(name).copied().unwrap_or("");
        let ld4 = body.lines().filter(|l| l.contains("ld.global") && l.contains(".v4")).count();
        let st4 = body.lines().filter(|l| l.contains("st.global") && l.contains(".v4")).count();
        println!("| {name} | {arch} | {} | {}/{} | {} | {} | {ld4} | {st4} |", r.registers, r.spill_stores, r.spill_loads, r.stack, r.smem);
        if r.stack != 0 || r.spill_stores != 0 || r.spill_loads != 0 {
            failures.push(format!("sm_{arch}: {name}: local memory {} B stack, {} B spill stores, {} B spill loads (must be 0)", r.stack, r.spill_stores, r.spill_loads));
        }
        if r.registers == 0 || r.registers > REGISTER_CAP {
            failures.push(format!("sm_{arch}: {name}: {} registers (cap {REGISTER_CAP})", r.registers));
        }
        if name != normlab_kernels::residual::FINALIZE_KERNEL && (ld4 == 0 || st4 == 0) {
            failures.push(format!("sm_{arch}: {name}: no 128-bit global loads/stores ({ld4} ld.v4, {st4} st.v4)"));
        }
    }
    failures
}

#[test]
fn nvrtc_residual_gate() {
    let required = std::env::var("NORMLAB_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let tc = match toolchain() {
        Ok(tc) => tc,
        Err(why) if required => panic!("NORMLAB_REQUIRE_NVRTC=1 but the NVRTC toolchain is missing: {why}"),
        Err(why) => {
            eprintln!("\n*** NVRTC RESIDUAL GATE DID NOT RUN: {why}.\n");
            return;
        }
    };
    let nvrtc = Nvrtc::load(&tc.nvrtc);
    println!("| kernel | sm | registers | spill st/ld (B) | stack (B) | static smem (B) | ld.global.v4 | st.global.v4 |");
    println!("|---|---|---|---|---|---|---|---|");
    let (tc, nvrtc) = (&tc, &nvrtc);
    let failures: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = [80u32, 90].iter().map(|&a| s.spawn(move || gate_residual(a, tc, nvrtc))).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "residual compile gate failed:\n{}", failures.join("\n"));
}

/// The batch-norm kernels (src/cuda/batchnorm.cu): zero local memory (no stack frame, no spill
/// stores or loads) and at most `REGISTER_CAP` registers on sm_80 and sm_90; the PTX entries are
/// exactly `list::batch_names()`; the streaming kernels have 128-bit global loads (and apply/dx
/// 128-bit stores) on their aligned paths (`batch::plan::batch_vector_loads/stores`).
fn gate_batch(arch: u32, tc: &Toolchain, nvrtc: &Nvrtc) -> Vec<String> {
    use normlab_kernels::batch::plan::{batch_vector_loads, batch_vector_stores};
    let mut failures = Vec::new();
    let mut opts: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture=compute_{arch}"));
    opts.push(format!("-I{}", tc.include.display()));
    let t0 = std::time::Instant::now();
    let ptx = match nvrtc.compile(sources::BATCHNORM_CU, sources::BATCHNORM_CU_NAME, &opts) {
        Ok(p) => p,
        Err(e) => return vec![format!("batchnorm.cu compute_{arch}: {e}")],
    };
    let t_nvrtc = t0.elapsed();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ptx_path = dir.join(format!("batchnorm_sm{arch}.ptx"));
    std::fs::write(&ptx_path, &ptx).unwrap();
    let t1 = std::time::Instant::now();
    let o = std::process::Command::new(&tc.ptxas)
        .args(["-v", &format!("-arch=sm_{arch}")])
        .arg(&ptx_path)
        .arg("-o")
        .arg(dir.join(format!("batchnorm_sm{arch}.cubin")))
        .output()
        .expect("run ptxas");
    let report = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        return vec![format!("batchnorm.cu sm_{arch}: ptxas failed:\n{report}")];
    }
    std::fs::write(dir.join(format!("batchnorm_sm{arch}.ptxas.txt")), &report).unwrap();
    println!("batchnorm.cu sm_{arch}: NVRTC {:.1} s, ptxas {:.1} s", t_nvrtc.as_secs_f64(), t1.elapsed().as_secs_f64());
    let res = parse_ptxas(&report);
    let entries = ptx::entries(&ptx);
    failures.extend(check_abi(&format!("batchnorm.cu compute_{arch}"), &ptx, batch_abi));
    let got: BTreeSet<String> = entries.keys().cloned().collect();
    let want: BTreeSet<String> = list::batch_names().into_iter().collect();
    if want != got {
        failures.push(format!(
            "batchnorm.cu sm_{arch}: PTX entries differ from list::batch_names(): missing {:?}, extra {:?}",
            want.difference(&got).collect::<Vec<_>>(),
            got.difference(&want).collect::<Vec<_>>()
        ));
    }
    for name in &want {
        let Some(r) = res.get(name) else {
            failures.push(format!("sm_{arch}: {name}: no ptxas report"));
            continue;
        };
        let body = entries.get(name).copied().unwrap_or("");
        // Data vectors (uint4 / uint2 of 16-bit elements), not the float4 statistics.
        let ld4 = body.lines().filter(|l| l.contains("ld.global.nc.v4.u32")).count();
        let ld2 = body.lines().filter(|l| l.contains("ld.global.nc.v2.u32")).count();
        let st4 = body.lines().filter(|l| l.contains("st.global") && l.contains(".v4.u32")).count();
        println!("| {name} | {arch} | {} | {}/{} | {} | {} | {ld4} | {ld2} | {st4} |", r.registers, r.spill_stores, r.spill_loads, r.stack, r.smem);
        if r.stack != 0 || r.spill_stores != 0 || r.spill_loads != 0 {
            failures.push(format!("sm_{arch}: {name}: local memory {} B stack, {} B spill stores, {} B spill loads (must be 0)", r.stack, r.spill_stores, r.spill_loads));
        }
        if r.registers == 0 || r.registers > REGISTER_CAP {
            failures.push(format!("sm_{arch}: {name}: {} registers (cap {REGISTER_CAP})", r.registers));
        }
        match batch_vector_loads(name) {
            Some(16) if ld4 == 0 => failures.push(format!("sm_{arch}: {name}: no 128-bit read-only global loads (ld.global.nc.v4.u32)")),
            Some(8) if ld2 == 0 => failures.push(format!("sm_{arch}: {name}: no 64-bit read-only global loads (ld.global.nc.v2.u32)")),
            _ => {}
        }
        if batch_vector_stores(name) && st4 == 0 {
            failures.push(format!("sm_{arch}: {name}: no 128-bit global stores"));
        }
    }
    failures
}

#[test]
fn nvrtc_batch_gate() {
    let required = std::env::var("NORMLAB_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let tc = match toolchain() {
        Ok(tc) => tc,
        Err(why) if required => panic!("NORMLAB_REQUIRE_NVRTC=1 but the NVRTC toolchain is missing: {why}"),
        Err(why) => {
            eprintln!("\n*** NVRTC BATCH GATE DID NOT RUN: {why}.\n");
            return;
        }
    };
    let nvrtc = Nvrtc::load(&tc.nvrtc);
    println!("| kernel | sm | registers | spill st/ld (B) | stack (B) | static smem (B) | ld.nc.v4 | ld.nc.v2 | st.v4 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let (tc, nvrtc) = (&tc, &nvrtc);
    let failures: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = [80u32, 90].iter().map(|&a| s.spawn(move || gate_batch(a, tc, nvrtc))).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "batch compile gate failed:\n{}", failures.join("\n"));
}
