// The DeepSeek V2/V3 forward pass on the CPU reference ops: embedding, MLA attention over the paged latent
// cache, dense MLP or MoE (router, routed experts, shared experts), final norm, LM head. fp32 throughout.
#pragma once

#include <memory>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/host_causal_lm.h"
#include "src/model/deepseek_layers.h"
#include "src/model/expert_dispatch.h"
#include "src/model/forward_batch.h"
#include "src/model/mla_kv_cache.h"
#include "src/model/model_config.h"
#include "src/model/rope.h"
#include "src/model/weights.h"

namespace deepinfer {

class DeepseekModel final : public HostCausalLm {
 public:
  DeepseekModel(ModelConfig config, WeightStore weights);

  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts = nullptr) const override;

 private:
  struct Linear {  // a projection [out, in] and its bias (null where the checkpoint has none)
    const float* weight = nullptr;
    const float* bias = nullptr;
  };
  struct Mlp {
    Linear gate, up, down;
    int64_t intermediate = 0;
  };
  struct Attention {
    Linear q_a, q_b, q, kv_a, kv_b, o;  // q_a and q_b with a query LoRA (q_lora_rank > 0), q without
    const float *q_a_norm = nullptr, *kv_a_norm = nullptr;
  };
  struct Moe {
    const float *router = nullptr, *correction_bias = nullptr;
    Mlp shared;
    bool has_shared = false;
  };
  using Layer = DeepseekLayerWeights<float, Attention, Mlp, Moe>;

  Linear linear(const std::string& prefix) const;  // prefix.weight and, if present, prefix.bias
  Mlp resolve_mlp(const std::string& prefix, int64_t intermediate) const;

  // x [T, hidden] -> out [T, hidden]. mla_attention.cpp
  void attention(int64_t layer_idx, const Attention& w, const ForwardBatch& batch, const int32_t* positions,
                 const float* cos, const float* sin, const float* x, float* out, MlaKvCache& cache) const;
  // ffn.cpp
  void dense_mlp(const Mlp& w, const float* x, float* out, int64_t num_tokens) const;
  void moe(int64_t moe_layer_idx, const Moe& w, const float* x, float* out, int64_t num_tokens,
           ExpertDispatcher* experts) const;

  RotaryTable rotary_;
  std::vector<Layer> layers_;
  const float* embed_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* lm_head_ = nullptr;
};

}  // namespace deepinfer
