#include "src/bench/roofline.h"

#include <cmath>

namespace deepinfer {

ParameterCounts count_parameters(const ModelConfig& c) {
  ParameterCounts p;
  const double H = static_cast<double>(c.hidden_size), heads = static_cast<double>(c.num_attention_heads);
  const double q = c.q_lora_rank > 0 ? H * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * heads * c.qk_head_dim()
                                     : H * heads * c.qk_head_dim();
  p.attention_per_layer = q + H * c.kv_entry_dim() + c.kv_lora_rank + c.kv_lora_rank * heads * (c.qk_nope_head_dim + c.v_head_dim) +
                          heads * c.v_head_dim * H + 2 * H;
  p.dense_mlp = 3.0 * H * c.intermediate_size;
  p.moe_shared = H * c.n_routed_experts + 3.0 * H * c.moe_intermediate_size * c.n_shared_experts;
  p.expert = 3.0 * H * c.moe_intermediate_size;
  p.embedding = static_cast<double>(c.vocab_size) * H;
  p.lm_head = static_cast<double>(c.vocab_size) * H;
  return p;
}

double decode_floor_bytes(const ModelConfig& c, int64_t batch, int64_t context) {
  const ParameterCounts p = count_parameters(c);
  const double num_moe = static_cast<double>(c.num_hidden_layers - c.first_k_dense_replace);
  const double E = static_cast<double>(c.n_routed_experts), k = static_cast<double>(c.num_experts_per_tok);
  const double experts_hit = E > 0 ? E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(batch))) : 0.0;
  const double params = c.num_hidden_layers * p.attention_per_layer + c.first_k_dense_replace * p.dense_mlp +
                        num_moe * (p.moe_shared + experts_hit * p.expert) + p.lm_head;
  const double kv = static_cast<double>(batch) * context * c.num_hidden_layers * c.kv_entry_dim();
  return 2.0 * (params + kv);  // bf16
}

double prefill_floor_flops(const ModelConfig& c, int64_t num_prompts, int64_t prompt_len) {
  const ParameterCounts p = count_parameters(c);
  const double num_moe = static_cast<double>(c.num_hidden_layers - c.first_k_dense_replace);
  const double per_token = c.num_hidden_layers * p.attention_per_layer + c.first_k_dense_replace * p.dense_mlp +
                           num_moe * (p.moe_shared + c.num_experts_per_tok * p.expert);
  const double tokens = static_cast<double>(num_prompts) * prompt_len;
  // Causal attention: position i attends to i + 1 keys, q.k over qk_head_dim and p.v over v_head_dim per head.
  const double L = static_cast<double>(prompt_len);
  const double attention = num_prompts * c.num_hidden_layers * static_cast<double>(c.num_attention_heads) *
                           (c.qk_head_dim() + c.v_head_dim) * L * (L + 1);  // 2 flops x L(L+1)/2 pairs
  return 2.0 * per_token * tokens + attention + 2.0 * num_prompts * p.lm_head;  // logits of each prompt's last token
}

}  // namespace deepinfer
