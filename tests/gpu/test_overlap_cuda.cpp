// Overlapped scheduling on the CUDA models (issue #27): steps started before the previous step's tokens reach the host
// (DeviceSteps::start_forward_and_sample), their inputs naming the previous step's sampled rows
// (ForwardBatch::tokens_from_previous_step) and filled on the device, give the tokens and logits fingerprints of the
// same steps run one after another with the tokens passed through the host. Sequences of several lengths, greedy and
// sampled rows, a step with a sequence that takes no owed token (its input given on the host) beside the others.
// configs/models/tiny.json (V3) and the tiny-v41-fp8 fixture's configuration, seeded weights generated on the GPU.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <set>

#include "src/core/device.h"
#include "src/model/deepseek/cuda/cuda_deepseek_model.h"
#include "src/model/v41/cuda/cuda_v41_model.h"
#include "src/model/model_config.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

constexpr int64_t kSequences = 5, kSteps = 8, kBlocksEach = 2;

struct Chain {
  std::vector<std::vector<int32_t>> tokens;   // per step, per sequence
  std::vector<std::vector<uint64_t>> hashes;  // the same
};

std::vector<SamplingRow> rows_at(int64_t position) {
  std::vector<SamplingRow> rows;
  for (int64_t s = 0; s < kSequences; ++s)  // odd sequences sampled
    rows.push_back({s % 2 == 1 ? 0.9f : 0.0f, 0.95f, 0, static_cast<uint64_t>(70 + s), position + s});
  return rows;
}

int32_t prompt_token(int64_t s, int64_t i, int64_t vocab) { return static_cast<int32_t>((i * 17 + 3 * s + 2) % vocab); }

// Sequence 2's input at step 3 is given on the host (a token of its own choosing), as a recomputed or new input would
// be; every other input of step k > 0 is the token step k - 1 sampled.
int32_t input_token(int64_t step, int64_t s, const std::vector<int32_t>& previous) {
  return step == 3 && s == 2 ? 7 : previous[s];
}

// Each sequence's tokens before step `step`'s input (engram hashing reads them): its prompt, then the inputs of steps
// 1 .. step - 1, which the tokens of steps 0 .. step - 2 give (`tokens`: per step, per sequence).
std::vector<std::vector<int32_t>> histories(int64_t step, const std::vector<std::vector<int32_t>>& tokens,
                                            int64_t vocab) {
  std::vector<std::vector<int32_t>> out(kSequences);
  for (int64_t s = 0; s < kSequences && step > 0; ++s) {
    for (int64_t i = 0; i < 5 + 11 * s; ++i) out[s].push_back(prompt_token(s, i, vocab));
    for (int64_t k = 1; k < step; ++k) out[s].push_back(input_token(k, s, tokens[k - 1]));
  }
  return out;
}

// Step 0 prefills every sequence (prompts of 5 + 11 s tokens); step k > 0 decodes one token a sequence, its earlier
// tokens `history` (which must outlive the batch).
ForwardBatch step_batch(int64_t step, const std::vector<std::vector<int32_t>>& tables, int64_t vocab,
                        const std::vector<int32_t>& previous, const std::vector<std::vector<int32_t>>& history) {
  ForwardBatch batch;
  for (int64_t s = 0; s < kSequences; ++s) {
    const int64_t prompt = 5 + 11 * s;
    if (step == 0) {
      for (int64_t i = 0; i < prompt; ++i) batch.token_ids.push_back(prompt_token(s, i, vocab));
      batch.sequences.push_back({0, prompt, tables[s]});
    } else {
      batch.token_ids.push_back(previous.empty() ? 0 : input_token(step, s, previous));
      batch.sequences.push_back({prompt + step - 1, 1, tables[s], history[s]});
    }
  }
  return batch;
}

std::vector<std::vector<int32_t>> block_tables() {
  std::vector<std::vector<int32_t>> tables(kSequences);
  for (int64_t s = 0; s < kSequences; ++s)
    for (int64_t b = 0; b < kBlocksEach; ++b) tables[s].push_back(static_cast<int32_t>(kBlocksEach * s + b));
  return tables;
}

// Each step's tokens back on the host before the next step starts.
Chain in_order(const CausalLm& model) {
  std::unique_ptr<KvCache> cache = model.make_kv_cache(kBlocksEach * kSequences);
  const auto tables = block_tables();
  Chain chain;
  const int64_t vocab = model.config().vocab_size;
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto history = histories(step, chain.tokens, vocab);
    const ForwardBatch batch =
        step_batch(step, tables, vocab, step == 0 ? std::vector<int32_t>{} : chain.tokens.back(), history);
    std::vector<uint64_t> hashes(kSequences);
    chain.tokens.push_back(model.device_steps()->forward_and_sample(batch, *cache, nullptr, rows_at(step), nullptr, hashes.data()));
    chain.hashes.push_back(hashes);
  }
  return chain;
}

// Step k + 1 started before step k is finished, its inputs the rows of step k's tokens on the device.
Chain overlapped(const CausalLm& model) {
  std::unique_ptr<KvCache> cache = model.make_kv_cache(kBlocksEach * kSequences);
  const auto tables = block_tables();
  Chain chain;
  const auto finish = [&] {
    std::vector<uint64_t> hashes(kSequences);
    chain.tokens.push_back(model.device_steps()->finish_forward_and_sample(hashes.data()));
    chain.hashes.push_back(hashes);
  };
  const int64_t vocab = model.config().vocab_size;
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto history = histories(step, chain.tokens, vocab);  // (the tokens of steps up to step - 2 are back)
    ForwardBatch batch = step_batch(step, tables, vocab, {}, history);
    if (step == 3) batch.token_ids[2] = 7;
    if (step > 0)
      for (int64_t s = 0; s < kSequences; ++s)
        if (!(step == 3 && s == 2))
          batch.tokens_from_previous_step.insert(batch.tokens_from_previous_step.end(),
                                                 {static_cast<int32_t>(s), static_cast<int32_t>(s)});
    model.device_steps()->start_forward_and_sample(batch, *cache, nullptr, rows_at(step), true);
    if (step > 0) finish();
  }
  finish();
  return chain;
}

void expect_overlap_equals_in_order(const CausalLm& model, const std::string& name) {
  ASSERT_TRUE(model.device_steps()->samples_async()) << name;
  const Chain a = in_order(model), b = overlapped(model);
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  for (int64_t step = 0; step < kSteps; ++step) {
    EXPECT_EQ(b.tokens[step], a.tokens[step]) << name << ", step " << step;
    EXPECT_EQ(b.hashes[step], a.hashes[step]) << name << ", step " << step;
  }
  // A chain that could not have been right by accident: the sequences' tokens vary.
  std::set<int32_t> seen;
  for (const auto& step : a.tokens) seen.insert(step.begin(), step.end());
  EXPECT_GT(seen.size(), 4u) << name;
}

TEST(CudaOverlap, V3StartedStepsTakeTheirInputsOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const ModelConfig config = load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json");
  const CudaDeepseekModel model(config, DummyWeightSource(3, nullptr), 0);
  expect_overlap_equals_in_order(model, "tiny.json");
}

TEST(CudaOverlap, V41StartedStepsTakeTheirInputsOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const ModelConfig config = load_model_config(testing::fixture_dir("tiny-v41-fp8"));
  const CudaV41Model model(config, DummyWeightSource(5, nullptr), 0);
  expect_overlap_equals_in_order(model, "tiny-v41-fp8");
}

// With engram layers (tables whole on the rank): a started step's engram rows hashed on the device from the inputs
// written there, its earlier tokens' from the host.
TEST(CudaOverlap, V41WithEngramStartedStepsTakeTheirInputsOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const ModelConfig config = load_model_config(testing::fixture_dir("tiny-v41-engram"));
  ASSERT_FALSE(config.v41.engram_layer_ids.empty());
  const CudaV41Model model(config, DummyWeightSource(5, nullptr), 0);
  expect_overlap_equals_in_order(model, "tiny-v41-engram");
}

}  // namespace
}  // namespace deepinfer
