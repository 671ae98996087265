// DeepSeek-V3's MTP module on the GPU (CudaDeepseekModel::mtp_forward / mtp_draft, issue #27) against the CPU
// module on the same weights rounded to bf16 (tests/unit/test_mtp.cpp checks the CPU one against transformers;
// cpu_reference.h why rounded, and why the median row), and the MTP drafter through the engine on the GPU: the
// outputs of plain decoding. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "src/core/device.h"
#include "src/engine/engine.h"
#include "src/model/backend.h"
#include "src/model/deepseek/deepseek_model.h"
#include "tests/gpu/cpu_reference.h"
#include "tests/unit/fixtures.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer {
namespace {

// The steps the engine runs the module over: a prompt chunk (expanded attention), one-row decode steps and a
// two-row step (a verify step whose draft was accepted: absorbed), each followed by the module over its rows.
// Returns the module's logits of every row, and the main model's of every step's last row.
struct MtpRun {
  std::vector<float> mtp, main;
};
MtpRun run_steps(const CausalLm& model, const std::vector<int32_t>& tokens) {
  std::unique_ptr<KvCache> cache = model.make_kv_cache(4);
  EXPECT_EQ(cache->num_layers(), model.config().num_hidden_layers + 1);
  const std::vector<int32_t> table = {0, 1, 2, 3};
  MtpRun out;
  const std::vector<int64_t> chunks = {37, 1, 1, 2, 1, 30, 1};
  int64_t start = 0;
  for (const int64_t len : chunks) {
    ForwardBatch main;
    main.token_ids.assign(tokens.begin() + start, tokens.begin() + start + len);
    main.sequences.push_back({start, len, table});
    const Tensor logits = model.forward(main, *cache);
    out.main.insert(out.main.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    ForwardBatch mtp;
    mtp.token_ids.assign(tokens.begin() + start + 1, tokens.begin() + start + len + 1);
    mtp.sequences.push_back({start, len, table});
    mtp.all_logits = true;
    std::vector<int64_t> rows(len);
    std::iota(rows.begin(), rows.end(), 0);
    const Tensor drafted = model.draft_module()->mtp_forward(mtp, rows, *cache);
    out.mtp.insert(out.mtp.end(), drafted.data<float>(), drafted.data<float>() + drafted.numel());
    start += len;
  }
  return out;
}

TEST(CudaMtp, ModuleMatchesTheCpuModule) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (const char* fixture : {"tiny-v3-fp32", "tiny-v3-bf16"}) {
    const std::unique_ptr<CausalLm> cpu = testing::load_with_drafter(fixture, Device::kCpu, /*rounded=*/true);
    const std::unique_ptr<CausalLm> gpu = testing::load_with_drafter(fixture, Device::kCuda, false);
    ASSERT_NE(gpu->draft_module(), nullptr) << fixture;
    const int64_t vocab = cpu->config().vocab_size;
    std::vector<int32_t> tokens;
    for (int64_t t = 0; t < 80; ++t) tokens.push_back(static_cast<int32_t>(2 + (t * 37 + 5) % (vocab - 2)));
    const MtpRun want = run_steps(*cpu, tokens), got = run_steps(*gpu, tokens);
    ASSERT_EQ(got.mtp.size(), want.mtp.size());
    const double main_median = testing::median_relative_error(got.main, want.main, vocab);
    const double mtp_median = testing::median_relative_error(got.mtp, want.mtp, vocab);
    std::printf("%s: GPU against CPU (bf16 weights), rows' median / worst: main model %.3e / %.3e, MTP module "
                "%.3e / %.3e (%zu rows)\n", fixture, main_median, testing::worst_relative_error(got.main, want.main, vocab),
                mtp_median, testing::worst_relative_error(got.mtp, want.mtp, vocab), got.mtp.size() / vocab);
    // bf16 activations against fp32: the module adds one layer to the main model's error (a wrong input row, norm
    // or cache layer gives errors of order 1 in every row).
    EXPECT_LT(mtp_median, 0.05) << fixture;
    EXPECT_LT(mtp_median, 2 * main_median + 0.02) << fixture;
  }
}

// mtp_draft takes the argmax and its probability on the device: those of mtp_forward's logits (the same step again,
// its cache layer rewritten with the same values).
TEST(CudaMtp, DraftsAreTheLogitsArgmax) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> gpu = testing::load_with_drafter("tiny-v3-bf16", Device::kCuda, false);
  const int64_t vocab = gpu->config().vocab_size;
  std::unique_ptr<KvCache> cache = gpu->make_kv_cache(4);
  std::vector<std::vector<int32_t>> tables = {{0, 1}, {2, 3}};
  ForwardBatch main, mtp;
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t len = 20 + 9 * s;
    for (int64_t t = 0; t < len; ++t) main.token_ids.push_back(static_cast<int32_t>(2 + (t * 31 + 7 * s) % (vocab - 2)));
    for (int64_t t = 0; t < len; ++t) mtp.token_ids.push_back(static_cast<int32_t>(2 + (t * 17 + 3 * s) % (vocab - 2)));
    main.sequences.push_back({0, len, tables[s]});
    mtp.sequences.push_back({0, len, tables[s]});
  }
  gpu->forward(main, *cache);
  std::vector<int64_t> rows(main.num_tokens());
  std::iota(rows.begin(), rows.end(), 0);
  const Tensor logits = gpu->draft_module()->mtp_forward(mtp, rows, *cache);  // one row a sequence (its last)
  const std::vector<MtpDraft> drafts = gpu->draft_module()->mtp_draft(mtp, rows, *cache);
  ASSERT_EQ(static_cast<int64_t>(drafts.size()), logits.size(0));
  std::vector<int32_t> tokens(drafts.size());
  std::vector<float> probability(drafts.size());
  cpu::argmax_rows(logits.data<float>(), logits.size(0), vocab, tokens.data(), probability.data());
  for (size_t r = 0; r < drafts.size(); ++r) {
    EXPECT_EQ(drafts[r].token, tokens[r]) << "row " << r;
    EXPECT_NEAR(drafts[r].confidence, probability[r], 1e-5 * probability[r] + 1e-7) << "row " << r;
  }
}

// Through the engine: the module drafts one token a step, the outputs are plain decoding's. Under
// --batch-invariant, whose rows carry the same bits in a verify step as in a one-row step (without it a V3 verify
// row may part from a one-row step in its last bits: test_speculation_cuda.cpp).
TEST(CudaMtp, DrafterKeepsThePlainOutputs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (float temperature : {0.0f, 0.8f}) {
    const std::unique_ptr<CausalLm> model =
        testing::load_with_drafter("tiny-v3-bf16", Device::kCuda, false, /*batch_invariant=*/true);
    const SpeculationStats s =
        testing::expect_model_drafter_keeps_outputs(*model, 1, false, temperature, 16384, "tiny-v3-bf16 on the GPU");
    EXPECT_GT(s.verified, 0);
    std::printf("tiny-v3-bf16 on the GPU, temperature %.1f: MTP drafts %lld verified, %lld accepted\n", temperature,
                static_cast<long long>(s.verified), static_cast<long long>(s.accepted));
  }
}

// Through the engine with overlapped scheduling, each MTP draft chained behind its verify step (the module over every
// row of the step, read at the last accepted one; speculation_cases.h): plain decoding's outputs and the in-order
// run's drafts, greedy and sampled, preempting, and under the variable-length rule. Under --batch-invariant.
TEST(CudaMtp, ChainedDraftsGiveTheInOrderRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> model =
      testing::load_with_drafter("tiny-v3-bf16", Device::kCuda, false, /*batch_invariant=*/true);
  ASSERT_TRUE(model->draft_module()->chains_drafts());
  testing::expect_chained_drafts_keep_the_outputs(*model, 1, false, 0.0f, 16384, "tiny-v3-bf16, greedy");
  testing::expect_chained_drafts_keep_the_outputs(*model, 1, false, 0.8f, 16384, "tiny-v3-bf16, sampled");
  testing::expect_chained_drafts_keep_the_outputs(*model, 1, false, 0.0f, 3 * 64, "tiny-v3-bf16, greedy, 3 blocks");
  testing::expect_chained_drafts_keep_the_outputs(*model, 1, true, 0.0f, 16384, "tiny-v3-bf16, varlen");
}

}  // namespace
}  // namespace deepinfer
