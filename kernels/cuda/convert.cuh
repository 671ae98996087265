// Element-wise conversions and accumulation between bf16 and fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void bf16_to_f32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream);
void f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);
// y[i] = bf16(y[i] + x[i])
void add_f32_into_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);

}  // namespace deepinfer::cuda
