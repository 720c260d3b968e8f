//! The GPU runtime's parts that need no GPU (feature `cuda`): NVRTC compilation of the embedded
//! kernels through cudarc, the disk cache with real images, and the weight projection's
//! parameter ABI (sizes and field offsets, read from a probe kernel's PTX). The other kernel
//! families' parameter ABI is checked by the kernels' NVRTC compile gate
//! (kernels/tests/nvrtc_gate.rs), on the PTX it compiles anyway.
//!
//! They need NVRTC and the CUDA headers (`eval "$(bash .ci/cuda-wheels.sh)"`). Without them
//! each test prints that it did not run, unless NORMLAB_REQUIRE_NVRTC=1 (CI), which makes a
//! missing toolchain a failure.
#![cfg(feature = "cuda")]

use std::collections::BTreeMap;
use std::mem::{align_of, size_of};

use normlab::gpu::cache::{CacheKey, DiskCache, ImageCache, ImageKind, Origin};
use normlab::gpu::nvrtc;
use normlab::gpu::GpuError;
use normlab_kernels::list;
use normlab_kernels::sources;

/// Options for `arch` as the runtime builds them, or None (with a notice) without a toolchain.
fn toolchain(test: &str) -> Option<Vec<String>> {
    let required = std::env::var("NORMLAB_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let inc = nvrtc::version().and_then(|_| nvrtc::include_dir());
    match inc {
        Ok(inc) => {
            let mut o: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
            o.push(format!("-I{}", inc.display()));
            Some(o)
        }
        Err(e) if required => panic!("NORMLAB_REQUIRE_NVRTC=1 but: {e}"),
        Err(e) => {
            eprintln!("*** {test} DID NOT RUN: {e}");
            None
        }
    }
}

fn with_arch(base: &[String], arch: &str) -> Vec<String> {
    let mut o = base.to_vec();
    o.push(format!("--gpu-architecture={arch}"));
    o
}

/// The copy kernel's source and options for `arch` (small: compiles in well under a second).
fn copy_source(arch: &str) -> (&'static str, Vec<String>) {
    let copy = normlab::gpu::copy::COPY;
    (copy.text, with_arch(&copy.options.iter().map(|s| s.to_string()).collect::<Vec<_>>(), arch))
}

#[test]
fn cubin_for_an_exact_architecture_ptx_otherwise() {
    if toolchain("CUBIN compile").is_none() {
        return;
    }
    let archs = nvrtc::supported_archs().unwrap();
    assert!(archs.contains(&80) && archs.contains(&90), "{archs:?}");
    let (arch, kind) = nvrtc::target_for(9, 0, &archs).unwrap();
    assert_eq!((arch.as_str(), kind), ("sm_90", ImageKind::Cubin));
    let (src, opts) = copy_source(&arch);
    let cubin = nvrtc::compile(src, "copy.cu", &opts, kind, &arch).unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF", "a CUBIN is an ELF image");
    let (src, opts) = copy_source("compute_80");
    let ptx = String::from_utf8(nvrtc::compile(src, "copy.cu", &opts, ImageKind::Ptx, "compute_80").unwrap()).unwrap();
    assert!(ptx.contains(".entry nl_copy16") && ptx.contains("ld.global.nc.v4"), "{ptx}");
}

#[test]
fn compile_errors_carry_the_nvrtc_log() {
    let Some(base) = toolchain("compile error") else { return };
    let bad = "extern \"C\" __global__ void broken(int* p) { p[0] = undefined_name; }";
    let e = nvrtc::compile(bad, "broken.cu", &with_arch(&base, "compute_80"), ImageKind::Ptx, "compute_80").unwrap_err();
    match &e {
        GpuError::Compile { source_name, arch, log, .. } => {
            assert_eq!((source_name.as_str(), arch.as_str()), ("broken.cu", "compute_80"));
            assert!(log.contains("undefined_name"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert!(e.to_string().contains("undefined_name"));
}

#[test]
fn disk_cache_with_real_images() {
    if toolchain("disk cache").is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("normlab-gpu-runtime-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (src, opts) = copy_source("sm_80");
    let key = CacheKey::new("copy", src, &opts, "sm_80", nvrtc::version().unwrap(), ImageKind::Cubin);
    let compile = || nvrtc::compile(src, "copy.cu", &opts, ImageKind::Cubin, "sm_80");
    let fail = |p: &std::path::Path, e: std::io::Error| panic!("{}: {e}", p.display());
    let (a, o1) = ImageCache::new(Some(DiskCache::new(&dir))).get_or_compile(&key, compile, fail).unwrap();
    let (b, o2) = ImageCache::new(Some(DiskCache::new(&dir))).get_or_compile(&key, || -> Result<Vec<u8>, GpuError> { panic!("must come from disk") }, fail).unwrap();
    assert_eq!((o1, o2), (Origin::Compiled, Origin::Disk));
    assert_eq!(a, b);
    assert_eq!(&a[..4], b"\x7fELF");
    // A truncated entry (as after a crash of a non-atomic writer) is recompiled.
    let path = DiskCache::new(&dir).path(&key);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let (c, o3) = ImageCache::new(Some(DiskCache::new(&dir))).get_or_compile(&key, compile, fail).unwrap();
    assert_eq!((o3, &c[..]), (Origin::Compiled, &a[..]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The values a probe kernel stores as constants into its `long long* out` parameter:
/// `mov.u64 %rdR, V;` then `st.global.u64 [%rdP+8k], %rdR;` (or an immediate) gives out[k] = V.
fn probe_stores(ptx: &str, entry: &str) -> BTreeMap<usize, i64> {
    let body = ptx.split(&format!(".entry {entry}(")).nth(1).unwrap_or_else(|| panic!("no entry {entry} in the PTX"));
    let body = &body[..body.find("ret;").unwrap_or(body.len())];
    let mut regs = BTreeMap::new();
    let mut out = BTreeMap::new();
    for line in body.lines().map(|l| l.trim().trim_end_matches(';')) {
        let Some((op, rest)) = line.split_once(char::is_whitespace) else { continue };
        let args: Vec<&str> = rest.split(',').map(str::trim).collect();
        if (op == "mov.u64" || op == "mov.b64") && args.len() == 2 {
            if let Ok(v) = args[1].parse::<i64>() {
                regs.insert(args[0].to_string(), v);
            }
        } else if op == "st.global.u64" && args.len() == 2 {
            let addr = args[0].trim_start_matches('[').trim_end_matches(']');
            let off: usize = addr.split_once('+').map_or(0, |(_, k)| k.parse().unwrap());
            let v = args[1].parse::<i64>().ok().or_else(|| regs.get(args[1]).copied()).unwrap_or_else(|| panic!("{entry}: store of a non-constant: {line}"));
            out.insert(off / 8, v);
        }
    }
    out
}

/// The weight-projection kernels (project.cu): every entry's single `.param` is `ProjParams`
/// (size and alignment in NVRTC's PTX). The descriptor table the kernels read from device
/// memory (`nlp::ProjDesc`, 48 bytes per matrix) is not a parameter, so the PTX signature does
/// not show it, and NVRTC has no `offsetof`: project.cu is compiled once more with a probe
/// kernel that stores the CUDA structs' sizes, alignments and field offsets (address
/// differences, constants after optimisation) and those constants, read from the PTX, must be
/// the Rust structs' (`offset_of!`).
#[test]
fn project_parameter_structs_match_the_kernels_abi() {
    use normlab_kernels::project::{ProjDesc, ProjParams};
    use std::mem::offset_of;
    let Some(base) = toolchain("projection parameter ABI check") else { return };
    let opts = with_arch(&base, "compute_90");
    let ptx = nvrtc::compile(sources::PROJECT_CU, sources::PROJECT_CU_NAME, &opts, ImageKind::Ptx, "compute_90").unwrap();
    let params = normlab_kernels::ptx::entry_params(&String::from_utf8(ptx).unwrap()).unwrap();
    assert_eq!(params.keys().cloned().collect::<Vec<_>>(), list::project_names());
    for (name, got) in &params {
        assert_eq!(*got, (align_of::<ProjParams>(), size_of::<ProjParams>()), "{name}: PTX parameter (align, size) vs the Rust struct");
    }
    let fields: Vec<(&str, &str, usize)> = vec![
        ("ProjDesc", "sizeof", size_of::<ProjDesc>()),
        ("ProjDesc", "alignof", align_of::<ProjDesc>()),
        ("ProjDesc", "w", offset_of!(ProjDesc, w)),
        ("ProjDesc", "rows", offset_of!(ProjDesc, rows)),
        ("ProjDesc", "cols", offset_of!(ProjDesc, cols)),
        ("ProjDesc", "block_start", offset_of!(ProjDesc, block_start)),
        ("ProjDesc", "radius", offset_of!(ProjDesc, radius)),
        ("ProjDesc", "axis", offset_of!(ProjDesc, axis)),
        ("ProjDesc", "kind", offset_of!(ProjDesc, kind)),
        ("ProjParams", "sizeof", size_of::<ProjParams>()),
        ("ProjParams", "alignof", align_of::<ProjParams>()),
        ("ProjParams", "desc", offset_of!(ProjParams, desc)),
        ("ProjParams", "count", offset_of!(ProjParams, count)),
        ("ProjParams", "counts", offset_of!(ProjParams, counts)),
    ];
    let stores: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(k, (ty, field, _))| match *field {
            "sizeof" | "alignof" => format!("  out[{k}] = (long long){field}(nlp::{ty});"),
            _ => format!("  {{ nlp::{ty} s{k}{{}}; out[{k}] = reinterpret_cast<const char*>(&s{k}.{field}) - reinterpret_cast<const char*>(&s{k}); }}"),
        })
        .collect();
    let probe = format!("{}\nextern \"C\" __global__ void nl_project_abi_probe(long long* out) {{\n{}\n}}\n", sources::PROJECT_CU, stores.join("\n"));
    let ptx = nvrtc::compile(&probe, "project_abi_probe.cu", &with_arch(&base, "compute_80"), ImageKind::Ptx, "compute_80").unwrap();
    let got = probe_stores(&String::from_utf8(ptx).unwrap(), "nl_project_abi_probe");
    assert_eq!(got.len(), fields.len(), "every probe value is a constant store: {got:?}");
    for (k, (ty, field, want)) in fields.iter().enumerate() {
        assert_eq!(got[&k], *want as i64, "nlp::{ty} {field}: CUDA (NVRTC) vs Rust");
    }
    eprintln!("{} projection entries: ProjParams {} B; ProjDesc {} B with the Rust field offsets", params.len(), size_of::<ProjParams>(), size_of::<ProjDesc>());
}
