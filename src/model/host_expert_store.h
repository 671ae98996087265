// The CPU backends' routed experts: fp32 SwiGLU experts on the host, owned here (taken out of the model's
// WeightStore at load, so EPLB can add and free them without touching the model's other weights).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/expert_store.h"
#include "src/model/weights.h"

namespace deepinfer {

// out [n, H] = down(silu(min(x gate^T, limit)) * clamp(x up^T, -limit, limit)), the clamp only when limit > 0:
// one SwiGLU expert on the host (gate, up [I, H]; down [H, I]).
void swiglu_expert_forward(const float* gate, const float* up, const float* down, const float* x, int64_t n,
                           int64_t hidden, int64_t intermediate, float swiglu_limit, float* out);

class HostExpertStore final : public ExpertStore {
 public:
  // Names of one expert's gate, up and down projections in a checkpoint.
  using TensorNames = std::array<std::string, 3>;
  // swiglu_limit > 0 applies DeepSeek-V4.1's clamp before the activation: up to [-limit, limit], gate to
  // at most limit. 0 is the plain SwiGLU of V2/V3.
  HostExpertStore(Dims dims, float swiglu_limit);

  // Moves every routed expert present in `weights` here (under expert parallelism a rank loaded only its own).
  void take_from(WeightStore& weights, const std::function<TensorNames(int64_t moe_layer, int64_t expert)>& names);

  bool holds(int64_t moe_layer, int64_t expert) const override;
  void compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const override;
  std::vector<float> export_weights(int64_t moe_layer, int64_t expert) const override;
  void import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) override;
  void drop(int64_t moe_layer, int64_t expert) override;

 private:
  struct Expert {
    Tensor gate, up, down;  // [I, H], [I, H], [H, I]; undefined when not held
  };
  Expert& at(int64_t moe_layer, int64_t expert) { return experts_[index(moe_layer, expert)]; }
  const Expert& at(int64_t moe_layer, int64_t expert) const { return experts_[index(moe_layer, expert)]; }

  float swiglu_limit_;
  std::vector<Expert> experts_;  // [moe layer][expert]
};

}  // namespace deepinfer
