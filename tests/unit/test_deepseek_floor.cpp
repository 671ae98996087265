// The V2/V3 floors and a rank's weight bytes (bench/deepseek_floor.h) at the public shapes, against counts made here
// by hand and the public model cards.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "src/bench/deepseek_floor.h"

namespace deepinfer {
namespace {

ModelConfig public_config(const char* file) {
  return load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs" / "models" / file);
}

TEST(DeepseekFloor, V3HasTheParametersItsModelCardStates) {
  const ModelConfig c = public_config("deepseek-v3.json");
  ASSERT_TRUE(c.quantization.fp8);  // as shipped: e4m3 with 128 x 128 block scales
  EXPECT_EQ(c.quantization.block_rows, 128);
  // "671B total parameters" (DeepSeek-V3's card); the MTP module adds 12.5B of its own (its embedding is shared).
  EXPECT_NEAR(deepseek_parameter_count(c) / 1e9, 671.03, 0.01);
  EXPECT_NEAR(deepseek_parameter_count(c, /*with_mtp=*/true) / 1e9, 683.56, 0.01);
}

TEST(DeepseekFloor, V3ExpertBytesAsStored) {
  const ModelConfig c = public_config("deepseek-v3.json");
  // gate and up 2048 x 7168, down 7168 x 2048: a byte a value + an fp32 scale per 128 x 128 block (16 x 56 of them).
  EXPECT_DOUBLE_EQ(deepseek_expert_bytes(c, WeightForm::kAsStored), 3.0 * (2048.0 * 7168 + 4.0 * 16 * 56));
  EXPECT_DOUBLE_EQ(deepseek_expert_bytes(c, WeightForm::kBf16), 3.0 * 2048 * 7168 * 2);
}

TEST(DeepseekFloor, AnEp8RankOfV3FitsAnH200OnlyAsStored) {
  const ModelConfig c = public_config("deepseek-v3.json");
  // EP 8: 256 experts, 32 a rank in each of the 58 MoE layers; everything else whole on every rank.
  const RankWeightBytes fp8 = deepseek_rank_weight_bytes(c, 32, WeightForm::kAsStored, false);
  const RankWeightBytes bf16 = deepseek_rank_weight_bytes(c, 32, WeightForm::kBf16, false);
  EXPECT_NEAR(fp8.experts, 58.0 * 32 * deepseek_expert_bytes(c, WeightForm::kAsStored), 1.0);
  // Non-expert, by hand: per layer q_a 1536 x 7168, q_b 24576 x 1536, kv_a 576 x 7168, kv_b 32768 x 512,
  // o 7168 x 16384 (FP8, with their block scales) and the norms; 3 dense MLPs of 3 x 18432 x 7168; per MoE layer the
  // shared expert 3 x 2048 x 7168 (FP8) and the router 256 x 7168 with its bias (bf16); embedding and head bf16.
  auto fp8_matrix = [](double n, double k) { return n * k + 4.0 * std::ceil(n / 128) * std::ceil(k / 128); };
  const double attention = fp8_matrix(1536, 7168) + fp8_matrix(24576, 1536) + fp8_matrix(576, 7168) +
                           fp8_matrix(32768, 512) + fp8_matrix(7168, 16384) + 2.0 * (2 * 7168 + 1536 + 512);
  const double dense = 2 * fp8_matrix(18432, 7168) + fp8_matrix(7168, 18432);
  const double moe = 2 * fp8_matrix(2048, 7168) + fp8_matrix(7168, 2048) + 2.0 * (256 * 7168 + 256);
  const double outside = 2.0 * (2 * 129280.0 * 7168 + 7168);
  EXPECT_NEAR(fp8.non_expert, 61 * attention + 3 * dense + 58 * moe + outside, 1.0);
  // 141 GB an H200: as stored a rank leaves ~40 GB for its KV cache and activations; dequantised to bf16 it does not fit.
  EXPECT_LT(fp8.total(), 101e9);
  EXPECT_GT(fp8.total(), 99e9);
  EXPECT_GT(bf16.total(), 141e9);
  // As the CUDA backend holds it (what `deepinfer memory` reports): as stored but kv_b_proj in bf16 in each layer,
  // still well within an H200.
  const RankWeightBytes held = deepseek_rank_weight_bytes(c, 32, WeightForm::kCudaBackend, false);
  EXPECT_NEAR(held.non_expert - fp8.non_expert, 61 * (2.0 * 32768 * 512 - fp8_matrix(32768, 512)), 1.0);
  EXPECT_DOUBLE_EQ(held.experts, fp8.experts);
  EXPECT_LT(held.total(), 102.5e9);
}

TEST(DeepseekFloor, Bf16CheckpointsReadWhatTheyStore) {
  const ModelConfig c = public_config("deepseek-v2-lite.json");
  ASSERT_FALSE(c.quantization.fp8);
  const ExpertWork six{6, 6};
  const StepWork stored = deepseek_decode_work(c, 1, 1000, six);
  const StepWork bf16 = deepseek_decode_work(c, 1, 1000, six, WeightForm::kBf16);
  EXPECT_DOUBLE_EQ(stored.bytes, bf16.bytes);
  EXPECT_EQ(stored.fp8_flops, 0.0);
  // Six experts more a layer add their bytes over the 26 MoE layers; a token more of context its latent entries.
  const StepWork none = deepseek_decode_work(c, 1, 1000, {0, 0});
  EXPECT_NEAR(stored.bytes - none.bytes, 26.0 * 6 * 3 * 1408 * 2048 * 2, 1.0);
  EXPECT_NEAR(deepseek_decode_work(c, 1, 1001, six).bytes - stored.bytes, 27.0 * 576 * 2, 1e-3);
}

TEST(DeepseekFloor, V3DecodeReadsHalfTheBytesAsStoredAndRunsAtTheFp8Rate) {
  const ModelConfig c = public_config("deepseek-v3.json");
  const ExpertWork eight = uniform_expert_work(c, 1);
  const StepWork stored = deepseek_decode_work(c, 1, 4096, eight);
  const StepWork bf16 = deepseek_decode_work(c, 1, 4096, eight, WeightForm::kBf16);
  // The embedding and head stay bf16, the KV too: a little more than half.
  EXPECT_GT(stored.bytes / bf16.bytes, 0.5);
  EXPECT_LT(stored.bytes / bf16.bytes, 0.56);
  EXPECT_GT(stored.fp8_flops, 0.0);
  EXPECT_NEAR(stored.fp8_flops + stored.bf16_flops, bf16.bf16_flops, 1e-9 * bf16.bf16_flops);
  EXPECT_GT(stored.bytes_ms(), stored.flops_ms());  // one sequence: bound by bytes
  const StepWork prefill = deepseek_prefill_work(c, 1, 16384, uniform_expert_work(c, 16384));
  EXPECT_DOUBLE_EQ(prefill.floor_ms(), prefill.flops_ms());  // a long prefill: bound by FLOPs
  // Causal attention, 61 layers x 128 heads x (192 + 128) dims x L(L + 1): one prompt of 2L against two of L (the
  // same tokens and experts) differs by it, less the second prompt's logits (2 x 129280 x 7168).
  const double L = 4096;
  const ExpertWork all = uniform_expert_work(c, 8192);
  const StepWork one = deepseek_prefill_work(c, 1, 8192, all), two = deepseek_prefill_work(c, 2, 4096, all);
  const double attention = 61.0 * 128 * 320 * (2 * L * (2 * L + 1) - 2 * L * (L + 1));
  EXPECT_NEAR(one.bf16_flops - two.bf16_flops, attention - 2.0 * 129280 * 7168, 1e-9 * one.bf16_flops);
  EXPECT_DOUBLE_EQ(one.fp8_flops, two.fp8_flops);
}

}  // namespace
}  // namespace deepinfer
