#include "src/model/cuda/cuda_mlp.h"

#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace deepinfer {

void device_linear(Lane lane, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m,
                   int64_t n, int64_t k, int num_sms, cuda::WeightSource source) {
  if (m <= kGemvMaxLinearRows && k % 8 == 0) return cuda::linear_gemv(x, w, y, y_fp32, m, n, k, lane.stream);
  if (cuda::linear_skinny_preferred(m, n, k))
    return cuda::linear_skinny(x, w, y, y_fp32, m, n, k, num_sms, lane.stream, source);
  DI_CUBLAS_CHECK(cuda::linear_bf16(lane.blas, x, w, y, y_fp32, m, n, k));
}

void device_mlp(Lane lane, const DeviceMlp& w, const __nv_bfloat16* h, __nv_bfloat16* out, int64_t rows,
                int64_t hidden, ScratchPool& scratch, int num_sms, float swiglu_limit) {
  const int64_t H = hidden;
  auto* act = scratch.alloc<__nv_bfloat16>(rows * w.inter);
  if (rows <= kGemvMaxLinearRows && H % 8 == 0 && w.inter % 8 == 0) {  // a few rows: matrix-vector kernels
    cuda::swiglu_gemv(h, w.gate_up, act, rows, w.inter, H, swiglu_limit, lane.stream);
    cuda::linear_gemv(act, w.down, out, false, rows, H, w.inter, lane.stream);
    return;
  }
  auto* gate_up = scratch.alloc<__nv_bfloat16>(rows * 2 * w.inter);
  device_linear(lane, h, w.gate_up, gate_up, false, rows, 2 * w.inter, H, num_sms, w.source);
  cuda::silu_mul(gate_up, act, rows, w.inter, swiglu_limit, lane.stream);
  device_linear(lane, act, w.down, out, false, rows, H, w.inter, num_sms, w.source);
}

}  // namespace deepinfer
