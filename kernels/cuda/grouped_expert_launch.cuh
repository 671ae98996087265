// What the grouped expert forms (moe_grouped_gemv_fp4, moe_grouped_gemv_fp8) share: a block a (expert, slice of
// outputs), each expert's input rows brought into shared memory a few at a time (load_chunk), and the host side that
// launches the gate/up kernel and then the down kernel (launch_grouped_experts).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"

namespace deepinfer::cuda {

// The grouped expert kernels' input rows: `count` bf16 rows of `cols` (a multiple of 8) into shared memory
// `dst_stride` apart, row v from src + source(v) * cols, between two barriers (the previous rows' reads done first).
template <class Source>
__device__ __forceinline__ void load_chunk(const __nv_bfloat16* src, Source source, int count, int64_t cols,
                                           int64_t dst_stride, __nv_bfloat16* dst) {
  __syncthreads();
  for (int64_t i = threadIdx.x; i < count * cols / 8; i += blockDim.x) {
    const int64_t v = i / (cols / 8), at = i % (cols / 8);
    reinterpret_cast<uint4*>(dst + v * dst_stride)[at] = reinterpret_cast<const uint4*>(src + source(v) * cols)[at];
  }
  __syncthreads();
}

// The two launches: gate/up over (experts, ceil(inter / acts_per_block)) blocks with `vecs` rows of `hidden` in
// shared memory, writing act_perm; down over (experts, ceil(hidden / rows_per_block)) blocks with `vecs` rows of
// `inter`, writing y_perm. The kernels take (x, token_of_row, offsets, hidden, inter, gate_up, swiglu_limit,
// act_perm) and (act_perm, offsets, hidden, inter, down, y_perm).
template <class GateUpKernel, class DownKernel, class Rows>
void launch_grouped_experts(GateUpKernel gate_up_kernel, DownKernel down_kernel, int64_t acts_per_block,
                            int64_t rows_per_block, int64_t vecs, unsigned threads, const __nv_bfloat16* x,
                            const int32_t* token_of_row, const int32_t* offsets, int64_t num_experts, int64_t hidden,
                            int64_t inter, Rows gate_up, Rows down, float swiglu_limit, __nv_bfloat16* act_perm,
                            float* y_perm, cudaStream_t stream) {
  const size_t gate_up_shared = vecs * hidden * sizeof(__nv_bfloat16);
  const dim3 gate_up_grid(static_cast<unsigned>(num_experts),
                          static_cast<unsigned>((inter + acts_per_block - 1) / acts_per_block));
  cudaFuncSetAttribute(gate_up_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(gate_up_shared));
  launch_dependent(gate_up_kernel, gate_up_grid, threads, gate_up_shared, stream, x, token_of_row, offsets, hidden,
                   inter, gate_up, swiglu_limit, act_perm);
  const size_t down_shared = vecs * inter * sizeof(__nv_bfloat16);
  const dim3 down_grid(static_cast<unsigned>(num_experts),
                       static_cast<unsigned>((hidden + rows_per_block - 1) / rows_per_block));
  cudaFuncSetAttribute(down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(down_shared));
  launch_dependent(down_kernel, down_grid, threads, down_shared, stream, act_perm, offsets, hidden, inter, down,
                   y_perm);
}

}  // namespace deepinfer::cuda
