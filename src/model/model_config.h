// ModelConfig: what the engine needs of a Hugging Face config.json, interpreted as transformers does.
// Architectures (model_type) fill it through one registry (architectures.h); the forward pass reads only
// this struct, never the JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "src/model/v41/v41_config.h"

namespace deepinfer {

enum class RouterScoring { kSoftmax, kSigmoid, kSqrtSoftplus };
enum class GroupScore { kNone, kMax, kTop2Sum };  // how a group of experts is scored for group-limited top-k

struct RopeConfig {
  bool yarn = false;
  double theta = 10000.0;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  double attention_factor = 0.0;  // 0 = derived from factor/mscale as transformers does
  bool truncate = true;
  bool interleaved = true;  // DeepSeek checkpoints rotate interleaved pairs
};

// Quantised checkpoints (quantization_config): FP8 e4m3 weights with per-block scales, dequantised on load.
struct QuantizationConfig {
  bool fp8 = false;
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  bool ue8m0_scales = false;  // scale_fmt "ue8m0": one-byte power-of-two scales instead of fp32
  bool fp4_experts = false;   // expert_dtype "fp4" (V4.x): routed experts as packed e2m1, UE8M0 per 32 values
};

struct ModelConfig {
  std::string model_type;
  QuantizationConfig quantization;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense layers
  int64_t moe_intermediate_size = 0;  // each routed expert
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;

  // MLA
  int64_t q_lora_rank = 0;  // 0: queries come from one q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  RopeConfig rope;

  // MoE
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t first_k_dense_replace = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;  // > 0: the experts clamp their SwiGLU inputs (DeepSeek-V4.1); 0: plain SwiGLU
  bool norm_topk_prob = false;
  // Not from config.json: the routed experts a rank holds per MoE layer at most (its EP placement's slots per
  // rank; 0: every expert), which the CUDA expert store allocates. Set by app/spmd_setup.cpp and bench
  // --rank-slice.
  int64_t expert_slots_per_rank = 0;
  RouterScoring scoring = RouterScoring::kSoftmax;
  double router_temperature = 1.0;  // the router's logits are divided by it before scoring (V4.1's gate_temp)
  GroupScore group_score = GroupScore::kNone;
  bool has_correction_bias = false;  // V3: e_score_correction_bias, used for selection only

  int64_t num_nextn_predict_layers = 0;  // MTP layers stored after the main layers
  std::vector<int64_t> eos_token_ids;
  V41TextConfig v41;              // model_type deepseek_v41 only: the whole text configuration

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t kv_entry_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // cached floats per token and layer
  float softmax_scale() const;  // qk_head_dim^-0.5, times YaRN's mscale(mscale_all_dim)^2
  int64_t num_layers_with_mtp() const { return num_hidden_layers + num_nextn_predict_layers; }
  // A loader choice, not the checkpoint's (--batch-invariant, issue #28): the CUDA backend computes a row the same way
  // whatever the rows beside it — every Linear layer with one kernel (the skinny tensor-core one, in launches of at
  // most 64 rows: benchmarks/batch_invariance_probe), the routed experts through one path for every pair count (FP4:
  // the tile kernel; bf16: uniform chunks), V4.1's indexer without the cuBLAS products; decode steps with routed
  // experts run eagerly (that expert path reads the row counts on the host: CudaMoe::experts_stay_on_device). Not
  // covered yet: V2/V3's MLA kernels, the EP combine.
  bool batch_invariant = false;
  bool is_moe_layer(int64_t layer_idx) const;
};

// config.v41 is filled for deepseek_v41 configurations only.
inline bool is_v41(const ModelConfig& c) { return c.v41.num_hidden_layers > 0; }

// Reads config.json (or a bare .json file). Throws InputError for an unknown model_type, a missing key or
// a value out of range, naming the file and the key.
ModelConfig load_model_config(const std::filesystem::path& path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);

}  // namespace deepinfer
