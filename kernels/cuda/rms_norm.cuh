// Fused residual add + RMSNorm in bf16 with fp32 math:
//   residual[r, :] += x[r, :];  out[r, :] = rms_norm(residual[r, :]) * weight
// One block per row. x may be null (plain RMSNorm of residual). No allocation; runs on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void add_rms_norm(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                  __nv_bfloat16* out, int64_t rows, int64_t dim, float eps, cudaStream_t stream);

// Plain RMSNorm over rows `x_stride` apart, into rows `out_stride` apart (out may alias x).
void rms_norm(const __nv_bfloat16* x, int64_t x_stride, const __nv_bfloat16* weight, __nv_bfloat16* out,
              int64_t out_stride, int64_t rows, int64_t dim, float eps, cudaStream_t stream);

}  // namespace deepinfer::cuda
