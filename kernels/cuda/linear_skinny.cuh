// A Linear layer for decode-sized batches, y[m, n] = x[m, k] . w[n, k]^T for m <= kLinearSkinnyMaxRows, on
// tensor cores, reading each weight row once for all m rows. Each block takes 64 output columns; where that
// leaves SMs idle (a 2048-column projection has 32 such tiles) k is also split over a thread block cluster of up
// to 8 blocks, whose fp32 partial sums meet in distributed shared memory in a fixed order. The first stages'
// weights of a resident weight load before the kernel waits for its predecessor (launch.cuh), so at decode sizes
// the weights' first latency overlaps the previous kernel's end; a weight an earlier kernel on the stream writes
// (dequantised into scratch) must say so (WeightSource::kFromStream) and loads after the wait. x, w bf16 row-major; y bf16 or fp32 ([m, n]); k a multiple of 8
// (16-byte pieces), x and w rows 16-byte aligned. num_sms: the device's SM count (it sizes the split).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/fp8_linear.cuh"   // Fp8BlockScales
#include "kernels/cuda/linear_gemv.cuh"  // GemvLayout

namespace deepinfer::cuda {

constexpr int64_t kLinearSkinnyMaxRows = 64;

// Whether the weight may be read before the previous kernel on the stream has finished: kResident (written at
// start-up) may; kFromStream (written by an earlier kernel of the step, e.g. FP8/FP4 weights dequantised into
// scratch) may not. Reading the latter early raced with its dequantisation (NaN rows under 2p2d on one GPU).
enum class WeightSource { kResident, kFromStream };

void linear_skinny(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n,
                   int64_t k, int num_sms, cudaStream_t stream, WeightSource source = WeightSource::kResident);

// The same with FP8 weights read as stored (fp8_linear.cuh's layout: e4m3 codes [n, k] and their Fp8BlockScales, ue8m0
// bytes a 32 x 32 block or fp32 a tile of a multiple of 32; resident): the codes staged in shared memory as bytes
// (half a bf16 weight's) and converted, times their scale, into the MMA fragments. With ue8m0 scales the conversions
// are exact, so the products are the bf16 kernel's on the dequantised weight up to the order of the fp32 sums; with
// fp32 scales each weight is rounded to bf16 once, as a bf16 copy of the dequantised weight would be. For m in
// (kLinearGemvMaxRows, kLinearSkinnyMaxRows] (decode batches), where dequantising into scratch for cuBLAS moved 5
// bytes a weight. n, k multiples of 32, k at most 16,384 (linear_skinny_fp8_supports).
bool linear_skinny_fp8_supports(int64_t n, int64_t k, Fp8BlockScales scales);
void linear_skinny_fp8(const __nv_bfloat16* x, const uint8_t* codes, Fp8BlockScales scales, void* y, bool y_fp32,
                       int64_t m, int64_t n, int64_t k, int num_sms, cudaStream_t stream);

// A batch of such products with strided operands (the per-head W_uv of MLA's absorbed form): product b computes
// y[b][t, i] = x[b][t, :] . w[b][i, :] at the offsets and row strides of `layout` (x_row, w_row, y_row; x's and
// w's multiples of 8). bf16 output.
void batched_linear_skinny(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t batch,
                           int64_t m, int64_t n, int64_t k, GemvLayout layout, int num_sms, cudaStream_t stream,
                           WeightSource source = WeightSource::kResident);

// Where this kernel beats cuBLAS for a Linear of m rows and an [n, k] weight, as measured on the H200
// (benchmarks/linear_bench: each launch over its own copy of the weight, from memory, not L2; and decode steps
// at DeepSeek-V2-Lite shape): up to 32 rows for weights up to 16 MB, at 33-64 rows only up to 8 MB; larger
// weights stream faster through cuBLAS (results/h200/design-measurements.md).
inline bool linear_skinny_preferred(int64_t m, int64_t n, int64_t k) {
  if (m > kLinearSkinnyMaxRows || k % 8 != 0) return false;
  return n * k <= (m <= 32 ? (int64_t{8} << 20) : (int64_t{4} << 20));
}

}  // namespace deepinfer::cuda
