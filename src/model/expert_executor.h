// How the MoE block reaches its routed experts. The model routes tokens (top-k logical experts and weights)
// and adds the shared experts; an ExpertExecutor adds the routed part:
//   out[t] += sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t])
// LocalExpertExecutor computes every expert on this rank; moe/'s ExpertParallelExecutor sends tokens to the
// ranks that own their experts and back. Every rank of an expert-parallel group calls run() for every MoE
// layer of every step, with zero tokens if it has none.
#pragma once

#include <cstdint>

namespace deepinfer {

class CausalLm;

class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;
  virtual void run(const CausalLm& model, int64_t moe_layer_idx, const float* x, const int32_t* topk_ids,
                   const float* topk_weights, int64_t num_tokens, float* out) = 0;
  // Called by every rank of the group at the same step boundary, after each step (EPLB rebalances here).
  virtual void after_step(CausalLm& model) { (void)model; }
};

class LocalExpertExecutor final : public ExpertExecutor {
 public:
  void run(const CausalLm& model, int64_t moe_layer_idx, const float* x, const int32_t* topk_ids,
           const float* topk_weights, int64_t num_tokens, float* out) override;
};

}  // namespace deepinfer
