#include "src/bench/roofline.h"

#include <algorithm>
#include <cmath>

namespace deepinfer {

ExpertWork uniform_expert_work(const ModelConfig& c, int64_t tokens) {
  const double E = static_cast<double>(c.n_routed_experts), k = static_cast<double>(c.num_experts_per_tok);
  if (E <= 0) return {};
  return {E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(tokens))), static_cast<double>(tokens) * k};
}

double StepWork::bytes_ms() const { return bytes / kH200CopyBytesPerS * 1e3; }
double StepWork::flops_ms() const { return (fp8_flops / kH200Fp8FlopsPerS + bf16_flops / kH200Bf16FlopsPerS) * 1e3; }
double StepWork::floor_ms() const { return std::max(bytes_ms(), flops_ms()); }

}  // namespace deepinfer
