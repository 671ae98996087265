// Choosing the backend a model runs on: the CPU reference, or CUDA on this rank's GPU.
#pragma once

#include <memory>
#include <string>

#include "src/model/causal_lm.h"
#include "src/model/checkpoint_tensors.h"
#include "src/model/weights.h"

namespace deepinfer {

enum class Device { kCpu, kCuda };

// "cpu", "cuda", or "auto" (cuda when this build has it and a GPU is visible).
Device parse_device(const std::string& text);
std::string_view device_name(Device device);

// Where the weights come from: a host WeightStore (the CPU models, and tests), a checkpoint the CUDA backend reads
// one tensor at a time as it uploads them, or (CUDA only) seeded dummy values generated on the device, for the
// tensors `wanted` accepts (all when null).
struct WeightOrigin {
  std::unique_ptr<WeightStore> host;
  std::unique_ptr<CheckpointTensors> checkpoint;  // CUDA: read as uploaded (neither: device-side dummy weights)
  bool holds(const std::string& name) const {  // the host store or the checkpoint has `name`
    return (host != nullptr && host->data_or_null(name) != nullptr) || (checkpoint != nullptr && checkpoint->has(name));
  }
  uint64_t dummy_seed = 0;
  WeightStore::TensorFilter wanted;
  // Device-side dummy weights: generate the draft module too (DeepSeek-V3's MTP layer, V4.1's DSpark layers: the
  // architecture's optional parts), to time the drafters; without it they are left out (they would draft noise, and
  // V3's module is an MoE layer's memory). A checkpoint's module loads where the checkpoint carries it.
  bool dummy_draft_module = false;
};

// `gpu` is the device index for kCuda (the local rank's GPU). Built as the architecture registry says.
std::unique_ptr<CausalLm> make_causal_lm(ModelConfig config, WeightOrigin weights, Device device, int gpu);

// The registry's builders: DeepSeek V2/V3 (CPU reference or CUDA) and DeepSeek-V4.1 (CPU reference).
std::unique_ptr<CausalLm> build_deepseek_model(ModelConfig config, WeightOrigin weights, Device device, int gpu);
std::unique_ptr<CausalLm> build_deepseek_v41_model(ModelConfig config, WeightOrigin weights, Device device, int gpu);

// KV cache tokens that fit when the process may use `fraction` of the current GPU's memory in all, after
// what is allocated now (the weights) and `reserve_bytes` for step buffers. 0 if nothing fits.
int64_t kv_tokens_for_memory_fraction(const CausalLm& model, double fraction, size_t reserve_bytes);

}  // namespace deepinfer
