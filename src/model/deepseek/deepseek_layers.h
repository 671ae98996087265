// The DeepSeek V2/V3 layer loop, written once for every backend: embedding, then per layer the input norm,
// MLA attention, the residual add and post-attention norm, and the MoE (or, in the first dense layers, the
// MLP); then the final norm and the LM head. A backend supplies the blocks over its own activations — the
// residual stream x, its normalised copy h, and a sub-layer's output delta:
//
//   embed()                         x = embedding(tokens)
//   begin_layer(l)                  per-layer bookkeeping (scratch buffers)
//   add_norm(add_delta, site)       x += delta when add_delta; h = rms_norm(x) with the norm of `site`
//   attention(l)                    delta = attention(h), appending the layer's cache entries
//   moe(l, next)                    delta = MoE(h); returns true when it also did add_norm(true, next), the
//                                   fusion of the experts' unpermute with the next norm that pays on the GPU
//   mlp(l)                          delta = MLP(h)
//   head()                          the logits of the rows the batch wants, from h after the final norm
//
// The CPU reference (deepseek_model.cpp) and the CUDA backend (cuda/cuda_deepseek_model.cpp) implement the
// blocks; fusions across block edges stay inside a backend, behind these calls.
#pragma once

#include <cstdint>

#include "src/model/model_config.h"

namespace deepinfer {

// Which RMSNorm an add_norm applies: a layer's input or post-attention norm, or the final norm.
struct NormSite {
  enum Kind { kInput, kPostAttention, kFinal };
  Kind kind = kFinal;
  int64_t layer = -1;
  static NormSite input(int64_t l) { return {kInput, l}; }
  static NormSite post_attention(int64_t l) { return {kPostAttention, l}; }
  static NormSite final_norm() { return {kFinal, -1}; }
};

// One decoder layer's weights, for a backend's own norm type and attention / MLP / MoE weight structs.
template <class Norm, class Attention, class Mlp, class Moe>
struct DeepseekLayerWeights {
  const Norm* input_norm = nullptr;
  const Norm* post_attention_norm = nullptr;
  Attention attention;
  bool is_moe = false;
  Mlp mlp;  // the dense layers'
  Moe moe;  // the MoE layers'
};

template <typename Blocks>
auto run_deepseek_layers(const ModelConfig& c, Blocks& blocks) {
  blocks.embed();
  bool normed = false;  // whether the previous layer's MoE already added its output and applied this norm
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    blocks.begin_layer(l);
    if (!normed) blocks.add_norm(/*add_delta=*/l > 0, NormSite::input(l));
    blocks.attention(l);
    blocks.add_norm(/*add_delta=*/true, NormSite::post_attention(l));
    if (c.is_moe_layer(l)) {
      normed = blocks.moe(l, l + 1 < c.num_hidden_layers ? NormSite::input(l + 1) : NormSite::final_norm());
    } else {
      blocks.mlp(l);
      normed = false;
    }
  }
  if (!normed) blocks.add_norm(/*add_delta=*/c.num_hidden_layers > 0, NormSite::final_norm());
  return blocks.head();
}

}  // namespace deepinfer
