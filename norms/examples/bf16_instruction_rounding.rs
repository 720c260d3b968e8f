//! The AVX512_BF16 rounding (`vcvtneps2bf16`) against `convert::f32_to_bf16` on every one of
//! the 2^32 f32 bit patterns: the claim behind the fused forward's bf16 stores on such CPUs
//! (`row::simd::avx512::Avx512Bf16`), that the instruction gives the same bits for every value
//! but the subnormals (which it reads as zero, so those registers are rounded by integer
//! operations instead). Prints the mismatches by class and exits with 1 if any is not a
//! subnormal. About 15 s on one core.
//!
//! ```text
//! cargo run --release -p normlab-norms --example bf16_instruction_rounding
//! ```

#[cfg(target_arch = "x86_64")]
fn main() {
    use normlab_norms::{bf16, convert};
    use std::arch::x86_64::*;

    if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16")) {
        println!("this CPU has no AVX512_BF16: nothing to check");
        return;
    }
    /// # Safety
    /// The CPU has AVX-512F and AVX512_BF16; `src` and `dst` have the same length, a multiple of 16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn by_instruction(src: &[f32], dst: &mut [u16]) {
        for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
            let r = _mm512_cvtneps_pbh(_mm512_loadu_ps(s.as_ptr()));
            _mm256_storeu_si256(d.as_mut_ptr() as *mut __m256i, std::mem::transmute::<__m256bh, __m256i>(r));
        }
    }
    const CHUNK: usize = 1 << 22;
    let mut src = vec![0f32; CHUNK];
    let (mut hw, mut want) = (vec![0u16; CHUNK], vec![bf16::ZERO; CHUNK]);
    let (mut subnormal, mut other) = (0u64, 0u64);
    for start in (0..1u64 << 32).step_by(CHUNK) {
        src.iter_mut().enumerate().for_each(|(i, v)| *v = f32::from_bits((start + i as u64) as u32));
        // SAFETY: detected above; equal lengths, a multiple of 16.
        unsafe { by_instruction(&src, &mut hw) };
        convert::f32_to_bf16(&src, &mut want);
        for ((s, h), w) in src.iter().zip(&hw).zip(&want) {
            if *h != w.to_bits() {
                if s.is_subnormal() {
                    subnormal += 1;
                } else {
                    other += 1;
                    if other <= 10 {
                        println!("{:#010x}: instruction {h:#06x}, convert {:#06x}", s.to_bits(), w.to_bits());
                    }
                }
            }
        }
    }
    println!("mismatches: {subnormal} subnormal, {other} other (of 2^32 bit patterns)");
    if other > 0 {
        std::process::exit(1);
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("not x86_64: nothing to check");
}
