//! The device copy kernel: the bandwidth ceiling `normlab bench --device cuda` measures the
//! row kernels against. 16-byte vector loads and stores, 64-bit indices, grid-stride loop over
//! a persistent grid (as the row kernels), counted as bytes read + bytes written.

use crate::gpu::module::Source;

/// `nl_copy16(src, dst, n16)`: copies `n16` 16-byte vectors. No CUDA headers needed.
pub const COPY_CU: &str = r#"
extern "C" __global__ void __launch_bounds__(256) nl_copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n16) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) dst[i] = __ldg(src + i);
}
"#;

pub const COPY_THREADS: u32 = 256;

pub const COPY: Source = Source { module: "copy", file_name: "copy.cu", text: COPY_CU, options: &["--std=c++17"], needs_headers: false };
