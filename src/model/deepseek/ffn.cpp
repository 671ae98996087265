// Feed-forward blocks: the dense SwiGLU MLP and the MoE block (router, routed experts, shared experts).
#include <algorithm>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/router.h"
#include "src/model/deepseek/deepseek_model.h"
#include "src/model/router_params.h"

namespace deepinfer {

void DeepseekModel::dense_mlp(const Mlp& w, const float* x, float* out, int64_t num_tokens) const {
  const int64_t H = config_.hidden_size;
  const int64_t I = w.intermediate;
  std::vector<float> gate(num_tokens * I), up(num_tokens * I);
  cpu::linear(x, w.gate.weight, w.gate.bias, gate.data(), num_tokens, I, H);
  cpu::linear(x, w.up.weight, w.up.bias, up.data(), num_tokens, I, H);
  cpu::silu_mul(gate.data(), up.data(), gate.data(), num_tokens * I);
  cpu::linear(gate.data(), w.down.weight, w.down.bias, out, num_tokens, H, I);
}

void DeepseekModel::moe(const ExpertStore& store, int64_t moe_layer_idx, const Moe& w, const float* x, float* out,
                        int64_t num_tokens, ExpertDispatcher* experts) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const int64_t E = c.n_routed_experts;
  const int64_t K = c.num_experts_per_tok;

  std::vector<float> logits(num_tokens * E);
  cpu::linear(x, w.router, nullptr, logits.data(), num_tokens, E, H);
  const cpu::RouterParams params = router_params(c, w.correction_bias);
  std::vector<int32_t> topk_ids(num_tokens * K);
  std::vector<float> topk_weights(num_tokens * K);
  std::vector<float> scratch(2 * E + c.n_group);
  cpu::route_topk(logits.data(), num_tokens, params, topk_ids.data(), topk_weights.data(), scratch.data());

  if (w.has_shared) dense_mlp(w.shared, x, out, num_tokens);
  else std::fill_n(out, num_tokens * H, 0.0f);
  add_routed_experts(store, experts, moe_layer_idx, x, topk_ids.data(), topk_weights.data(), num_tokens, K, out,
                     c.batch_invariant);
}

}  // namespace deepinfer
