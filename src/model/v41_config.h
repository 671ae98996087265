// The DeepSeek-V4.1-Flash text configuration (model_type deepseek_v41: text_config nested under the root, with
// quantization_config at the root), read and checked on its own: the model itself is not built yet (issue #10),
// so parse_model_config refuses it after this parse with what is missing. Names follow transformers'
// DeepseekV41TextConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer {

struct V41Quantization {
  std::string method;              // "fp8" or "" (bf16 checkpoint)
  int64_t block_rows = 0, block_cols = 0;  // weight_block_size of the FP8 scales
  std::string scale_format;        // "ue8m0"
  std::string expert_dtype;        // "fp4" or "fp8"
};

struct V41TextConfig {
  int64_t vocab_size = 0, hidden_size = 0, num_hidden_layers = 0, num_nextn_predict_layers = 0;
  // Attention: q low-rank, one shared K=V latent of head_dim (RoPE on its last qk_rope_head_dim channels),
  // grouped low-rank output projection.
  int64_t num_attention_heads = 0, head_dim = 0, qk_rope_head_dim = 0, q_lora_rank = 0, o_lora_rank = 0,
          o_groups = 0;
  int64_t sliding_window = 0;
  // Per layer, the draft layers' included (num_hidden_layers + num_nextn_predict_layers entries; those are 0):
  // 0 window only, 1 full-resolution shared KV (the decoder), r > 1 groups of r tokens pooled (the encoder).
  std::vector<int64_t> compress_ratios;
  std::vector<int64_t> kv_source_layer_ids, index_source_layer_ids, engram_layer_ids;
  int64_t candidate_source_layer_id = -1;  // -1: no two-level top-k
  int64_t candidate_topk_blocks = 0, candidate_block_size = 0;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  // Hyper-connections.
  int64_t hc_mult = 1, hc_sinkhorn_iters = 0;
  double hc_eps = 0.0;
  // MoE.
  int64_t n_routed_experts = 0, n_shared_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  std::string scoring_func, topk_method;
  bool norm_topk_prob = false;
  double gate_temp = 1.0, routed_scaling_factor = 1.0, swiglu_limit = 0.0;
  double rms_norm_eps = 0.0, rope_theta = 0.0, compress_rope_theta = 0.0;
  V41Quantization quantization;
};

// Absent schedules get transformers' defaults; throws InputError naming the file and key for a missing,
// mistyped or inconsistent entry (the same checks as DeepseekV41TextConfig, stated in our words).
V41TextConfig parse_v41_config(const nlohmann::json& root, const std::string& source);

}  // namespace deepinfer
