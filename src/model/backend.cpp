#include "src/model/backend.h"

#include <unordered_set>

#include "src/core/check.h"
#include "src/core/device.h"
#include "src/model/architectures.h"
#include "src/model/deepseek/deepseek_model.h"
#include "src/model/v41/v41_model.h"
#ifdef DEEPINFER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "src/model/deepseek/cuda/cuda_deepseek_model.h"
#include "src/model/v41/cuda/cuda_v41_model.h"
#endif

namespace deepinfer {

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::kCpu;
  if (text == "cuda") {
    DI_INPUT_CHECK(cuda_device_count() > 0, "--device cuda: {}",
#ifdef DEEPINFER_HAVE_CUDA
                   "no GPU is visible"
#else
                   "this build has no CUDA backend (configure with nvcc present or -DDEEPINFER_CUDA=ON)"
#endif
    );
    return Device::kCuda;
  }
  DI_INPUT_CHECK(text == "auto", "unknown --device '{}' (cpu, cuda, auto)", text);
  return cuda_device_count() > 0 ? Device::kCuda : Device::kCpu;
}

int64_t kv_tokens_for_memory_fraction(const CausalLm& model, double fraction, size_t reserve_bytes) {
#ifdef DEEPINFER_HAVE_CUDA
  size_t free_bytes = 0, total_bytes = 0;
  DI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double budget = fraction * static_cast<double>(total_bytes) - static_cast<double>(total_bytes - free_bytes) -
                        static_cast<double>(reserve_bytes);
  return budget <= 0 ? 0 : static_cast<int64_t>(budget / static_cast<double>(model.kv_cache_bytes_per_token()));
#else
  (void)model, (void)fraction, (void)reserve_bytes;
  return 0;
#endif
}

std::string_view device_name(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

std::unique_ptr<CausalLm> make_causal_lm(ModelConfig config, WeightOrigin weights, Device device, int gpu) {
  const Architecture* arch = find_architecture(config.model_type);
  DI_CHECK(arch != nullptr, "no architecture '{}'", config.model_type);
  return arch->build(std::move(config), std::move(weights), device, gpu);
}

namespace {

#ifdef DEEPINFER_HAVE_CUDA
// A CUDA model from the host weights or, without them, from dummy values generated on the device.
template <class CudaModel>
std::unique_ptr<CausalLm> make_cuda_model(ModelConfig config, const WeightOrigin& weights, int gpu) {
  if (weights.host) return std::make_unique<CudaModel>(std::move(config), HostWeightSource(*weights.host), gpu);
  if (weights.checkpoint)
    return std::make_unique<CudaModel>(std::move(config), CheckpointWeightSource(*weights.checkpoint), gpu);
  WeightStore::TensorFilter wanted = weights.wanted;
  if (!weights.dummy_draft_module) {  // the optional parts (the draft module) left out
    std::unordered_set<std::string> optional;
    for (const TensorSpec& spec : find_architecture(config.model_type)->tensor_specs(config))
      if (!spec.optional_part.empty()) optional.insert(spec.name);
    wanted = [optional = std::move(optional), all = weights.wanted](const std::string& name) {
      return !optional.contains(name) && (!all || all(name));
    };
  }
  return std::make_unique<CudaModel>(std::move(config), DummyWeightSource(weights.dummy_seed, std::move(wanted)), gpu);
}
#endif

}  // namespace

std::unique_ptr<CausalLm> build_deepseek_v41_model(ModelConfig config, WeightOrigin weights, Device device, int gpu) {
#ifdef DEEPINFER_HAVE_CUDA
  if (device == Device::kCuda) return make_cuda_model<CudaV41Model>(std::move(config), weights, gpu);
#else
  (void)gpu;
  DI_CHECK(device == Device::kCpu, "no CUDA backend in this build");
#endif
  DI_CHECK(weights.host != nullptr, "the CPU model needs host weights");
  return std::make_unique<DeepseekV41Model>(std::move(config), std::move(*weights.host));
}

std::unique_ptr<CausalLm> build_deepseek_model(ModelConfig config, WeightOrigin weights, Device device, int gpu) {
#ifdef DEEPINFER_HAVE_CUDA
  if (device == Device::kCuda) return make_cuda_model<CudaDeepseekModel>(std::move(config), weights, gpu);
#else
  (void)gpu;
  DI_CHECK(device == Device::kCpu, "no CUDA backend in this build");
#endif
  DI_CHECK(weights.host != nullptr, "the CPU model needs host weights");
  return std::make_unique<DeepseekModel>(std::move(config), std::move(*weights.host));
}

}  // namespace deepinfer
