// The CUDA backend's routed experts, per MoE layer every expert's slot allocated once (the kernels index them by
// expert id) and a held flag per expert; EPLB only fills or frees slots. Two formats:
//  - bf16: one gate_up array [E, 2I, H] (each expert's gate rows, then its up rows) and one down array [E, H, I];
//  - fp4 (DeepSeek-V4's checkpoints): the same rows as e2m1 codes with a ue8m0 scale per 32 values
//    (kernels/cuda/moe_fp4.cuh), quantised on the device when loaded; 0.53 bytes a weight instead of 2. Values
//    that are FP4 already (a checkpoint's, dequantised on load) quantise back to themselves.
#pragma once

#include <cuda_bf16.h>

#include <vector>

#include "kernels/cuda/moe_fp4.cuh"
#include "src/core/device_array.h"
#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/device_memory.h"
#include "src/model/cuda/weight_source.h"
#include "src/model/expert_store.h"

namespace deepinfer {

class CudaExpertStore final : public ExpertStore {
 public:
  enum class Format { kBf16, kFp4 };
  // Allocates the arrays in `arena` (on the current device). swiglu_limit: the experts' SwiGLU clamp (0: none).
  CudaExpertStore(Dims dims, DeviceArena& arena, int num_sms, float swiglu_limit, Format format = Format::kBf16);

  // Fills one expert from the checkpoint's gate, up and down tensors.
  void load(int64_t moe_layer, int64_t expert, const DeviceWeightSource& weights, const std::string& gate,
            const std::string& up, const std::string& down);
  Format format() const { return format_; }
  // bf16 only.
  const __nv_bfloat16* gate_up(int64_t moe_layer) const { return layers_[moe_layer].gate_up; }
  const __nv_bfloat16* down(int64_t moe_layer) const { return layers_[moe_layer].down; }
  // fp4 only: expert e's gate_up rows from row e * 2I, its down rows from row e * H.
  cuda::Fp4Rows gate_up_fp4(int64_t moe_layer) const { return layers_[moe_layer].gate_up_fp4; }
  cuda::Fp4Rows down_fp4(int64_t moe_layer) const { return layers_[moe_layer].down_fp4; }
  // fp4 only: experts [first, first + count) dequantised into gate_up [count, 2I, H] and down [count, H, I], on
  // the model's stream (the prefill GEMMs read them).
  void dequantize(int64_t moe_layer, int64_t first, int64_t count, __nv_bfloat16* gate_up, __nv_bfloat16* down) const;
  size_t bytes_per_expert() const;

  bool holds(int64_t moe_layer, int64_t expert) const override;
  // Host rows through the device (expert parallelism over host memory): upload, the MLP kernels, download.
  void compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const override;
  std::vector<float> export_weights(int64_t moe_layer, int64_t expert) const override;
  void import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) override;
  void drop(int64_t moe_layer, int64_t expert) override;

 private:
  struct Layer {
    __nv_bfloat16 *gate_up = nullptr, *down = nullptr;  // bf16
    cuda::Fp4Rows gate_up_fp4, down_fp4;                // fp4
  };
  // One expert as bf16 rows: its slots, or (fp4) dequantised into staging_ (valid until the next call).
  DeviceMlp expert_mlp(int64_t moe_layer, int64_t expert) const;
  // Stores one expert from bf16 rows [gate | up | down] on the device (fp4: quantised).
  void store(int64_t moe_layer, int64_t expert, const __nv_bfloat16* rows);

  int num_sms_;
  float swiglu_limit_;
  Format format_;
  std::vector<Layer> layers_;  // the arrays, in the arena
  std::vector<bool> held_;     // [moe layer][expert]
  CublasHandle cublas_;
  mutable DeviceArray<__nv_bfloat16> staging_;  // one expert's bf16 rows (fp4 loads, exports, compute)
  mutable ScratchPool scratch_;  // compute() runs inside a step, beside the step's own scratch
};

}  // namespace deepinfer
