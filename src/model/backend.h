// Choosing the backend a model runs on: the CPU reference, or CUDA on this rank's GPU.
#pragma once

#include <memory>
#include <string>

#include "src/model/causal_lm.h"
#include "src/model/weights.h"

namespace deepinfer {

enum class Device { kCpu, kCuda };

// "cpu", "cuda", or "auto" (cuda when this build has it and a GPU is visible).
Device parse_device(const std::string& text);
std::string_view device_name(Device device);

// `gpu` is the device index for kCuda (the local rank's GPU).
std::unique_ptr<CausalLm> make_causal_lm(ModelConfig config, WeightStore weights, Device device, int gpu);

// KV cache tokens that fit when the process may use `fraction` of the current GPU's memory in all, after
// what is allocated now (the weights) and `reserve_bytes` for step buffers. 0 if nothing fits.
int64_t kv_tokens_for_memory_fraction(const CausalLm& model, double fraction, size_t reserve_bytes);

}  // namespace deepinfer
