// Stop sequences ended where the sequences decode (engine/stop_sequences.h): tiny-v3-bf16 with the byte-level
// tokenizer (tests/fixtures/tokenizer-bytes), requests whose stop sequences are pieces of what they generate without
// them. The engine stops each at the token that completes its first stop sequence, as the chat stream parser reads
// the whole output (the writers' reading), in order and with overlapped scheduling; without EngineOptions::stops it
// runs on as before.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/core/files.h"

#include "src/engine/engine.h"
#include "src/engine/stop_sequences.h"
#include "src/model/deepseek/deepseek_model.h"
#include "src/text/bpe_tokenizer.h"
#include "src/text/stream_parser.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

constexpr int64_t kRequests = 6, kNewTokens = 48;

// tokenizer-bytes (221 ids) with added tokens up to the model's vocabulary (320), which random weights do sample.
const text::BpeTokenizer& bytes_tokenizer() {
  static const text::BpeTokenizer tokenizer = [] {
    nlohmann::json spec = nlohmann::json::parse(read_text_file(
        std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests" / "fixtures" / "tokenizer-bytes" / "tokenizer.json",
        "tokenizer"));
    for (int64_t id = 221; id < 320; ++id)
      spec["added_tokens"].push_back({{"id", id}, {"content", "<x" + std::to_string(id) + ">"}, {"single_word", false},
                                      {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", false}});
    const auto path = std::filesystem::temp_directory_path() / "stop_sequences_tokenizer.json";
    std::ofstream(path) << spec.dump();
    return text::BpeTokenizer::load(path);
  }();
  return tokenizer;
}

std::vector<Request> plain_requests(int64_t vocab) {
  std::vector<Request> requests;
  for (int64_t i = 0; i < kRequests; ++i) {
    Request r;
    r.index = i;
    r.id = i;
    for (int64_t t = 0; t < 5 + 3 * i; ++t) r.prompt_token_ids.push_back(static_cast<int32_t>(3 + (7 * t + 11 * i) % (vocab - 3)));
    r.max_new_tokens = kNewTokens;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.7f;
    r.sampling.seed = 100 + i;
    r.sampling.ignore_eos = true;  // (random weights: the EOS would end some early, leaving nothing to stop)
    requests.push_back(r);
  }
  return requests;
}

std::vector<RequestResult> run(const CausalLm& model, const std::vector<Request>& requests, StopSequences* stops,
                               bool overlap) {
  EngineOptions options;
  options.kv_cache_tokens = 4096;
  options.limits.max_running = 4;  // (a queue: some requests start after others finished)
  options.stops = stops;
  options.overlap_schedule = overlap;
  Engine engine(model, options);
  for (const Request& r : requests) engine.add_request(r);
  engine.run_to_completion();
  return engine.results();
}

// The output tokens a reader keeps: up to the one whose text completes a stop sequence (the parser's "stop").
size_t stop_token_count(const std::vector<int32_t>& output, const TextStops& stops) {
  text::ChatStreamParser parser(bytes_tokenizer(), stops.reasoning_first, stops.sequences);
  for (size_t i = 0; i < output.size(); ++i)
    for (const text::StreamEvent& e : parser.push(output[i]))
      if (e.finish_reason == "stop") return i + 1;
  return output.size();
}

TEST(StopSequences, EndTheSequenceAtTheTokenThatCompletesOne) {
  const auto dir = testing::fixture_dir("tiny-v3-bf16");
  const ModelConfig config = load_model_config(dir);
  const DeepseekModel model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  std::vector<Request> requests = plain_requests(config.vocab_size);
  const std::vector<RequestResult> plain = run(model, requests, nullptr, false);
  ASSERT_EQ(plain.size(), requests.size());
  // Each request's stop: two letters or digits of its own output's text from its 20th token on (one request none,
  // one a stop that never appears); the first place it completes may come earlier.
  std::vector<size_t> want(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<int32_t>& out = plain[i].output_token_ids;
    ASSERT_EQ(out.size(), static_cast<size_t>(kNewTokens));
    // From the byte-level tokens' text (ids 3-220; 0-2 are <bos>, <eos>, <pad>): an added token's is never searched.
    const auto byte_level = [](int32_t id) { return id >= 3 && id < 221; };
    std::string stop;
    for (size_t k = 20; k + 1 < out.size() && stop.empty(); ++k) {
      if (!byte_level(out[k]) || !byte_level(out[k + 1])) continue;
      const std::string text = bytes_tokenizer().decode({out[k], out[k + 1]});
      for (size_t c = 0; c + 2 <= text.size() && stop.empty(); ++c)
        if (std::isalnum(static_cast<unsigned char>(text[c])) && std::isalnum(static_cast<unsigned char>(text[c + 1])))
          stop = text.substr(c, 2);
    }
    if (i == 4) stop.clear();
    if (i == 5) stop = "\x01never\x01";
    if (!stop.empty()) requests[i].stops.sequences = {stop};
    want[i] = stop.empty() ? out.size() : stop_token_count(out, requests[i].stops);
    if (i < 4) {
      EXPECT_LT(want[i], out.size()) << "request " << i << ": its stop '" << stop << "' is in its output";
    }
  }
  for (bool overlap : {false, true}) {
    StopSequences stops([] () -> const text::BpeTokenizer& { return bytes_tokenizer(); });
    const std::vector<RequestResult> got = run(model, requests, &stops, overlap);
    ASSERT_EQ(got.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::vector<int32_t>& out = plain[i].output_token_ids;
      EXPECT_EQ(got[i].output_token_ids, std::vector<int32_t>(out.begin(), out.begin() + want[i]))
          << "request " << i << (overlap ? ", overlapped" : ", in order");
      EXPECT_EQ(got[i].finish_reason, i < 4 ? FinishReason::kStop : FinishReason::kLength) << "request " << i;
    }
    EXPECT_EQ(stops.watched(), 0) << "a finished sequence's parser stays";
  }
  // Without the engine's watch the requests run to their length, as before (the writers still cut the content).
  const std::vector<RequestResult> unwatched = run(model, requests, nullptr, false);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(unwatched[i].output_token_ids, plain[i].output_token_ids);
}

}  // namespace
}  // namespace deepinfer
