// DeepSeek-V3's FP8 Linear layers through the FP8 GEMM inside the model (src/model/cuda/cuda_mlp.cpp: above 64 rows,
// activations quantised per token and 128 channels) against the same model with DEEPINFER_FP8_GEMM=0 (each weight
// dequantised for cuBLAS's bf16 GEMM). configs/models/tiny.json widened so that its projections are whole 128 x 128
// tiles (q_b 768 x 256, o_proj 256 x 512, the MLPs), with V3's quantization_config, dummy weights quantised on the
// GPU. Skipped without a GPU of compute capability 9.0.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kernels/cuda/fp8_gemm.cuh"
#include "src/core/device.h"
#include "src/model/cuda/weight_source.h"
#include "src/model/deepseek/cuda/cuda_deepseek_model.h"
#include "src/model/model_config.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

ModelConfig fp8_config() {
  std::ifstream in(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str());
  j["hidden_size"] = 256;
  j["intermediate_size"] = 512;
  j["moe_intermediate_size"] = 128;
  j["q_lora_rank"] = 256;
  j["kv_lora_rank"] = 512;
  j["qk_rope_head_dim"] = 64;
  j["qk_nope_head_dim"] = 128;
  j["v_head_dim"] = 128;
  j["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                              {"weight_block_size", {128, 128}}};
  return parse_model_config(j.dump(), "tiny.json, V3's FP8 at whole tiles");
}

// One 300-token prompt's logits, every row.
std::vector<float> prompt_logits(const CausalLm& model, int64_t vocab) {
  constexpr int64_t kTokens = 300;
  constexpr int64_t kBlocks = (kTokens + KvCache::kBlockSize - 1) / KvCache::kBlockSize;
  std::unique_ptr<KvCache> cache = model.make_kv_cache(kBlocks);
  ForwardBatch batch;
  std::vector<int32_t> table;
  for (int64_t b = 0; b < kBlocks; ++b) table.push_back(static_cast<int32_t>(b));
  for (int64_t i = 0; i < kTokens; ++i) batch.token_ids.push_back(static_cast<int32_t>((i * 13 + 5) % vocab));
  batch.sequences.push_back({0, kTokens, table});
  batch.all_logits = true;
  const Tensor logits = model.forward(batch, *cache);
  return {logits.data<float>(), logits.data<float>() + logits.numel()};
}

// The GEMM path against the dequantised one: not the same bits (else the GEMM did not run), the median row within
// 5% and the worst within 20% (the activations' e4m3 rounding, up to 1/16 of a value, is the difference; a wrong
// scale or layout moves rows by order 1).
TEST(CudaFp8Gemm, ModelRowsAgreeWithTheDequantisedPath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  if (!cuda::fp8_gemm_supports(300, 768, 256, cuda::Fp8BlockScales::fp32(nullptr, 128), 768))
    GTEST_SKIP() << "the FP8 GEMM runs on compute capability 9.0";
  const ModelConfig config = fp8_config();
  ASSERT_EQ(setenv("DEEPINFER_FP8_GEMM", "0", 1), 0);
  const CudaDeepseekModel dequantised(config, DummyWeightSource(3, nullptr), 0);
  ASSERT_EQ(unsetenv("DEEPINFER_FP8_GEMM"), 0);
  const CudaDeepseekModel fp8(config, DummyWeightSource(3, nullptr), 0);
  const std::vector<float> want = prompt_logits(dequantised, config.vocab_size);
  const std::vector<float> got = prompt_logits(fp8, config.vocab_size);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_NE(got, want) << "the FP8 GEMM path gave the dequantised path's bits: it did not run";
  std::vector<double> errors;
  for (size_t r = 0; r < want.size() / config.vocab_size; ++r) {
    const auto row = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + r * config.vocab_size, v.begin() + (r + 1) * config.vocab_size);
    };
    errors.push_back(testing::worst_relative_error(row(got), row(want), config.vocab_size));
  }
  std::sort(errors.begin(), errors.end());
  std::printf("FP8 GEMM vs dequantised, %zu rows: median relative error %.3e, worst %.3e\n", errors.size(),
              errors[errors.size() / 2], errors.back());
  EXPECT_LT(errors[errors.size() / 2], 0.05);
  EXPECT_LT(errors.back(), 0.2);
}

}  // namespace
}  // namespace deepinfer
