// The CUDA backend's routed experts: bf16 on the device, per MoE layer one gate_up array [E, 2I, H] (each
// expert's gate rows, then its up rows) and one down array [E, H, I], every expert's slot allocated once (the
// grouped kernels index them by expert id) and a held flag per expert; EPLB only fills or frees slots.
#pragma once

#include <cuda_bf16.h>

#include <vector>

#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/device_memory.h"
#include "src/model/cuda/weight_source.h"
#include "src/model/expert_store.h"

namespace deepinfer {

class CudaExpertStore final : public ExpertStore {
 public:
  // Allocates the arrays in `arena` (on the current device). swiglu_limit: the experts' SwiGLU clamp (0: none).
  CudaExpertStore(Dims dims, DeviceArena& arena, int num_sms, float swiglu_limit);

  // Fills one expert from the checkpoint's gate, up and down tensors.
  void load(int64_t moe_layer, int64_t expert, const DeviceWeightSource& weights, const std::string& gate,
            const std::string& up, const std::string& down);
  const __nv_bfloat16* gate_up(int64_t moe_layer) const { return gate_up_[moe_layer]; }
  const __nv_bfloat16* down(int64_t moe_layer) const { return down_[moe_layer]; }

  bool holds(int64_t moe_layer, int64_t expert) const override;
  // Host rows through the device (expert parallelism over host memory): upload, the MLP kernels, download.
  void compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const override;
  std::vector<float> export_weights(int64_t moe_layer, int64_t expert) const override;
  void import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) override;
  void drop(int64_t moe_layer, int64_t expert) override;

 private:
  int num_sms_;
  float swiglu_limit_;
  std::vector<__nv_bfloat16*> gate_up_, down_;  // per MoE layer, in the arena
  std::vector<bool> held_;                       // [moe layer][expert]
  CublasHandle cublas_;
  mutable ScratchPool scratch_;  // compute() runs inside a step, beside the step's own scratch
};

}  // namespace deepinfer
