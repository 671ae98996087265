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

}  // namespace deepinfer
