#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace deepinfer::cuda {

namespace {

__global__ void silu_mul_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t rows, int64_t inter,
                                float swiglu_limit) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * inter) return;
  const int64_t r = idx / inter, i = idx % inter;
  float g = to_float(gate_up[r * 2 * inter + i]);
  float u = to_float(gate_up[r * 2 * inter + inter + i]);
  clamp_swiglu(g, u, swiglu_limit);
  out[idx] = to_bf16(g / (1.0f + __expf(-g)) * u);
}

}  // namespace

void silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t rows, int64_t inter, float swiglu_limit,
              cudaStream_t stream) {
  const int64_t n = rows * inter;
  if (n == 0) return;
  launch_dependent(silu_mul_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, gate_up, out, rows, inter,
                   swiglu_limit);
}

}  // namespace deepinfer::cuda
