// MoE routing: from router logits to each token's top-k experts and their combine weights, as DeepSeek
// V2 (softmax; greedy or group-limited by the best expert of each group), V3 (sigmoid plus a correction
// bias used for selection only; groups scored by the sum of their top-2) and V4.1 (sqrt(softplus) of the
// logits over a temperature, with the selection bias) define it.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

struct RouterParams {
  static constexpr int64_t kMaxExperts = 4096;  // per-token flags live on the stack
  static constexpr int64_t kMaxGroups = 1024;
  enum class Scoring { kSoftmax, kSigmoid, kSqrtSoftplus } scoring = Scoring::kSoftmax;
  enum class GroupScore { kNone, kMax, kTop2Sum } group_score = GroupScore::kNone;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  const float* correction_bias = nullptr;  // [num_experts] or null
  bool normalize = false;                  // divide the k weights by their sum (+1e-20)
  float scaling = 1.0f;                    // routed_scaling_factor
  float temperature = 1.0f;                // logits are divided by it before scoring (V4.1's gate_temp)
};

// logits [tokens, num_experts] -> ids [tokens, top_k], weights [tokens, top_k]. Ties go to the lower index.
// `scratch` holds 2 * num_experts + num_groups floats.
void route_topk(const float* logits, int64_t num_tokens, const RouterParams& params, int32_t* topk_ids,
                float* topk_weights, float* scratch);

}  // namespace deepinfer::cpu
