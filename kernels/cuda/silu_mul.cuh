// SwiGLU: out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i] for a fused [rows, 2 * inter] gate/up
// projection (fp32 math, bf16 storage); swiglu_limit > 0 clamps first (clamp_swiglu, common.cuh), 0 does not.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t rows, int64_t inter, float swiglu_limit,
              cudaStream_t stream);

}  // namespace deepinfer::cuda
