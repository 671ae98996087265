// Speculative decoding against plain decoding through the engine, on any backend: the same requests run once
// without speculation (the reference, whose outputs the controlled drafter then proposes from) and once with it;
// the outputs must be the same token for token. Shared by the CPU unit tests and the GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/engine/controlled_drafter.h"
#include "src/engine/engine.h"

namespace deepinfer::testing {

struct SpeculationCase {
  const char* name;
  int64_t num_drafts;
  bool variable_length;
  double mean_acceptance;
  double spread;
  float temperature;  // 0: greedy
  int64_t kv_cache_tokens = 16384;
};

// Prompts whose generations cross 64-token block boundaries and (V4.1's window of 8 in the fixtures) many window
// wrap-arounds, one request with fewer new tokens than drafts, and one that a stop token ends early.
inline std::vector<Request> speculation_requests(int64_t vocab, float temperature) {
  std::vector<Request> requests;
  const int64_t lengths[] = {1, 7, 33, 60, 63, 100};
  for (int64_t len : lengths) {
    Request r;
    r.index = r.id = static_cast<int64_t>(requests.size());
    for (int64_t t = 0; t < len; ++t) r.prompt_token_ids.push_back(static_cast<int32_t>(2 + (t * 37 + len * 11) % (vocab - 2)));
    r.max_new_tokens = len == 7 ? 2 : 40;
    r.sampling.temperature = temperature;
    r.sampling.top_p = temperature > 0 ? 0.9f : 1.0f;
    r.sampling.seed = 1000 + static_cast<uint64_t>(len);
    r.sampling.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  return requests;
}

struct SpeculationRun {
  std::vector<RequestResult> results;
  EngineStats stats;
};

inline SpeculationRun run_generation(const CausalLm& model, const std::vector<Request>& requests,
                                     const SpeculationCase& c, Drafter* drafter) {
  EngineOptions options;
  options.kv_cache_tokens = c.kv_cache_tokens;
  if (drafter != nullptr) options.speculation = {c.num_drafts, c.variable_length, drafter, 6};
  Engine engine(model, options);
  for (const Request& r : requests) engine.add_request(r);
  engine.run_to_completion();
  return {engine.results(), engine.stats()};
}

// The model's own drafter (SpeculationOptions::model_drafter: its MTP or DSpark module, enabled on the model) through
// the engine on speculation_requests: every output equal to plain decoding's (`name` labels failures); returns the
// speculative run's statistics.
inline SpeculationStats expect_model_drafter_keeps_outputs(const CausalLm& model, int64_t num_drafts,
                                                           bool variable_length, float temperature,
                                                           int64_t kv_cache_tokens, const std::string& name) {
  const std::vector<Request> requests = speculation_requests(model.config().vocab_size, temperature);
  const SpeculationCase plain_case{"plain", 0, false, 0, 0, temperature, kv_cache_tokens};
  const SpeculationRun plain = run_generation(model, requests, plain_case, nullptr);
  EngineOptions options;
  options.kv_cache_tokens = kv_cache_tokens;
  options.speculation.num_drafts = num_drafts;
  options.speculation.variable_length = variable_length;
  options.speculation.cost_warmup_steps = 2 * (num_drafts + 1);
  options.speculation.model_drafter = true;
  Engine engine(model, options);
  for (const Request& r : requests) engine.add_request(r);
  engine.run_to_completion();
  const std::vector<RequestResult> results = engine.results();
  EXPECT_EQ(results.size(), plain.results.size()) << name;
  for (size_t i = 0; i < results.size() && i < plain.results.size(); ++i)
    EXPECT_EQ(results[i].output_token_ids, plain.results[i].output_token_ids) << name << ", request " << i;
  return engine.stats().speculation;
}

// The model's own drafter through the engine with overlapped scheduling on a backend that chains drafts behind their
// verify steps (DraftModule::chains_drafts), against the same runs in order and without speculation: the outputs are
// plain decoding's, and at a fixed length the drafted / verified / accepted counts and preemptions the in-order
// run's (the variable-length rule's lengths follow measured times). A chained draft covers every sequence of its
// verify step, the ones that step finished too, so a draft product run at other row counts may move a confidence's
// last bits: the calibration error agrees to 1e-4.
inline void expect_chained_drafts_keep_the_outputs(const CausalLm& model, int64_t drafts, bool varlen, float temperature,
                                                   int64_t cache_tokens, const std::string& name) {
  const std::vector<Request> requests = speculation_requests(model.config().vocab_size, temperature);
  const auto run = [&](int64_t n, bool overlap) {
    EngineOptions options;
    options.kv_cache_tokens = cache_tokens;
    options.speculation.num_drafts = n;
    options.speculation.variable_length = varlen && n > 0;
    options.speculation.cost_warmup_steps = 2 * (n + 1);
    options.speculation.model_drafter = n > 0;
    options.overlap_schedule = overlap;
    Engine engine(model, options);
    EXPECT_EQ(engine.overlaps_steps(), overlap) << name;
    for (const Request& r : requests) engine.add_request(r);
    engine.run_to_completion();
    return std::tuple(engine.results(), engine.stats(), engine.num_preemptions());
  };
  const auto [plain, plain_stats, plain_preemptions] = run(0, false);
  const auto [in_order, in_order_stats, in_order_preemptions] = run(drafts, false);
  const auto [chained, chained_stats, preemptions] = run(drafts, true);
  ASSERT_EQ(chained.size(), plain.size()) << name;
  for (size_t i = 0; i < chained.size(); ++i) {
    EXPECT_EQ(chained[i].output_token_ids, plain[i].output_token_ids) << name << ", request " << i;
    EXPECT_EQ(in_order[i].output_token_ids, plain[i].output_token_ids) << name << ", request " << i;
  }
  const SpeculationStats &a = chained_stats.speculation, &b = in_order_stats.speculation;
  EXPECT_GT(a.verified, 0) << name;
  if (!varlen) {
    EXPECT_EQ(a.drafted, b.drafted) << name;
    EXPECT_EQ(a.verified, b.verified) << name;
    EXPECT_EQ(a.accepted, b.accepted) << name;
    EXPECT_NEAR(a.calibration_error(), b.calibration_error(), 1e-4) << name;
    EXPECT_EQ(preemptions, in_order_preemptions) << name;
  }
  if (cache_tokens < 1024) {
    EXPECT_GT(preemptions, 0) << name;
  }
  std::printf("%s: chained %lld drafted, %lld verified, %lld accepted, %lld preemptions; device idle %.3f ms over %lld "
              "gaps (in order %.3f over %lld)\n", name.c_str(), static_cast<long long>(a.drafted),
              static_cast<long long>(a.verified), static_cast<long long>(a.accepted),
              static_cast<long long>(preemptions), chained_stats.device_idle_ms,
              static_cast<long long>(chained_stats.device_idle_steps), in_order_stats.device_idle_ms,
              static_cast<long long>(in_order_stats.device_idle_steps));
}

// Runs the case and checks the outputs against plain decoding's; returns the speculative run's statistics.
inline SpeculationStats expect_speculation_keeps_outputs(const CausalLm& model, const SpeculationCase& c) {
  std::vector<Request> requests = speculation_requests(model.config().vocab_size, c.temperature);
  // A stop token met part-way: the 33-token prompt's 10th plain output token stops it.
  const SpeculationRun unstopped = run_generation(model, requests, c, nullptr);
  requests[2].sampling.stop_token_ids = {unstopped.results[2].output_token_ids[9]};
  const SpeculationRun plain = run_generation(model, requests, c, nullptr);
  std::unordered_map<std::string, std::vector<int32_t>> reference;
  for (const RequestResult& r : plain.results) reference[r.id.dump()] = r.output_token_ids;
  ControlledDrafter drafter({c.mean_acceptance, c.spread, 5}, model.config().vocab_size, reference);
  const SpeculationRun spec = run_generation(model, requests, c, &drafter);
  EXPECT_EQ(plain.results.size(), spec.results.size());
  int64_t same = 0, total = 0;
  for (size_t i = 0; i < plain.results.size() && i < spec.results.size(); ++i) {
    const std::vector<int32_t>& a = spec.results[i].output_token_ids;
    const std::vector<int32_t>& b = plain.results[i].output_token_ids;
    size_t first_diff = 0;
    while (first_diff < a.size() && first_diff < b.size() && a[first_diff] == b[first_diff]) ++first_diff;
    same += static_cast<int64_t>(first_diff);
    total += static_cast<int64_t>(b.size());
    EXPECT_EQ(a, b) << c.name << " request " << i << ": first difference at output token " << first_diff;
    EXPECT_EQ(spec.results[i].finish_reason, plain.results[i].finish_reason) << c.name << " request " << i;
  }
  std::printf("%s: %lld of %lld output tokens identical up to each request's first difference\n", c.name,
              static_cast<long long>(same), static_cast<long long>(total));
  EXPECT_EQ(plain.results[1].output_token_ids.size(), 2u);
  EXPECT_LE(plain.results[2].output_token_ids.size(), 10u);
  EXPECT_EQ(plain.results[2].finish_reason, FinishReason::kStop);
  // Speculation did happen: drafts were verified and accepted, and it took fewer decode steps.
  const SpeculationStats& s = spec.stats.speculation;
  EXPECT_GT(s.verified, 0) << c.name;
  EXPECT_GT(s.accepted, 0) << c.name;
  EXPECT_LT(s.accepted, s.verified) << c.name << ": some drafts must be rejected for rollback to be tested";
  EXPECT_LT(spec.stats.num_steps, plain.stats.num_steps) << c.name;
  return s;
}

inline const std::vector<SpeculationCase>& speculation_cases() {
  static const std::vector<SpeculationCase> kCases = {
      {"fixed3_greedy", 3, false, 0.7, 1.0, 0.0f},
      {"fixed5_sampled", 5, false, 0.6, 1.5, 0.8f},
      {"varlen5_greedy", 5, true, 0.8, 2.0, 0.0f},
      {"varlen4_sampled", 4, true, 0.75, 1.0, 1.0f},
      // Few blocks: drafts are verified only where their rows' blocks fit, and sequences are preempted.
      {"fixed4_tight_cache", 4, false, 0.9, 0.5, 0.0f, 4 * 64},
  };
  return kCases;
}

// gtest's name of a (fixture, case) parameter: fixture_case, dashes as underscores.
inline std::string speculation_case_name(const std::tuple<std::string, SpeculationCase>& param) {
  std::string name = std::get<0>(param) + "_" + std::get<1>(param).name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace deepinfer::testing
