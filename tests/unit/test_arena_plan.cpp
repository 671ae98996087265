// The weight arena's placement rule (core/arena_plan.h) on the CPU: where takes go, and what it reserves for the
// takes of one V3 rank at EP 8 (configs/deploy/v3-8p8d.toml: 32 expert slots, FP8 as stored), where the rule before
// it reserved 137.5 GiB for 94.9 GiB of weights and left no room for a step on a 141 GB H200.
#include <gtest/gtest.h>

#include <filesystem>

#include "src/core/arena_plan.h"
#include "src/model/model_config.h"

namespace deepinfer {
namespace {

constexpr size_t kMiB = size_t{1} << 20, kGiB = size_t{1} << 30;

TEST(ArenaPlan, SmallTakesShareAChunkAlignedAndALargeOneHasItsOwn) {
  ArenaPlan plan;
  const ArenaPlan::Place first = plan.take(100);
  EXPECT_EQ(first.new_block_bytes, kGiB);
  EXPECT_FALSE(first.own_block);
  EXPECT_EQ(first.offset, 0u);
  const ArenaPlan::Place second = plan.take(1000);
  EXPECT_EQ(second.new_block_bytes, 0u);
  EXPECT_EQ(second.offset, 256u);  // the first take rounded up to the 256-byte alignment
  const ArenaPlan::Place large = plan.take(900 * kMiB + 1);
  EXPECT_TRUE(large.own_block);
  EXPECT_EQ(large.new_block_bytes, 900 * kMiB + 256);
  // The shared chunk goes on after a large take: nothing of it abandoned.
  EXPECT_EQ(plan.take(10).offset, 256u + 1024u);
  EXPECT_EQ(plan.bytes_used(), 256 + 1024 + 900 * kMiB + 256 + 256);
  EXPECT_EQ(plan.bytes_reserved(), kGiB + 900 * kMiB + 256);
}

TEST(ArenaPlan, ASmallTakeThatDoesNotFitOpensTheNextChunk) {
  ArenaPlan plan(1024 * 256);  // takes of 16 KiB and more have blocks of their own
  for (int i = 0; i < 63; ++i) EXPECT_EQ(plan.take(4096).new_block_bytes, i == 0 ? 1024u * 256 : 0u);
  const ArenaPlan::Place next = plan.take(8192);  // 63 x 4 KiB used of 256 KiB: 4 KiB left, not enough
  EXPECT_EQ(next.new_block_bytes, 1024u * 256);
  EXPECT_EQ(next.offset, 0u);
  EXPECT_EQ(plan.bytes_reserved(), 2u * 1024 * 256);
}

// The CUDA V2/V3 model's takes in its order (CudaExpertStore's expert codes and scales a MoE layer first, then the
// embedding, final norm and head, then each layer's norms, FP8 projections with their 128 x 128 scales, kv_b in bf16,
// the router and the dense or shared-expert MLP), at V3's shapes from its public config.json.
TEST(ArenaPlan, AV3RankAtEp8ReservesLittleMoreThanItsWeights) {
  const ModelConfig c =
      load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs" / "models" / "deepseek-v3.json");
  const size_t H = c.hidden_size, I = c.moe_intermediate_size, dense_I = c.intermediate_size, V = c.vocab_size;
  const size_t heads = c.num_attention_heads, q_lora = c.q_lora_rank, lora = c.kv_lora_rank;
  const size_t rope = c.qk_rope_head_dim, nope = c.qk_nope_head_dim, v_dim = c.v_head_dim, slots = 32;
  const size_t dense = c.first_k_dense_replace, layers = c.num_hidden_layers, experts = c.n_routed_experts;
  ArenaPlan plan;
  const auto fp8 = [&](size_t n, size_t k) {
    plan.take(n * k);
    plan.take((n + 127) / 128 * ((k + 127) / 128) * sizeof(float));
  };
  for (size_t l = dense; l < layers; ++l) {
    fp8(slots * 2 * I, H);
    fp8(slots * H, I);
  }
  plan.take(V * H * 2);
  plan.take(H * 2);
  plan.take(V * H * 2);
  for (size_t l = 0; l < layers; ++l) {
    plan.take(H * 2);
    plan.take(H * 2);
    fp8(q_lora + lora + rope, H);
    plan.take(q_lora * 2);
    fp8(heads * (nope + rope), q_lora);
    plan.take(lora * 2);
    plan.take(heads * (nope + v_dim) * lora * 2);
    fp8(H, heads * v_dim);
    if (l < dense) {
      fp8(2 * dense_I, H);
      fp8(H, dense_I);
    } else {
      plan.take(experts * H * 2);
      plan.take(experts * sizeof(float));
      fp8(2 * I, H);  // the shared expert
      fp8(H, I);
    }
  }
  const double used = static_cast<double>(plan.bytes_used()) / kGiB;
  const double reserved = static_cast<double>(plan.bytes_reserved()) / kGiB;
  EXPECT_NEAR(used, 94.87, 0.01);  // what the CUDA model reported on an H200 for this rank
  EXPECT_LT(reserved - used, 1.0) << "reserved " << reserved << " GiB for " << used << " GiB";
}

}  // namespace
}  // namespace deepinfer
