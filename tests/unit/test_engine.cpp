// Greedy generation through the engine equals transformers' greedy continuations, however the work is
// batched: all prompts together, chunked prefill, and a KV cache so small that sequences are preempted; in order
// and with overlapped scheduling (step N + 1 started before step N's tokens are postprocessed).
#include <gtest/gtest.h>

#include <deque>

#include "kernels/cpu/sampling.h"
#include "src/engine/engine.h"
#include "src/model/deepseek/deepseek_model.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

struct GenerationCase {
  const char* name;
  int64_t kv_cache_tokens;
  int64_t chunk_tokens;
  int64_t max_running;
  bool overlap = false;
  bool late_tokens = false;  // through LateTokens: the owed inputs linked to the previous step's rows
};

// A backend that starts steps asynchronously, as the CUDA models do (DeviceSteps::samples_async), over the CPU model: a
// started step runs at once, but its tokens reach the engine only at finish_forward_and_sample, and the inputs it
// owes are taken from the previous started step's rows (ForwardBatch::tokens_from_previous_step), as the device
// takes them. So the engine's bookkeeping of overlapped steps with the tokens left on the device runs on the CPU.
class LateTokens final : public CausalLm, public DeviceSteps {
 public:
  explicit LateTokens(CausalLm& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override { return inner_.make_kv_cache(num_blocks); }
  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts) const override {
    return inner_.forward(batch, cache, experts);
  }
  ExpertStore& experts() override { return inner_.experts(); }
  const ExpertStore& experts() const override { return inner_.experts(); }
  size_t kv_cache_bytes_per_token() const override { return inner_.kv_cache_bytes_per_token(); }
  const DeviceSteps* device_steps() const override { return this; }
  bool samples_async() const override { return true; }
  // (the engine calls it in order only: with structured output, or handing off after prefill)
  std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                          std::span<const SamplingRow> rows, const TokenMasks* masks,
                                          uint64_t*) const override {
    EXPECT_TRUE(masks == nullptr || masks->empty());
    const Tensor logits = inner_.forward(batch, cache, experts);
    std::vector<int32_t> tokens(rows.size());
    cpu::sample_rows(logits.data<float>(), logits.size(0), config().vocab_size, rows.data(), tokens.data());
    return tokens;
  }
  void start_forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                std::span<const SamplingRow> rows, bool) const override {
    EXPECT_LT(started_.size(), 2u) << "the engine finishes step N before it starts N + 2";
    ForwardBatch filled = batch;
    const std::vector<int32_t>& owed = batch.tokens_from_previous_step;
    for (size_t i = 0; i < owed.size(); i += 2) {
      EXPECT_EQ(batch.token_ids[owed[i]], 0) << "an owed input not left at 0";
      filled.token_ids[owed[i]] = started_.back().at(owed[i + 1]);  // the previous started step's row
    }
    ++linked_inputs_;
    const Tensor logits = inner_.forward(filled, cache, experts);
    std::vector<int32_t> tokens(rows.size());
    cpu::sample_rows(logits.data<float>(), logits.size(0), config().vocab_size, rows.data(), tokens.data());
    started_.push_back(std::move(tokens));
  }
  std::vector<int32_t> finish_forward_and_sample(uint64_t*) const override {
    std::vector<int32_t> tokens = std::move(started_.front());
    started_.pop_front();
    return tokens;
  }
  int64_t started_steps() const { return linked_inputs_; }

 private:
  CausalLm& inner_;
  mutable std::deque<std::vector<int32_t>> started_;
  mutable int64_t linked_inputs_ = 0;
};

std::vector<Request> fixture_requests(const nlohmann::json& reference) {
  std::vector<Request> requests;
  for (const auto& prompt : reference.at("prompts")) {
    Request r;
    r.id = static_cast<int64_t>(requests.size());
    r.prompt_token_ids = prompt.get<std::vector<int32_t>>();
    r.max_new_tokens = reference.at("max_new_tokens").get<int64_t>();
    requests.push_back(std::move(r));
  }
  return requests;
}

class GreedyGeneration : public ::testing::TestWithParam<std::tuple<std::string, GenerationCase>> {};

TEST_P(GreedyGeneration, EqualsTransformers) {
  const auto& [fixture, setup] = GetParam();
  const auto dir = testing::fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  DeepseekModel model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  const nlohmann::json reference = testing::fixture_reference(fixture);
  const std::vector<Request> requests = fixture_requests(reference);

  EngineOptions options;
  options.kv_cache_tokens = setup.kv_cache_tokens;
  options.limits.chunk_tokens = setup.chunk_tokens;
  options.limits.max_running = setup.max_running;
  options.overlap_schedule = setup.overlap;
  LateTokens late(model);
  Engine engine(setup.late_tokens ? static_cast<const CausalLm&>(late) : model, options);
  EXPECT_EQ(engine.overlaps_steps(), setup.overlap);
  for (const Request& r : requests) engine.add_request(r);
  engine.run_to_completion();
  const std::vector<RequestResult> results = engine.results();
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].output_token_ids, reference.at("greedy")[i].get<std::vector<int32_t>>())
        << fixture << " " << setup.name << " prompt " << i;
    EXPECT_EQ(results[i].prompt_tokens, static_cast<int64_t>(requests[i].prompt_token_ids.size()));
  }
  if (std::string(setup.name).starts_with("preempting")) {
    EXPECT_GT(engine.num_preemptions(), 0);
  }
  if (setup.late_tokens) {
    EXPECT_GT(late.started_steps(), 0) << "the steps did not start through the late path";
  }
}

const GenerationCase kCases[] = {
    {"batched", 16384, 4096, 256},
    {"chunked", 16384, 16, 256},
    {"one_at_a_time", 16384, 4096, 1},
    {"preempting", 3 * 64, 4096, 2},  // 3 blocks: the 64- and 100-token prompts run together, cannot both grow
    {"batched_overlapped", 16384, 4096, 256, true},
    {"chunked_overlapped", 16384, 16, 256, true},
    {"preempting_overlapped", 3 * 64, 4096, 2, true},
    {"batched_late_tokens", 16384, 4096, 256, true, true},
    {"chunked_late_tokens", 16384, 16, 256, true, true},
    {"preempting_late_tokens", 3 * 64, 4096, 2, true, true},
};

INSTANTIATE_TEST_SUITE_P(Fixtures, GreedyGeneration,
                         ::testing::Combine(::testing::ValuesIn(testing::all_fixtures()), ::testing::ValuesIn(kCases)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Engine, RejectsRequestsItCannotServe) {
  const auto dir = testing::fixture_dir("tiny-v2-fp32");
  ModelConfig config = load_model_config(dir);
  DeepseekModel model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  EngineOptions options;
  options.kv_cache_tokens = 128;
  Engine engine(model, options);
  Request r;
  r.id = "long";
  r.max_new_tokens = 4;
  r.prompt_token_ids.assign(config.max_position_embeddings, 5);
  EXPECT_THROW(
      {
        try {
          engine.validate(r);
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("exceed"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("\"long\""), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
  r.prompt_token_ids.assign(100, 5);
  r.max_new_tokens = 100;  // 200 tokens > 128 in the cache
  EXPECT_THROW(engine.validate(r), InputError);
  r.prompt_token_ids = {5, 99999};
  r.max_new_tokens = 1;
  EXPECT_THROW(engine.validate(r), InputError);
}

// Benchmarks admit sequences at a chosen context without their prefill (Engine::add_cached): each step then
// decodes one token of every such sequence, none leaves the batch while ignore_eos holds, and admission refuses
// what the cache cannot hold.
TEST(Engine, CachedSequencesDecodeFromTheirContext) {
  const auto dir = testing::fixture_dir("tiny-v2-fp32");
  ModelConfig config = load_model_config(dir);
  DeepseekModel model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  EngineOptions options;
  options.kv_cache_tokens = 4 * 64;  // four blocks
  Engine engine(model, options);
  engine.fill_cache_random(7);
  std::vector<Request> requests(3);
  for (int64_t i = 0; i < 3; ++i) {
    requests[i].index = i;
    requests[i].id = i;
    requests[i].prompt_token_ids.assign(100, static_cast<int32_t>(5 + i));  // 100 + 1 tokens: two blocks each
    requests[i].max_new_tokens = 8;
    requests[i].sampling.ignore_eos = true;
  }
  auto tokens_of = [](const Request& r) {
    std::vector<int32_t> tokens = r.prompt_token_ids;
    tokens.push_back(7);  // the token after the cached context
    return tokens;
  };
  ASSERT_TRUE(engine.add_cached(requests[0], tokens_of(requests[0])));
  ASSERT_TRUE(engine.add_cached(requests[1], tokens_of(requests[1])));
  EXPECT_FALSE(engine.add_cached(requests[2], tokens_of(requests[2])));  // no blocks left
  for (int step = 0; step < 3; ++step) engine.step();
  EXPECT_EQ(engine.stats().num_decode_tokens, 2 * 3);
  EXPECT_EQ(engine.stats().num_prefill_tokens, 0);
  const std::vector<RequestResult> results = engine.results();
  ASSERT_EQ(results.size(), 2u);
  for (const RequestResult& r : results) {
    EXPECT_EQ(r.output_token_ids.size(), 1u + 3u);  // the admitted token and one a step
    EXPECT_EQ(r.finish_reason, FinishReason::kNone);
  }
}

}  // namespace
}  // namespace deepinfer
