#include "kernels/cpu/moe.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer::cpu {

void moe_experts(const float* x, const int32_t* ids, const float* weights, int64_t tokens, int64_t top_k,
                 int64_t hidden, int64_t inter, const float* gate_up, const float* down, float swiglu_limit, float* out) {
  std::vector<float> gate(inter), up(inter), y(hidden);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t e = ids[t * top_k + k];
      const float* xt = x + t * hidden;
      linear(xt, gate_up + e * 2 * inter * hidden, nullptr, gate.data(), 1, inter, hidden);
      linear(xt, gate_up + (e * 2 * inter + inter) * hidden, nullptr, up.data(), 1, inter, hidden);
      clamp_swiglu(gate.data(), up.data(), inter, swiglu_limit);
      silu_mul(gate.data(), up.data(), gate.data(), inter);
      linear(gate.data(), down + e * hidden * inter, nullptr, y.data(), 1, hidden, inter);
      axpy(weights[t * top_k + k], y.data(), out + t * hidden, hidden);
    }
}

void remap_expert_ids(const int32_t* ids, int64_t n, const int32_t* places, int64_t num_experts, int32_t elsewhere,
                      int32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ids[i] >= 0 && ids[i] < num_experts ? places[ids[i]] : elsewhere;
}

void add_rows_at(const float* src, const int32_t* src_rows, const int32_t* dst_rows, int64_t n, int64_t hidden,
                 float* dst) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hidden; ++j) dst[dst_rows[i] * hidden + j] += src[src_rows[i] * hidden + j];
}

void gather_rows(const float* src, const int32_t* src_rows, int64_t n, int64_t hidden, float* dst) {
  for (int64_t i = 0; i < n; ++i) std::copy_n(src + src_rows[i] * hidden, hidden, dst + i * hidden);
}

}  // namespace deepinfer::cpu
