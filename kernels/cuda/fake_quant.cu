#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fake_quant.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/fp_formats.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

// format 8: fp8; 4: fp4 with e4m3 scales; 5: fp4 with power-of-two scales.
__global__ void __launch_bounds__(kThreads) fake_quant_kernel(__nv_bfloat16* x, int64_t num_blocks,
                                                              int64_t blocks_per_row, int64_t row_stride,
                                                              int64_t block, int format) {
  begin_dependent_kernel();
  const int64_t b = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (b >= num_blocks) return;
  __nv_bfloat16* v = x + (b / blocks_per_row) * row_stride + (b % blocks_per_row) * block;
  float amax = 0.0f;
  for (int64_t i = 0; i < block; ++i) amax = fmaxf(amax, fabsf(to_float(v[i])));
  const float scale = format == 8 ? fp8_block_scale(amax) : fp4_block_scale(amax, format == 4);
  for (int64_t i = 0; i < block; ++i)
    v[i] = to_bf16(format == 8 ? fp8_dequantised(to_float(v[i]), scale) : fp4_dequantised(to_float(v[i]), scale));
}

void launch(__nv_bfloat16* x, int64_t rows, int64_t n, int64_t row_stride, int64_t block, int format,
            cudaStream_t stream) {
  if (rows == 0 || n % block != 0) return;
  const int64_t num_blocks = rows * n / block;
  launch_dependent(fake_quant_kernel, static_cast<unsigned>((num_blocks + kThreads - 1) / kThreads), kThreads, 0,
                   stream, x, num_blocks, n / block, row_stride, block, format);
}

}  // namespace

void fake_quant_fp8(__nv_bfloat16* x, int64_t rows, int64_t n, int64_t row_stride, int64_t block,
                    cudaStream_t stream) {
  launch(x, rows, n, row_stride, block, 8, stream);
}

void fake_quant_fp4(__nv_bfloat16* x, int64_t rows, int64_t n, int64_t row_stride, int64_t block, bool e4m3_scales,
                    cudaStream_t stream) {
  launch(x, rows, n, row_stride, block, e4m3_scales ? 4 : 5, stream);
}

}  // namespace deepinfer::cuda
