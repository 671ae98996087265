// The DeepSeek V2/V3 forward pass on the CPU reference ops: embedding, MLA attention over the paged latent
// cache, dense MLP or MoE (router, routed experts, shared experts), final norm, LM head. fp32 throughout.
#pragma once

#include <memory>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/causal_lm.h"
#include "src/model/expert_dispatch.h"
#include "src/model/host_expert_store.h"
#include "src/model/forward_batch.h"
#include "src/model/mla_kv_cache.h"
#include "src/model/model_config.h"
#include "src/model/rope.h"
#include "src/model/weights.h"

namespace deepinfer {

class DeepseekModel final : public CausalLm {
 public:
  DeepseekModel(ModelConfig config, WeightStore weights);

  const ModelConfig& config() const override { return config_; }
  // A host cache shaped for this model's main layers.
  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override;

  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts = nullptr) const override;
  ExpertStore& experts() override { return experts_; }
  const ExpertStore& experts() const override { return experts_; }
  size_t kv_cache_bytes_per_token() const override { return config_.num_hidden_layers * config_.kv_entry_dim() * 4; }

 private:
  struct Mlp {
    const float* gate = nullptr;
    const float* gate_bias = nullptr;
    const float* up = nullptr;
    const float* up_bias = nullptr;
    const float* down = nullptr;
    const float* down_bias = nullptr;
    int64_t intermediate = 0;
  };
  struct Attention {
    const float* q_a = nullptr;
    const float* q_a_bias = nullptr;
    const float* q_a_norm = nullptr;
    const float* q_b = nullptr;
    const float* q = nullptr;
    const float* kv_a = nullptr;
    const float* kv_a_bias = nullptr;
    const float* kv_a_norm = nullptr;
    const float* kv_b = nullptr;
    const float* o = nullptr;
    const float* o_bias = nullptr;
  };
  struct Moe {
    const float* router = nullptr;
    const float* correction_bias = nullptr;
    Mlp shared;
    bool has_shared = false;
  };
  struct Layer {
    const float* input_norm = nullptr;
    const float* post_attention_norm = nullptr;
    Attention attention;
    bool is_moe = false;
    Mlp mlp;
    Moe moe;
  };

  Mlp resolve_mlp(const std::string& prefix, int64_t intermediate) const;

  // x [T, hidden] -> out [T, hidden]. mla_attention.cpp
  void attention(int64_t layer_idx, const Attention& w, const ForwardBatch& batch, const int32_t* positions,
                 const float* cos, const float* sin, const float* x, float* out, MlaKvCache& cache) const;
  // ffn.cpp
  void dense_mlp(const Mlp& w, const float* x, float* out, int64_t num_tokens) const;
  void moe(int64_t moe_layer_idx, const Moe& w, const float* x, float* out, int64_t num_tokens,
           ExpertDispatcher* experts) const;

  ModelConfig config_;
  WeightStore weights_;
  RotaryTable rotary_;
  HostExpertStore experts_;  // the routed experts, out of weights_
  std::vector<Layer> layers_;
  const float* embed_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* lm_head_ = nullptr;
};

}  // namespace deepinfer
