// Rotary embedding in place on bf16 rows, with cos/sin computed from fp32 inverse frequencies:
// angle = positions[r / rows_per_position] * inv_freq[i], scaled by attention_factor (YaRN's mscale).
// Layout as the CPU op: interleaved pairs (2i, 2i+1) or halves (i, i + rope_dim/2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void rope(__nv_bfloat16* x, int64_t rows, int64_t row_stride, int64_t rope_dim, const int32_t* positions,
          int64_t rows_per_position, const float* inv_freq, float attention_factor, bool interleaved,
          cudaStream_t stream);

}  // namespace deepinfer::cuda
