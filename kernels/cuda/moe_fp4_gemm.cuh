// The routed experts' projections at prefill with FP4 weights read as stored (Hopper has no FP4 MMA: the codes are
// decoded to bf16 in shared memory, a stage at a time, and multiplied on the tensor cores):
//   y[r, :] = bf16(x[r, :] . W[e]^T)  for the rows r of every tile (expert e, first row, rows)
// x: expert-sorted rows [*, k] (moe_permute's x_perm, or the act rows after it); W[e]: rows [n, k] of expert e as
// Fp4Rows (moe_fp4.cuh: e2m1 codes [E * n, k / 2], ue8m0 scales [E * n, k / 32]); y: [*, n]. Tiles list up to
// kFp4GemmTileRows rows of one expert each (fp4_gemm_tiles builds them from expert offsets). k a multiple of 32,
// n even. The CPU form: dequantise (kernels/cpu/fp4_weights.h) and multiply. About 180 TFLOP/s on the H200 at any
// rows an expert; cuBLAS on dequantised weights overtakes it from ~128 (CudaMoe::kFp4TileMaxRowsPerExpert). A decode
// form of it (a column of blocks per expert, the offsets read on the device) streamed the experts at 0.70 TB/s
// against the FP4 matrix-vector kernels' 1.0-1.3 TB/s at batch 8-64, and was withdrawn (commit 21d324c,
// results/h200/v41/moe-fp4-gemm-bench.txt).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/moe_fp4.cuh"

namespace deepinfer::cuda {

inline constexpr int64_t kFp4GemmTileRows = 64;

struct Fp4GemmTile {
  int32_t expert, first_row, rows;
};

// Every expert's rows [offsets[e], offsets[e + 1]) cut into tiles of at most kFp4GemmTileRows (experts without
// rows give none).
std::vector<Fp4GemmTile> fp4_gemm_tiles(const std::vector<int32_t>& offsets);

// stage_k: the k a pipeline stage covers, 32 (and 0) or 64 (where k allows; measured slower:
// benchmarks/moe_fp4_gemm_bench).
void moe_fp4_gemm(const __nv_bfloat16* x, Fp4Rows w, const Fp4GemmTile* tiles, int64_t num_tiles, int64_t n,
                  int64_t k, __nv_bfloat16* y, cudaStream_t stream, int stage_k = 0);

}  // namespace deepinfer::cuda
