// DeepSeek-V3's FP8 Linear layers and experts through the FP8 GEMM inside the model (src/model/cuda/cuda_mlp.cpp and
// cuda_moe.cpp: above 64 rows, activations quantised per token and 128 channels) against the same model with
// DEEPINFER_FP8_GEMM=emulate (the same quantised activations, the weights dequantised, cuBLAS's bf16 GEMM).
// configs/models/tiny.json widened so that its projections are whole 128 x 128 tiles (q_b 768 x 256, o_proj 256 x 512,
// the MLPs and experts), with V3's quantization_config, dummy weights quantised on the GPU. Skipped without a GPU of
// compute capability 9.0.
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

// Each row's relative L2 error of `got` against `want`, sorted.
std::vector<double> row_errors(const std::vector<float>& got, const std::vector<float>& want, int64_t vocab) {
  std::vector<double> errors;
  for (size_t r = 0; r < want.size() / vocab; ++r) {
    const auto row = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + r * vocab, v.begin() + (r + 1) * vocab);
    };
    errors.push_back(testing::worst_relative_error(row(got), row(want), vocab));
  }
  std::sort(errors.begin(), errors.end());
  return errors;
}

// The model's logits with DEEPINFER_FP8_GEMM set to `fp8_gemm` while it is made (its lanes read it then).
std::vector<float> logits_with(const ModelConfig& config, const char* fp8_gemm) {
  EXPECT_EQ(setenv("DEEPINFER_FP8_GEMM", fp8_gemm, 1), 0);
  const CudaDeepseekModel model(config, DummyWeightSource(3, nullptr), 0);
  EXPECT_EQ(unsetenv("DEEPINFER_FP8_GEMM"), 0);
  return prompt_logits(model, config.vocab_size);
}

// The GEMM path against its reference: the same model with DEEPINFER_FP8_GEMM=emulate, whose Linear layers quantise
// the activations as the GEMM does, turn them back into bf16 and multiply the dequantised weights with cuBLAS. What
// differs is rounding only (the dequantised weights and activations in bf16, 2^-9 of a value; the order of the fp32
// sums): at one layer, dense or of experts, the median row within 3%, 90% of rows within 10%, where a wrong scale or
// layout moves rows by order 1. Deeper models are printed, not bounded: a rounding difference grows through the
// layers of this random-weight model, and one that flips a token's expert choice changes its row by order 1. Beside
// it, what quantising the activations costs against the bf16 activations of DEEPINFER_FP8_GEMM=0.
TEST(CudaFp8Gemm, ModelRowsAgreeWithTheEmulatedPath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  if (!cuda::fp8_gemm_supports(300, 768, 256, cuda::Fp8BlockScales::fp32(nullptr, 128), 768))
    GTEST_SKIP() << "the FP8 GEMM runs on compute capability 9.0";
  const auto at = [](const std::vector<double>& e, double q) { return e[static_cast<size_t>(q * (e.size() - 1))]; };
  for (const auto& [layers, dense] : {std::pair<int64_t, int64_t>{1, 1}, {1, 0}, {2, 2}, {4, 4}, {4, 1}}) {
    ModelConfig config = fp8_config();
    config.num_hidden_layers = layers;
    config.first_k_dense_replace = dense;
    const int64_t vocab = config.vocab_size;
    const std::vector<float> dequantised = logits_with(config, "0");
    const std::vector<float> emulated = logits_with(config, "emulate");
    const std::vector<float> gemm = logits_with(config, "1");
    const std::vector<float> again = logits_with(config, "1");  // the control: the same path twice
    ASSERT_EQ(gemm.size(), emulated.size());
    EXPECT_NE(gemm, emulated) << "the FP8 GEMM path gave the emulated path's bits: it did not run";
    const std::vector<double> errors = row_errors(gemm, emulated, vocab);
    const std::vector<double> w8a8 = row_errors(emulated, dequantised, vocab);
    const std::vector<double> both = row_errors(gemm, dequantised, vocab);
    const std::vector<double> control = row_errors(again, gemm, vocab);
    std::printf("%ld layers (%ld dense): the FP8 GEMM path twice, median / worst %.3e / %.3e\n", layers, dense,
                at(control, 0.5), control.back());
    std::printf("%ld layers (%ld dense), %zu rows, relative error median / 90%% / worst: FP8 GEMM vs emulated %.3e / %.3e / %.3e;"
                " emulated vs bf16 activations %.3e / %.3e / %.3e; FP8 GEMM vs bf16 activations %.3e / %.3e / %.3e\n",
                layers, dense, errors.size(), at(errors, 0.5), at(errors, 0.9), errors.back(), at(w8a8, 0.5), at(w8a8, 0.9),
                w8a8.back(), at(both, 0.5), at(both, 0.9), both.back());
    if (layers == 1) {  // (dense or experts)
      EXPECT_LT(at(errors, 0.5), 0.03);
      EXPECT_LT(at(errors, 0.9), 0.1);
    }
  }
}

}  // namespace
}  // namespace deepinfer
