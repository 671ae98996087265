#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear_gemv.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;

// run(std::integral_constant<int, m>{}) for 1 <= m <= kLinearGemvMaxRows (callers keep m there; larger reads as
// 8): the row count becomes a template argument, so the per-row sums stay in registers.
template <class Run>
void with_row_count(int64_t m, Run&& run) {
  switch (m) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    case 4: return run(std::integral_constant<int, 4>{});
    case 5: return run(std::integral_constant<int, 5>{});
    case 6: return run(std::integral_constant<int, 6>{});
    case 7: return run(std::integral_constant<int, 7>{});
    default: return run(std::integral_constant<int, 8>{});
  }
}
constexpr int kBatch = 4;  // 16-byte weight pieces a lane loads before using any

// One warp per output column n: its weight row in 16-byte pieces (lane, lane + 32, ...; kBatch in flight),
// each piece multiplied with the same piece of every x row (read through L1, shared by the block's warps).
// kSwiGLU: the column's gate row n and up row n + n_out together, and y = bf16(silu(gate) * up).
// Product blockIdx.y of a batch reads x, w and writes y at the layout's offsets (all 0 for one Linear).
template <int kRows, bool kSwiGLU>
__global__ void linear_gemv_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int n,
                                   int k, GemvLayout layout) {
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
    if constexpr (kSwiGLU) total = total / (1.0f + expf(-total)) * warp_sum(sum[kWeightRows - 1][t]);
    if (lane != 0) continue;
    if (y_fp32) static_cast<float*>(y)[y_offset + t * layout.y_row] = total;
    else static_cast<__nv_bfloat16*>(y)[y_offset + t * layout.y_row] = to_bf16(total);
  }
}

template <bool kSwiGLU>
void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n, int64_t k,
            int64_t batch, GemvLayout layout, cudaStream_t stream) {
  const dim3 blocks(static_cast<unsigned>((n + kWarps - 1) / kWarps), static_cast<unsigned>(batch));
  const int n32 = static_cast<int>(n), k32 = static_cast<int>(k);
  if (m == 0) return;
  with_row_count(m, [&](auto rows) {
    launch_dependent(linear_gemv_kernel<decltype(rows)::value, kSwiGLU>, blocks, kWarps * 32, 0, stream, x, w, y,
                     y_fp32, n32, k32, layout);
  });
}

// y[b][t, :] = x[b][t, :] . W[b] with W[b] [k, n] row-major (rows of w_row elements): the reduction runs down
// the weight rows, so each thread owns one 16-byte piece of 8 output columns and a share of the rows (kGroupsT
// shares, kUnrollT rows in flight, reduced in shared memory), and a block covers kPiecesT pieces of columns of
// one product.
constexpr int kPiecesT = 16, kGroupsT = 16, kUnrollT = 8;

// At one row the first weight rows load before the dependency wait (launch.cuh; the weights depend on nothing
// this step writes, and W_uk's 128 rows are a single batch): batch 1 context 1024 2.210-2.219 -> 2.180-2.205 ms a
// step, 4096 2.361-2.366 -> 2.348-2.355, 512 2.178-2.201 -> 2.164-2.186; at two rows batch 2 was 0.4% slower
// (2.965-2.985 against 2.956-2.979), so it waits there.
template <int kRows, bool kEarly = kRows == 1>
__global__ void __launch_bounds__(kPiecesT* kGroupsT)
    gemv_transposed_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int k, int n,
                           GemvLayout layout) {
  __shared__ float partial[kGroupsT][kPiecesT * 8];
  const int piece = threadIdx.x % kPiecesT, group = threadIdx.x / kPiecesT;
  const int col = (blockIdx.x * kPiecesT + piece) * 8;
  x += blockIdx.y * layout.x_batch;
  w += blockIdx.y * layout.w_batch;
  uint4 pieces[kUnrollT];
  auto load = [&](int base) {
#pragma unroll
    for (int u = 0; u < kUnrollT; ++u) {
      const int row = base + u * kGroupsT;
      pieces[u] = row < k ? *reinterpret_cast<const uint4*>(w + static_cast<int64_t>(row) * layout.w_row + col)
                          : uint4{};
    }
  };
  if (kEarly && col < n) load(group);
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  float sum[kRows][8] = {};
  if (col < n) {
    for (int base = group; base < k; base += kGroupsT * kUnrollT) {
      if (!kEarly || base != group) load(base);
#pragma unroll
      for (int u = 0; u < kUnrollT; ++u) {
        const int row = base + u * kGroupsT;
        if (row >= k) break;
        const auto* wp = reinterpret_cast<const __nv_bfloat162*>(&pieces[u]);
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          const float xv = to_float(x[t * layout.x_row + row]);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 wv = __bfloat1622float2(wp[j]);
            sum[t][2 * j] += xv * wv.x;
            sum[t][2 * j + 1] += xv * wv.y;
          }
        }
      }
    }
  }
  __nv_bfloat16* out = y + blockIdx.y * layout.y_batch + blockIdx.x * kPiecesT * 8;
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
#pragma unroll
    for (int j = 0; j < 8; ++j) partial[group][piece * 8 + j] = sum[t][j];
    __syncthreads();
    if (threadIdx.x < kPiecesT * 8 && blockIdx.x * kPiecesT * 8 + threadIdx.x < n) {
      float total = 0.0f;
#pragma unroll
      for (int g = 0; g < kGroupsT; ++g) total += partial[g][threadIdx.x];
      out[t * layout.y_row + threadIdx.x] = to_bf16(total);
    }
    __syncthreads();
  }
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
  const dim3 blocks(static_cast<unsigned>((n + kPiecesT * 8 - 1) / (kPiecesT * 8)), static_cast<unsigned>(batch));
  const int n32 = static_cast<int>(n), k32 = static_cast<int>(k);
  with_row_count(m, [&](auto rows) {
    launch_dependent(gemv_transposed_kernel<decltype(rows)::value>, blocks, kPiecesT * kGroupsT, 0, stream, x, w, y,
                     k32, n32, layout);
  });
}

void swiglu_gemv(const __nv_bfloat16* x, const __nv_bfloat16* gate_up, __nv_bfloat16* act, int64_t m, int64_t inter,
                 int64_t k, cudaStream_t stream) {
  launch<true>(x, gate_up, act, false, m, inter, k, 1, GemvLayout{k, 0, 0, inter, 0, 0}, stream);
}

}  // namespace deepinfer::cuda
