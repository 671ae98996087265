// The DeepSeek V2/V3 forward pass on the CPU reference ops: embedding, MLA attention over the paged latent
// cache, dense MLP or MoE (router, routed experts, shared experts), final norm, LM head. fp32 throughout.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/host_causal_lm.h"
#include "src/model/deepseek/deepseek_layers.h"
#include "src/model/expert_dispatch.h"
#include "src/model/forward_batch.h"
#include "src/model/deepseek/mla_kv_cache.h"
#include "src/model/model_config.h"
#include "src/model/rope.h"
#include "src/model/weights.h"

namespace deepinfer {

class DeepseekModel final : public HostCausalLm, private DraftModule {
 public:
  DeepseekModel(ModelConfig config, WeightStore weights);

  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts = nullptr) const override;

  // The MTP module (mtp.cpp): DeepSeek-V3's depth-1 multi-token prediction, as its paper gives it —
  //   x = eh_proj([enorm(embed(t_{i+1})) ; hnorm(h_i)]), one decoder layer (its own MLA cache layer and MoE,
  //   the experts held whole on every rank), logits = shared_head.head(shared_head.norm(x)),
  // h_i the main model's final-normed hidden state at position i; its output at i drafts t_{i+2}.
  const DraftModule* draft_module() const override { return mtp_.has_value() ? this : nullptr; }
  using CausalLm::draft_module;

 private:
  Kind kind() const override { return Kind::kMtp; }
  void enable() override;
  bool enabled() const override { return mtp_enabled_; }
  int64_t block_size() const override { return 1; }
  Tensor mtp_forward(const ForwardBatch& batch, std::span<const int64_t> hidden_rows, KvCache& cache) const override;

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
  // `store` holds the layer's routed experts (the MTP layer's own store for it).
  void moe(const ExpertStore& store, int64_t moe_layer_idx, const Moe& w, const float* x, float* out,
           int64_t num_tokens, ExpertDispatcher* experts) const;
  Layer resolve_layer(int64_t l) const;
  Tensor run(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts, Tensor* hidden) const;
  struct CpuBlocks;  // the layer loop's blocks (deepseek_cpu_blocks.h)

  struct Mtp {
    Layer layer;  // model.layers.<num_hidden_layers>
    const float *enorm = nullptr, *hnorm = nullptr, *eh_proj = nullptr, *head_norm = nullptr, *head = nullptr;
  };

  RotaryTable rotary_;
  std::vector<Layer> layers_;
  const float* embed_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* lm_head_ = nullptr;
  std::optional<Mtp> mtp_;          // where the checkpoint has the nextn layer's tensors
  HostExpertStore mtp_experts_;     // its routed experts (one MoE layer)
  bool mtp_enabled_ = false;
  mutable Tensor last_hidden_;      // with it: the last forward's final-normed hidden states [T, hidden_size]
};

}  // namespace deepinfer
