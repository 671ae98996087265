#include "src/model/cuda/cuda_mlp.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace deepinfer {

DeviceLinear DeviceLinear::rows(int64_t first, int64_t count) const {
  DeviceLinear part = *this;
  part.n = count;
  if (bf16 != nullptr) part.bf16 = bf16 + first * k;
  if (fp8 != nullptr) {
    DI_CHECK(first % scales.block == 0, "FP8 rows from {}: not on a {}-row scale block", first, scales.block);
    part.fp8 = fp8 + first * k;
    part.scales = scales.from_row(first, k);
  }
  return part;
}

Fp8Gemm fp8_gemm_from_environment() {
  Fp8Gemm choice;
  const char* env = std::getenv("DEEPINFER_FP8_GEMM");
  const std::string_view value = env == nullptr ? "1" : env;
  DI_INPUT_CHECK(value == "1" || value == "0" || value == "emulate", "DEEPINFER_FP8_GEMM={}: expected 1, 0 or emulate",
                 value);
  choice.mode = value == "0" ? Fp8GemmMode::kOff : value == "emulate" ? Fp8GemmMode::kEmulated : Fp8GemmMode::kOn;
  if (const char* rows = std::getenv("DEEPINFER_FP8_GEMM_FROM_ROWS"); rows != nullptr && *rows != '\0') {
    char* end = nullptr;
    choice.from_rows = std::strtoll(rows, &end, 10);
    DI_INPUT_CHECK(*end == '\0' && choice.from_rows > kFp8GemvMaxLinearRows,
                   "DEEPINFER_FP8_GEMM_FROM_ROWS='{}': expected a row count above {}", rows, kFp8GemvMaxLinearRows);
  }
  return choice;
}

Fp8Activations fp8_activations(ScratchPool& scratch, int64_t rows, int64_t k) {
  return {scratch.alloc<uint8_t>(rows * k),
          scratch.alloc<float>(cuda::fp8_activation_scale_stride(rows) * (k / cuda::kFp8GemmGroup))};
}

void as_fp8_gemm_sees(const __nv_bfloat16* x, int64_t rows, int64_t k, __nv_bfloat16* out, ScratchPool& scratch,
                      cudaStream_t stream) {
  const Fp8Activations q = fp8_activations(scratch, rows, k);
  cuda::quantize_fp8_activations(x, k, rows, k, q.codes, q.scales, stream);
  cuda::dequantize_fp8_activations(q.codes, q.scales, rows, k, out, stream);
}

namespace {

// The batch-invariant form: the skinny kernel, whose output row does not depend on the other rows of its launch
// (results/h200/batch-invariance), over launches of at most kLinearSkinnyMaxRows rows.
template <class Launch>
void in_skinny_launches(const __nv_bfloat16* x, void* y, bool y_fp32, int64_t m, int64_t n, int64_t k, Launch launch) {
  const size_t y_bytes = y_fp32 ? sizeof(float) : sizeof(__nv_bfloat16);
  for (int64_t first = 0; first < m; first += cuda::kLinearSkinnyMaxRows)
    launch(x + first * k, static_cast<char*>(y) + first * n * y_bytes, std::min(cuda::kLinearSkinnyMaxRows, m - first));
}

}  // namespace

void device_linear(Lane lane, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m,
                   int64_t n, int64_t k, int num_sms, cuda::WeightSource source) {
  if (lane.batch_invariant)
    return in_skinny_launches(x, y, y_fp32, m, n, k, [&](const __nv_bfloat16* xs, void* ys, int64_t rows) {
      cuda::linear_skinny(xs, w, ys, y_fp32, rows, n, k, num_sms, lane.stream, source);
    });
  if (m <= kGemvMaxLinearRows && k % 8 == 0) return cuda::linear_gemv(x, w, y, y_fp32, m, n, k, lane.stream);
  if (cuda::linear_skinny_preferred(m, n, k))
    return cuda::linear_skinny(x, w, y, y_fp32, m, n, k, num_sms, lane.stream, source);
  DI_CUBLAS_CHECK(cuda::linear_bf16(lane.blas, x, w, y, y_fp32, m, n, k));
}

void device_linear(Lane lane, const __nv_bfloat16* x, const DeviceLinear& w, void* y, bool y_fp32, int64_t m,
                   ScratchPool& scratch, int num_sms, cuda::WeightSource source) {
  if (w.fp8 == nullptr) return device_linear(lane, x, w.bf16, y, y_fp32, m, w.n, w.k, num_sms, source);
  const bool skinny = cuda::linear_skinny_fp8_supports(w.n, w.k, w.scales);
  if (lane.batch_invariant && skinny)
    return in_skinny_launches(x, y, y_fp32, m, w.n, w.k, [&](const __nv_bfloat16* xs, void* ys, int64_t rows) {
      cuda::linear_skinny_fp8(xs, w.fp8, w.scales, ys, y_fp32, rows, w.n, w.k, num_sms, lane.stream);
    });
  if (m <= kFp8GemvMaxLinearRows && !lane.batch_invariant)
    return cuda::linear_gemv_fp8(x, w.k, w.fp8, w.scales, y, w.n, y_fp32, m, w.n, w.k, lane.stream);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (lane.fp8_gemm.mode != Fp8GemmMode::kOff && m >= lane.fp8_gemm.from_rows && !y_fp32 && !lane.batch_invariant &&
      aligned(x) && aligned(y) && cuda::fp8_gemm_supports(m, w.n, w.k, w.scales, w.n)) {
    if (lane.fp8_gemm.mode == Fp8GemmMode::kEmulated) {  // the quantised activations back to bf16, dequantised path
      auto* x_seen = scratch.alloc<__nv_bfloat16>(m * w.k);
      as_fp8_gemm_sees(x, m, w.k, x_seen, scratch, lane.stream);
      auto* dequantised = scratch.alloc<__nv_bfloat16>(w.n * w.k);
      cuda::dequantize_fp8_blocks(w.fp8, w.scales, w.n, w.k, dequantised, lane.stream);
      return device_linear(lane, x_seen, dequantised, y, y_fp32, m, w.n, w.k, num_sms,
                           cuda::WeightSource::kFromStream);
    }
    const Fp8Activations q = fp8_activations(scratch, m, w.k);
    cuda::quantize_fp8_activations(x, w.k, m, w.k, q.codes, q.scales, lane.stream);
    const size_t workspace_bytes = cuda::fp8_gemm_workspace_bytes(m, w.n, w.k);
    void* workspace = workspace_bytes > 0 ? scratch.alloc<uint8_t>(workspace_bytes) : nullptr;
    DI_CUDA_CHECK(cudaGetLastError());  // (CUTLASS's launch clears a pending error)
    DI_CHECK(cuda::fp8_gemm(q.codes, q.scales, w.fp8, static_cast<const float*>(w.scales.data),
                            static_cast<__nv_bfloat16*>(y), w.n, m, w.n, w.k, workspace, workspace_bytes, lane.stream),
             "the FP8 GEMM refused {} x {} x {}", m, w.n, w.k);
    return;
  }
  if (m <= cuda::kLinearSkinnyMaxRows && skinny && !lane.batch_invariant)
    return cuda::linear_skinny_fp8(x, w.fp8, w.scales, y, y_fp32, m, w.n, w.k, num_sms, lane.stream);
  auto* dequantised = scratch.alloc<__nv_bfloat16>(w.n * w.k);
  cuda::dequantize_fp8_blocks(w.fp8, w.scales, w.n, w.k, dequantised, lane.stream);
  device_linear(lane, x, dequantised, y, y_fp32, m, w.n, w.k, num_sms, cuda::WeightSource::kFromStream);
}

void device_mlp(Lane lane, const DeviceMlp& w, const __nv_bfloat16* h, __nv_bfloat16* out, int64_t rows,
                int64_t hidden, ScratchPool& scratch, int num_sms, float swiglu_limit) {
  const int64_t H = hidden;
  auto* act = scratch.alloc<__nv_bfloat16>(rows * w.inter);
  const bool bf16 = w.gate_up.fp8 == nullptr && w.down.fp8 == nullptr;
  if (bf16 && rows <= kGemvMaxLinearRows && H % 8 == 0 && w.inter % 8 == 0 && !lane.batch_invariant) {  // a few rows
    cuda::swiglu_gemv(h, w.gate_up.bf16, act, rows, w.inter, H, swiglu_limit, lane.stream);
    cuda::linear_gemv(act, w.down.bf16, out, false, rows, H, w.inter, lane.stream);
    return;
  }
  auto* gate_up = scratch.alloc<__nv_bfloat16>(rows * 2 * w.inter);
  device_linear(lane, h, w.gate_up, gate_up, false, rows, scratch, num_sms, w.source);
  cuda::silu_mul(gate_up, act, rows, w.inter, swiglu_limit, lane.stream);
  device_linear(lane, act, w.down, out, false, rows, scratch, num_sms, w.source);
}

}  // namespace deepinfer
