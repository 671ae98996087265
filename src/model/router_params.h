// The router parameters of a model, for the routing kernels (CPU and CUDA take the same struct).
#pragma once

#include "kernels/cpu/router.h"
#include "src/core/check.h"
#include "src/model/model_config.h"

namespace deepinfer {

// `correction_bias` is the layer's e_score_correction_bias (host or device pointer, as the kernel needs), or null.
inline cpu::RouterParams router_params(const ModelConfig& c, const float* correction_bias) {
  cpu::RouterParams p;
  p.scoring = c.scoring == RouterScoring::kSigmoid        ? cpu::RouterParams::Scoring::kSigmoid
              : c.scoring == RouterScoring::kSqrtSoftplus ? cpu::RouterParams::Scoring::kSqrtSoftplus
                                                          : cpu::RouterParams::Scoring::kSoftmax;
  p.group_score = c.group_score == GroupScore::kTop2Sum ? cpu::RouterParams::GroupScore::kTop2Sum
                  : c.group_score == GroupScore::kMax  ? cpu::RouterParams::GroupScore::kMax
                                                       : cpu::RouterParams::GroupScore::kNone;
  p.num_experts = c.n_routed_experts;
  p.top_k = c.num_experts_per_tok;
  p.num_groups = c.n_group;
  p.topk_groups = c.topk_group;
  p.correction_bias = correction_bias;
  p.normalize = c.norm_topk_prob && c.num_experts_per_tok > 1;  // as transformers: one expert keeps its score
  p.scaling = static_cast<float>(c.routed_scaling_factor);
  p.temperature = static_cast<float>(c.router_temperature);
  DI_CHECK(c.n_routed_experts <= cpu::RouterParams::kMaxExperts && c.n_group <= cpu::RouterParams::kMaxGroups,
           "{} experts in {} groups exceed the router's limits", c.n_routed_experts, c.n_group);
  return p;
}

}  // namespace deepinfer
