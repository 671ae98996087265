#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_transposed.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear_gemv.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;

constexpr int kBatch = 4;  // 16-byte weight pieces a lane loads before using any

// One warp per output column n: its weight row in 16-byte pieces (lane, lane + 32, ...; kBatch in flight),
// each piece multiplied with the same piece of every x row (read through L1, shared by the block's warps).
// kSwiGLU: the column's gate row n and up row n + n_out together, and y = bf16(silu(gate) * up), clamped first
// at swiglu_limit with kClamp (clamp_swiglu; a template flag, so that the unclamped models' kernels are as before).
// Product blockIdx.y of a batch reads x, w and writes y at the layout's offsets (all 0 for one Linear).
template <int kRows, bool kSwiGLU, bool kClamp>
__global__ void linear_gemv_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int n,
                                   int k, GemvLayout layout, float swiglu_limit) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  constexpr int kWeightRows = kSwiGLU ? 2 : 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * kWarps + warp;
  if (col >= n) return;
  const int pieces = k / 8, x_row_pieces = static_cast<int>(layout.x_row / 8);
  x += blockIdx.y * layout.x_batch;
  w += blockIdx.y * layout.w_batch;
  const int64_t y_offset = blockIdx.y * layout.y_batch + col;
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
        const uint4 xv = __ldg(x_rows + t * x_row_pieces + i);
#pragma unroll
        for (int r = 0; r < kWeightRows; ++r) sum[r][t] += dot8(piece[r][u], xv);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    float total = warp_sum(sum[0][t]);
    if constexpr (kSwiGLU) {
      float up = warp_sum(sum[kWeightRows - 1][t]);
      if constexpr (kClamp) clamp_swiglu(total, up, swiglu_limit);
      total = total / (1.0f + expf(-total)) * up;
    }
    if (lane != 0) continue;
    if (y_fp32) static_cast<float*>(y)[y_offset + t * layout.y_row] = total;
    else static_cast<__nv_bfloat16*>(y)[y_offset + t * layout.y_row] = to_bf16(total);
  }
}

template <bool kSwiGLU, bool kClamp = false>
void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n, int64_t k,
            int64_t batch, GemvLayout layout, cudaStream_t stream, float swiglu_limit = 0.0f) {
  const dim3 blocks(static_cast<unsigned>((n + kWarps - 1) / kWarps), static_cast<unsigned>(batch));
  const int n32 = static_cast<int>(n), k32 = static_cast<int>(k);
  if (m == 0) return;
  with_gemv_row_count(m, [&](auto rows) {
    launch_dependent(linear_gemv_kernel<decltype(rows)::value, kSwiGLU, kClamp>, blocks, kWarps * 32, 0, stream, x, w, y,
                     y_fp32, n32, k32, layout, swiglu_limit);
  });
}

template <int kRows>
__global__ void __launch_bounds__(kGemvTransposedThreads)
    gemv_transposed_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int k, int n,
                           GemvLayout layout) {
  gemv_transposed_block<kRows>(x, w, y, k, n, layout, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
}

}  // namespace

void linear_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n,
                 int64_t k, cudaStream_t stream) {
  launch<false>(x, w, y, y_fp32, m, n, k, 1, GemvLayout{k, 0, 0, n, 0, 0}, stream);
}

void batched_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t batch, int64_t m,
                  int64_t n, int64_t k, GemvLayout layout, cudaStream_t stream) {
  if (batch == 0) return;
  launch<false>(x, w, y, false, m, n, k, batch, layout, stream);
}

void batched_gemv_transposed(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t batch,
                             int64_t m, int64_t n, int64_t k, GemvLayout layout, cudaStream_t stream) {
  if (batch == 0 || m == 0) return;
  const dim3 blocks(static_cast<unsigned>(gemv_transposed_column_blocks(n)), static_cast<unsigned>(batch));
  const int n32 = static_cast<int>(n), k32 = static_cast<int>(k);
  with_gemv_row_count(m, [&](auto rows) {
    launch_dependent(gemv_transposed_kernel<decltype(rows)::value>, blocks, kGemvTransposedThreads, 0, stream, x, w, y,
                     k32, n32, layout);
  });
}

void swiglu_gemv(const __nv_bfloat16* x, const __nv_bfloat16* gate_up, __nv_bfloat16* act, int64_t m, int64_t inter,
                 int64_t k, float swiglu_limit, cudaStream_t stream) {
  const GemvLayout layout{k, 0, 0, inter, 0, 0};
  if (swiglu_limit > 0.0f) launch<true, true>(x, gate_up, act, false, m, inter, k, 1, layout, stream, swiglu_limit);
  else launch<true>(x, gate_up, act, false, m, inter, k, 1, layout, stream);
}

}  // namespace deepinfer::cuda
