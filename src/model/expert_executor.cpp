#include "src/model/expert_executor.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/ops.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

void LocalExpertExecutor::run(const CausalLm& model, int64_t moe_layer_idx, const float* x,
                              const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, float* out) {
  const ModelConfig& c = model.config();
  const int64_t H = c.hidden_size;
  const int64_t K = c.num_experts_per_tok;
  // Group the (token, weight) pairs by expert, then run each expert once over its tokens.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(c.n_routed_experts);
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t k = 0; k < K; ++k) routed[topk_ids[t * K + k]].emplace_back(t, topk_weights[t * K + k]);
  std::vector<float> inputs, outputs;
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    const auto& tokens = routed[e];
    if (tokens.empty()) continue;
    const auto n = static_cast<int64_t>(tokens.size());
    inputs.resize(n * H);
    outputs.resize(n * H);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + tokens[i].first * H, H, inputs.data() + i * H);
    model.compute_expert(moe_layer_idx, e, inputs.data(), n, outputs.data());
    for (int64_t i = 0; i < n; ++i) cpu::axpy(tokens[i].second, outputs.data() + i * H, out + tokens[i].first * H, H);
  }
}

}  // namespace deepinfer
