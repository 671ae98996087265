// A model built on the second GPU while the first is current (as on every rank but 0 of a machine of several
// GPUs) equals the same model on the first GPU, to the bit: its streams, events and cuBLAS handles must belong to
// its own device (they once were created on GPU 0 and failed with "invalid resource handle" on rank 1).
// Skipped with fewer than two GPUs visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "src/core/check.h"
#include "src/core/device.h"
#include "src/model/deepseek/cuda/cuda_deepseek_model.h"
#include "src/model/model_config.h"

namespace deepinfer {
namespace {

std::vector<Tensor> prefill_then_decode(CudaDeepseekModel& model, int other_device) {
  std::unique_ptr<KvCache> cache = model.make_kv_cache(4);
  const std::vector<int32_t> table = {0, 1};
  std::vector<Tensor> logits;
  ForwardBatch prefill;
  for (int32_t i = 0; i < 40; ++i) prefill.token_ids.push_back((i * 17 + 3) % 500);
  prefill.sequences.push_back({0, 40, table});
  DI_CUDA_CHECK(cudaSetDevice(other_device));  // forward() must select its own device
  logits.push_back(model.forward(prefill, *cache));
  for (int32_t step = 0; step < 4; ++step) {  // eager first sighting, then graph capture and replays
    ForwardBatch decode;
    decode.token_ids.push_back((31 * step + 7) % 500);
    decode.sequences.push_back({40 + step, 1, table});
    DI_CUDA_CHECK(cudaSetDevice(other_device));
    logits.push_back(model.forward(decode, *cache));
  }
  return logits;
}

TEST(CudaDevices, ModelOnSecondGpuEqualsFirst) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "fewer than two GPUs visible";
  const ModelConfig config = load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json");
  DI_CUDA_CHECK(cudaSetDevice(1));
  CudaDeepseekModel first(config, DummyWeightSource(5, nullptr), 0);
  DI_CUDA_CHECK(cudaSetDevice(0));
  CudaDeepseekModel second(config, DummyWeightSource(5, nullptr), 1);
  const std::vector<Tensor> a = prefill_then_decode(first, 1), b = prefill_then_decode(second, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t step = 0; step < a.size(); ++step) {
    ASSERT_EQ(a[step].shape(), b[step].shape());
    int64_t differing = 0;
    for (int64_t i = 0; i < a[step].numel(); ++i) differing += a[step].data<float>()[i] != b[step].data<float>()[i];
    EXPECT_EQ(differing, 0) << "step " << step << " of " << a[step].numel() << " logits";
  }
}

}  // namespace
}  // namespace deepinfer
