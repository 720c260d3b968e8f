//! Compiles the CUDA kernels (src/cuda/*.cu, each including src/cuda/nl_common.cuh) as C++20
//! against the SIMT emulator (src/cuda/simt_cpu.h) into a static library, so `cargo test` runs
//! them on the CPU.
//! Only this crate pays this cost; the `normlab` crate does not depend on it.
//!
//! `NORMLAB_KERNELS_SANITIZE=thread|address` builds the C++ with that sanitizer (the sanitizer
//! job: kernels/sanitize.sh) and links its runtime.

fn main() {
    println!("cargo:rerun-if-changed=src/cuda/rownorm.cu");
    println!("cargo:rerun-if-changed=src/cuda/simt_cpu.h");
    println!("cargo:rerun-if-changed=src/cuda/nl_common.cuh");
    println!("cargo:rerun-if-changed=src/cpu/launch.cpp");
    println!("cargo:rerun-if-changed=src/cuda/project.cu");
    println!("cargo:rerun-if-changed=src/cpu/project_launch.cpp");
    println!("cargo:rerun-if-changed=src/cuda/residual.cu");
    println!("cargo:rerun-if-changed=src/cpu/residual_launch.cpp");
    println!("cargo:rerun-if-changed=src/cuda/batchnorm.cu");
    println!("cargo:rerun-if-changed=src/cpu/batch_launch.cpp");
    println!("cargo:rerun-if-env-changed=NORMLAB_KERNELS_SANITIZE");
    let sanitize = std::env::var("NORMLAB_KERNELS_SANITIZE").ok().filter(|s| !s.is_empty());
    let mut b = cc::Build::new();
    b.cpp(true)
        .std("c++20")
        .file("src/cpu/launch.cpp")
        .file("src/cpu/project_launch.cpp")
        .file("src/cpu/residual_launch.cpp")
        .file("src/cpu/batch_launch.cpp")
        .include("src/cuda")
        // CUDA code reinterprets 16-byte vectors as 16-bit elements in shared memory, which
        // nvcc accepts; tell g++ not to optimise on strict aliasing.
        .flag("-fno-strict-aliasing")
        .flag_if_supported("-Wno-unknown-pragmas")
        .flag_if_supported("-Wno-maybe-uninitialized")
        .flag_if_supported("-Wno-unused-parameter");
    match sanitize.as_deref() {
        Some(s @ ("thread" | "address")) => {
            b.opt_level(1).flag(format!("-fsanitize={s}")).flag("-fno-omit-frame-pointer").flag("-g");
            if s == "address" {
                b.flag("-fsanitize=undefined");
            }
            println!("cargo:rustc-link-arg=-fsanitize={s}");
            if s == "address" {
                println!("cargo:rustc-link-arg=-fsanitize=undefined");
            }
        }
        Some(other) => panic!("NORMLAB_KERNELS_SANITIZE must be 'thread' or 'address', got '{other}'"),
        None => {
            b.opt_level(2);
        }
    }
    b.compile("normlab_simt");
}
