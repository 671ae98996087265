#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear_gemv.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kBatch = 4;  // 16-byte weight pieces a lane loads before using any

// One warp per output column n: its weight row in 16-byte pieces (lane, lane + 32, ...; kBatch in flight),
// each piece multiplied with the same piece of every x row (read through L1, shared by the block's warps).
// kSwiGLU: the column's gate row n and up row n + n_out together, and y = bf16(silu(gate) * up).
template <int kRows, bool kSwiGLU>
__global__ void linear_gemv_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int n,
                                   int k) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  constexpr int kWeightRows = kSwiGLU ? 2 : 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * kWarps + warp;
  if (col >= n) return;
  const int pieces = k / 8;
  const uint4* w_rows[kWeightRows];
#pragma unroll
  for (int r = 0; r < kWeightRows; ++r)
    w_rows[r] = reinterpret_cast<const uint4*>(w + (static_cast<int64_t>(r) * n + col) * k);
  const auto* x_rows = reinterpret_cast<const uint4*>(x);
  float sum[kWeightRows][kRows] = {};
  for (int base = lane; base < pieces; base += 32 * kBatch) {
    uint4 piece[kWeightRows][kBatch];
#pragma unroll
    for (int r = 0; r < kWeightRows; ++r)
#pragma unroll
      for (int u = 0; u < kBatch; ++u) piece[r][u] = base + 32 * u < pieces ? w_rows[r][base + 32 * u] : uint4{};
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + 32 * u;
      if (i >= pieces) break;
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        const uint4 xv = __ldg(x_rows + t * pieces + i);
#pragma unroll
        for (int r = 0; r < kWeightRows; ++r) sum[r][t] += dot8(piece[r][u], xv);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    float total = warp_sum(sum[0][t]);
    if constexpr (kSwiGLU) total = total / (1.0f + expf(-total)) * warp_sum(sum[kWeightRows - 1][t]);
    if (lane != 0) continue;
    if (y_fp32) static_cast<float*>(y)[static_cast<int64_t>(t) * n + col] = total;
    else static_cast<__nv_bfloat16*>(y)[static_cast<int64_t>(t) * n + col] = to_bf16(total);
  }
}

template <bool kSwiGLU>
void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n, int64_t k,
            cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  const int n32 = static_cast<int>(n), k32 = static_cast<int>(k);
  const auto run = [&](auto kernel) {
    launch_dependent(kernel, blocks, kWarps * 32, 0, stream, x, w, y, y_fp32, n32, k32);
  };
  switch (m) {  // the row count is a template argument: the per-row sums stay in registers
    case 0: return;
    case 1: return run(linear_gemv_kernel<1, kSwiGLU>);
    case 2: return run(linear_gemv_kernel<2, kSwiGLU>);
    case 3: return run(linear_gemv_kernel<3, kSwiGLU>);
    case 4: return run(linear_gemv_kernel<4, kSwiGLU>);
    case 5: return run(linear_gemv_kernel<5, kSwiGLU>);
    case 6: return run(linear_gemv_kernel<6, kSwiGLU>);
    case 7: return run(linear_gemv_kernel<7, kSwiGLU>);
    default: return run(linear_gemv_kernel<8, kSwiGLU>);  // callers keep m <= kLinearGemvMaxRows
  }
}

}  // namespace

void linear_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n,
                 int64_t k, cudaStream_t stream) {
  launch<false>(x, w, y, y_fp32, m, n, k, stream);
}

void swiglu_gemv(const __nv_bfloat16* x, const __nv_bfloat16* gate_up, __nv_bfloat16* act, int64_t m, int64_t inter,
                 int64_t k, cudaStream_t stream) {
  launch<true>(x, gate_up, act, false, m, inter, k, stream);
}

}  // namespace deepinfer::cuda
