// The V4.1 floors (bench/v41_floor.h) at the public V4.1-Flash shape, against counts made here by hand from the
// release's shapes.
#include <gtest/gtest.h>

#include <filesystem>

#include "src/bench/roofline.h"
#include "src/bench/v41_floor.h"

namespace deepinfer {
namespace {

ModelConfig public_v41() {
  return load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs" / "models" /
                           "deepseek-v4.1-flash.json");
}

TEST(V41Floor, WeightBytesAsTheReleaseStoresThem) {
  const ModelConfig c = public_v41();
  ASSERT_TRUE(is_v41(c));
  // A routed expert: 3 matrices of 2304 x 5120 as e2m1 (half a byte) + a ue8m0 byte per 32 values.
  EXPECT_DOUBLE_EQ(v41_expert_bytes(c), 3.0 * 2304 * 5120 * (0.5 + 1.0 / 32));
  // Layer 0 (window only, no source, no engram): FP8 (+ a byte per 32 x 32 block) for wq_a 1280 x 5120, wq_b
  // 32768 x 1280, wkv 512 x 5120, wo_a 8192 x 4096, wo_b 5120 x 8192 and the shared expert 3 x 2304 x 5120; bf16
  // for the two hyper-connection mixes 24 x 20480 (+ 24 + 3 each), the norms 5120 x 2 + 1280 + 512, the sinks 64,
  // the router 384 x 5120 and its bias 384.
  const double fp8 = 1280.0 * 5120 + 32768.0 * 1280 + 512.0 * 5120 + 8192.0 * 4096 + 5120.0 * 8192 + 3.0 * 2304 * 5120;
  const double bf16 = 2 * (24.0 * 20480 + 24 + 3) + 2 * 5120.0 + 1280 + 512 + 64 + 384.0 * 5120 + 384;
  EXPECT_DOUBLE_EQ(v41_layer_weight_bytes(c, 0), fp8 * (1.0 + 1.0 / 1024) + 2.0 * bf16);
  // Layer 2, a pooled KV source and index source, adds the compressor (wkv, wgate 512 x 5120, norm 512) and the
  // indexer (wq_b 4096 x 1280, weights_proj 32 x 5120, wk 128 x 512, k_norm 128), all bf16.
  const double extra = 2.0 * 512 * 5120 + 512 + 4096.0 * 1280 + 32.0 * 5120 + 128.0 * 512 + 128;
  EXPECT_DOUBLE_EQ(v41_layer_weight_bytes(c, 2), v41_layer_weight_bytes(c, 0) + 2.0 * extra);
}

TEST(V41Floor, UniformExpertsTouchedAndPairs) {
  const ModelConfig c = public_v41();
  const ExpertWork one = uniform_expert_work(c, 1);
  EXPECT_NEAR(one.experts_touched, 6.0, 1e-9);
  EXPECT_DOUBLE_EQ(one.pairs, 6.0);
  EXPECT_NEAR(uniform_expert_work(c, 100000).experts_touched, 384.0, 1e-6);
}

TEST(V41Floor, DecodeReadsGrowWithContextAndExperts) {
  const ModelConfig c = public_v41();
  const ExpertWork none{0, 0}, six{6, 6};
  const StepWork short_ctx = v41_decode_work(c, 8, 1024, none), long_ctx = v41_decode_work(c, 8, 32768, none);
  EXPECT_GT(long_ctx.bytes, short_ctx.bytes);
  // Six experts a layer over 40 layers add exactly their bytes.
  EXPECT_NEAR(v41_decode_work(c, 8, 1024, six).bytes - short_ctx.bytes, 40 * 6 * v41_expert_bytes(c), 1.0);
  // Within the window (no compressed entry complete yet past the picks' cap), a token more reads one window
  // entry (512 FP8 codes + 16 scales) a layer and sequence, and on the compressed layers its entries and keys.
  const StepWork a = v41_decode_work(c, 1, 10, none), b = v41_decode_work(c, 1, 11, none);
  EXPECT_GE(b.bytes - a.bytes, 40 * (512.0 + 16));
  // A decode step at these shapes is bound by bytes, a long prefill by FLOPs.
  EXPECT_GT(long_ctx.bytes_ms(), long_ctx.flops_ms());
  const StepWork prefill = v41_prefill_work(c, 1, 16384, uniform_expert_work(c, 16384));
  EXPECT_GT(prefill.flops_ms(), prefill.bytes_ms());
  EXPECT_DOUBLE_EQ(prefill.floor_ms(), prefill.flops_ms());
}

TEST(V41Floor, PrefillFlopsAreTwiceTheActivatedWeightsPlusAttention) {
  const ModelConfig c = public_v41();
  // One prompt of one token: every layer's matrices once, six experts a layer, the head once; the attention reads
  // one window entry (4 x 512 x 64 heads).
  const StepWork w = v41_prefill_work(c, 1, 1, {6, 6});
  EXPECT_DOUBLE_EQ(w.bf16_flops - 2.0 * 129280 * 5120,
                   v41_prefill_work(c, 1, 1, {0, 0}).bf16_flops - 2.0 * 129280 * 5120);
  EXPECT_NEAR(w.fp8_flops - v41_prefill_work(c, 1, 1, {0, 0}).fp8_flops, 40 * 6 * 2.0 * 3 * 2304 * 5120, 1.0);
  const StepWork two = v41_prefill_work(c, 2, 1, {6, 6});
  EXPECT_GT(two.bf16_flops, w.bf16_flops);
}

// Bounded replay's compact form: a prompt no longer than the keep count costs what off costs; a long one's layers
// from the compact layer (21 of 40) compute `keep` rows only, so its weight FLOPs fall to (21 L + 19 keep) / (40 L)
// of off's (the head, one row, the same).
TEST(V41Floor, CompactReplayCountsOnlyTheKeptRowsPastItsLayer) {
  const ModelConfig c = public_v41();
  ASSERT_EQ(v41_first_compact_layer(c.v41), 21);
  const ExpertWork none{0, 0};
  EXPECT_DOUBLE_EQ(v41_prefill_work(c, 1, 140, none, 140).fp8_flops, v41_prefill_work(c, 1, 140, none).fp8_flops);
  const int64_t L = 65536, keep = 140;
  const StepWork off = v41_prefill_work(c, 1, L, none), compact = v41_prefill_work(c, 1, L, none, keep);
  // Attention and indexer FLOPs are not per-row uniform, so only bounds: between the weight share and off's.
  const double weights_share = (21.0 * L + 19.0 * keep) / (40.0 * L);
  EXPECT_LT(compact.flops_ms(), off.flops_ms() * 0.6);
  EXPECT_GT(compact.flops_ms(), off.flops_ms() * weights_share * 0.9);
  // Bytes: every weight is still read once (the engram layers, 1 and 14, come before the compact layer).
  EXPECT_DOUBLE_EQ(compact.bytes, off.bytes);
}

// What a rank holds, against what the CUDA model reported holding on the H200 for the 4P+64D slices at 40 layers
// without engram (results/h200/v41/hc-site/f4658c5/*.log: "a layer: 0.105 GiB of routed experts (6 places), 0.159 GiB
// of attention, hyper-connection, router and shared-expert weights; embedding, norm and head 2.466 GiB", 1.681 GiB
// of experts at 96 places), to the logs' three digits.
TEST(V41Floor, RankBytesAreWhatTheGpuHeldForA4p64dRank) {
  ModelConfig c = public_v41();
  c.v41.engram_layer_ids.clear();  // --no-engram
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  const RankWeightBytes decode = v41_rank_weight_bytes(c, 6, 1.0, false);
  const RankWeightBytes prefill = v41_rank_weight_bytes(c, 96, 1.0, false);
  EXPECT_NEAR(decode.non_expert / kGiB, 40 * 0.159 + 2.466, 0.01 * (40 * 0.159 + 2.466));
  EXPECT_NEAR(decode.experts / kGiB, 40 * 0.105, 0.01 * 40 * 0.105);
  EXPECT_NEAR(prefill.experts / kGiB, 40 * 1.681, 0.01 * 40 * 1.681);
  EXPECT_NEAR(decode.total() / kGiB, 13.05, 0.1);
  EXPECT_NEAR(prefill.total() / kGiB, 76.08, 0.5);
  // The engram tables (two of ~384M rows of 256 FP8 values + a scale per 32): ~203 GB whole, a 64th on a decode rank.
  const ModelConfig with_engram = public_v41();
  const double tables = v41_rank_weight_bytes(with_engram, 6, 1.0, false).non_expert -
                        v41_rank_weight_bytes(with_engram, 6, 0.0, false).non_expert;
  EXPECT_NEAR(tables, (384006168.0 + 384016682.0) * 256 * (1 + 1.0 / 32), 1e3);
}

}  // namespace
}  // namespace deepinfer
