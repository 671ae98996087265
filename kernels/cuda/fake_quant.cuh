// V4.1's in-forward quantisation on the GPU (the CPU forms, same names and semantics: kernels/cpu/fake_quant.h),
// on bf16 rows in place, `row_stride` elements apart (the first n of each quantised; every e4m3 or e2m1 value times its scale is exact in bf16). One thread per block of
// channels; the formats and rounding rules are kernels/fp_formats.h's, shared with the CPU, so the two agree bit
// for bit on the same inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void fake_quant_fp8(__nv_bfloat16* x, int64_t rows, int64_t n, int64_t row_stride, int64_t block,
                    cudaStream_t stream);
void fake_quant_fp4(__nv_bfloat16* x, int64_t rows, int64_t n, int64_t row_stride, int64_t block, bool e4m3_scales,
                    cudaStream_t stream);

}  // namespace deepinfer::cuda
