// Loading the model named by --model/--load-format/--seed/--device, shared by the commands that run one.
// Weights are read in prepare() (local, so a bad checkpoint is a clean input error on every rank); the
// backend is built in execute(), once the topology has given this rank its GPU.
#pragma once

#include <memory>

#include "src/app/commands.h"
#include "src/model/backend.h"

namespace deepinfer::app {

struct LoadedModel {
  ModelConfig config;
  WeightOrigin weights;  // host tensors, or (CUDA with dummy weights) generated on the device later
  Device device = Device::kCpu;
  bool cuda_graphs = true;
};

// `engram_shard`: this rank's part of DeepSeek-V4.1's engram tables (whole by default).
LoadedModel load_model(const ModelOptions& options, const WeightStore::TensorFilter& wanted = nullptr,
                       RowShard engram_shard = {});
// Moves the weights into the backend (uploads them for CUDA, to device `gpu`).
std::unique_ptr<CausalLm> build_model(LoadedModel&& loaded, int gpu);

// Commands that do not yet run across ranks say so instead of silently running N copies.
void require_single_rank(const World& world, const char* command);

}  // namespace deepinfer::app
