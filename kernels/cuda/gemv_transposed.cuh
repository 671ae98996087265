// The body of batched_gemv_transposed (linear_gemv.cuh) as a device function, for kernels that run it beside
// other work in one launch (mla_prepare_absorb), and the host helper that turns a row count into its template
// argument. Device code: include from .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear_gemv.cuh"

namespace deepinfer::cuda {

// run(std::integral_constant<int, m>{}) for 1 <= m <= kLinearGemvMaxRows (callers keep m there; larger reads as
// 8): the row count becomes a template argument, so the per-row sums stay in registers.
template <class Run>
void with_gemv_row_count(int64_t m, Run&& run) {
  static_assert(kLinearGemvMaxRows == 8, "one case per row count");
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

// y[b][t, :] = x[b][t, :] . W[b] with W[b] [k, n] row-major (rows of w_row elements): the reduction runs down
// the weight rows, so each thread owns one 16-byte piece of 8 output columns and a share of the rows (kGroupsT
// shares, kUnrollT rows in flight, reduced in shared memory), and a block of kGemvTransposedThreads covers
// kPiecesT pieces of columns of one product.
constexpr int kPiecesT = 16, kGroupsT = 16, kUnrollT = 8;
constexpr int kGemvTransposedThreads = kPiecesT * kGroupsT;

inline int64_t gemv_transposed_column_blocks(int64_t n) { return (n + kPiecesT * 8 - 1) / (kPiecesT * 8); }

// The block (column block `column_block`, product `product`) of the product above; it calls
// begin_dependent_kernel() itself. kEarly: the first weight rows load before the dependency wait (the weights
// must depend on nothing the step writes). At one row that paid (launch.cuh; W_uk's 128 rows are a single
// batch); at two rows it was slower, so it waits there (results/h200/design-measurements.md).
template <int kRows, bool kEarly = kRows == 1>
__device__ __forceinline__ void gemv_transposed_block(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                                      __nv_bfloat16* y, int k, int n, const GemvLayout& layout,
                                                      int column_block, int product) {
  __shared__ float partial[kGroupsT][kPiecesT * 8];
  const int piece = threadIdx.x % kPiecesT, group = threadIdx.x / kPiecesT;
  const int col = (column_block * kPiecesT + piece) * 8;
  x += product * layout.x_batch;
  w += product * layout.w_batch;
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
  __nv_bfloat16* out = y + product * layout.y_batch + column_block * kPiecesT * 8;
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
#pragma unroll
    for (int j = 0; j < 8; ++j) partial[group][piece * 8 + j] = sum[t][j];
    __syncthreads();
    if (threadIdx.x < kPiecesT * 8 && column_block * kPiecesT * 8 + threadIdx.x < n) {
      float total = 0.0f;
#pragma unroll
      for (int g = 0; g < kGroupsT; ++g) total += partial[g][threadIdx.x];
      out[t * layout.y_row + threadIdx.x] = to_bf16(total);
    }
    __syncthreads();
  }
}

}  // namespace deepinfer::cuda
