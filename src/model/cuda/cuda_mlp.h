// The CUDA backend's Linear layers and SwiGLU MLPs, picked by shape: matrix-vector kernels for a few rows,
// the skinny tensor-core kernel where it beats cuBLAS (cuda::linear_skinny_preferred), cuBLAS otherwise.
// Shared by the model's blocks and its expert store.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_linear.cuh"     // Fp8BlockScales
#include "kernels/cuda/linear_skinny.cuh"  // WeightSource
#include "src/model/cuda/device_memory.h"

namespace deepinfer {

// Up to this many rows the Linear layers and dense MLPs run as matrix-vector kernels (linear_gemv.cuh), above
// through cuBLAS, which measured better from 4 rows (results/h200/design-measurements.md).
inline constexpr int64_t kGemvMaxLinearRows = 2;

// The FP8 GEMM's use (kernels/cuda/fp8_gemm.cuh), from the environment (fp8_gemm_from_environment):
// DEEPINFER_FP8_GEMM=0 turns it off, for A/B runs; =emulate keeps the bf16 GEMM but feeds it the activations as the FP8
// GEMM sees them, quantised and back, the reference the GEMM path is checked against. DEEPINFER_FP8_GEMM_FROM_ROWS:
// the fewest rows it takes. Default: from 3 rows (past the matrix-vector kernel), ahead of the skinny kernel's 3-64:
// V3's decode rank of 32P+144D at 8 / 16 / 32 / 64 requests 30.2 / 32.0 / 39.8 / 48.5 ms with the skinny kernel to 64
// rows, 27.5 / 30.2 / 34.3 / 41.1 with the FP8 GEMM from 3 (an H100, results/h200/v3/README.md).
enum class Fp8GemmMode { kOff, kOn, kEmulated };
struct Fp8Gemm {
  Fp8GemmMode mode = Fp8GemmMode::kOn;
  int64_t from_rows = 3;
};
Fp8Gemm fp8_gemm_from_environment();
// Room in `scratch` for [rows, k] activations quantised as the FP8 GEMM takes them (cuda::quantize_fp8_activations):
// e4m3 codes and a scale a row and 128 columns, fp8_activation_scale_stride(rows) apart.
struct Fp8Activations {
  uint8_t* codes;
  float* scales;
};
Fp8Activations fp8_activations(ScratchPool& scratch, int64_t rows, int64_t k);
// The emulated path's input: x [rows, k] quantised as the FP8 GEMM quantises it and turned back into bf16 in `out`
// (which may be x), the codes and scales in `scratch`.
void as_fp8_gemm_sees(const __nv_bfloat16* x, int64_t rows, int64_t k, __nv_bfloat16* out, ScratchPool& scratch,
                      cudaStream_t stream);

// Where a piece of a step runs: a stream and the cuBLAS handle bound to it.
struct Lane {
  cudaStream_t stream;
  cublasHandle_t blas;
  // One kernel for every row count (ModelConfig::batch_invariant): the skinny one, 64 rows a launch.
  bool batch_invariant = false;
  // FP8 weights from fp8_gemm.from_rows rows through the FP8 GEMM (activations quantised) where it takes the shape.
  Fp8Gemm fp8_gemm;
};

// A Linear's weight [n, k] as the checkpoint stores it: bf16, or FP8 e4m3 codes with a scale per block x block
// tile (kernels/cuda/fp8_linear.cuh): V4's ue8m0 bytes a 32 x 32 block, V3's fp32 a 128 x 128 one.
struct DeviceLinear {
  const __nv_bfloat16* bf16 = nullptr;  // [n, k], or
  const uint8_t* fp8 = nullptr;         // [n, k] codes and
  cuda::Fp8BlockScales scales{};             // their scales
  int64_t n = 0, k = 0;
  // Rows [first, first + count) (first a multiple of the scales' block where FP8).
  DeviceLinear rows(int64_t first, int64_t count) const;
};

struct DeviceMlp {
  DeviceLinear gate_up;  // [2 * inter, hidden]: gate rows, then up rows
  DeviceLinear down;     // [hidden, inter]
  int64_t inter = 0;
  cuda::WeightSource source = cuda::WeightSource::kResident;  // kFromStream: dequantised by an earlier kernel
};

// y[m, n] = x[m, k] . w[n, k]^T, y bf16 or fp32. A weight written on the stream during the step (dequantised)
// must be passed as kFromStream: the skinny kernel reads resident weights before its predecessor has finished.
void device_linear(Lane lane, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m,
                   int64_t n, int64_t k, int num_sms,
                   cuda::WeightSource source = cuda::WeightSource::kResident);
// Up to this many rows FP8 Linear layers run as the matrix-vector kernel (linear_gemv_fp8), from 3 (and up to
// kLinearSkinnyMaxRows) as the skinny tensor-core one: at 4 rows the latter was as fast or faster on every V4.1
// projection, at 8 up to 2.9x (benchmarks/fp8_linear_bench, results/h200/v41/fp8-linear-bench.txt).
inline constexpr int64_t kFp8GemvMaxLinearRows = 2;

// The same for a DeviceLinear. From lane.fp8_gemm.from_rows rows by the FP8 GEMM with the rows quantised into
// `scratch`, where cuda::fp8_gemm_supports the shape (V3's fp32 128 x 128 tiles on an sm_90 GPU, bf16 outputs); else
// FP8 weights are read as stored up to kLinearSkinnyMaxRows rows, and above dequantised into `scratch` for the bf16
// GEMM.
void device_linear(Lane lane, const __nv_bfloat16* x, const DeviceLinear& w, void* y, bool y_fp32, int64_t m,
                   ScratchPool& scratch, int num_sms, cuda::WeightSource source = cuda::WeightSource::kResident);
// out [rows, hidden] = down(silu(gate h) * (up h)), gate and up clamped first where swiglu_limit > 0 (V4.1),
// temporaries from `scratch`.
void device_mlp(Lane lane, const DeviceMlp& w, const __nv_bfloat16* h, __nv_bfloat16* out, int64_t rows,
                int64_t hidden, ScratchPool& scratch, int num_sms, float swiglu_limit = 0.0f);

}  // namespace deepinfer
