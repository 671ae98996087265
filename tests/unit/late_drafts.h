// Drafts chained behind their verify steps (the engine's overlapped scheduling with the model's drafter,
// DraftModule::start_chained_draft) on the CPU: LateDrafts plays the device's part over a CPU model with a drafter
// (V3's MTP module or V4.1's DSpark layers), and expect_chained_drafts_give_the_in_order_run runs the engine both ways.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "src/core/random.h"
#include "src/engine/engine.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer::testing {

// A backend that chains drafts behind their verify steps, as the CUDA models do (DraftModule::chains_drafts), over a CPU
// model: a started verify step runs at once, but its tokens reach the engine only at finish_forward_and_sample; its
// draft rows named by ForwardBatch::tokens_from_draft take the started draft's tokens; the draft started after it is
// anchored where the step's own acceptance puts each sequence (found here from the step's inputs and draws, as the
// device finds it) and drafted as in order (DSpark: a block at the anchor; MTP: the module over the accepted rows),
// and its blocks reach the engine only at finish_chained_draft. So the engine's bookkeeping of chained drafts runs on
// the CPU. The fixtures' random draft layers are almost never right, so with `references` (each request's prompt and
// plain outputs) a draft is made the right token where a hash of its position says so (3 in 4), in every draft,
// chained or not: acceptance then reaches every length and the anchors move by it.
class LateDrafts final : public CausalLm, public DeviceSteps, public DraftModule {
 public:
  LateDrafts(CausalLm& inner, const std::vector<std::vector<int32_t>>& references)
      : inner_(inner), references_(references) {}
  const ModelConfig& config() const override { return inner_.config(); }
  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override { return inner_.make_kv_cache(num_blocks); }
  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts) const override {
    return inner_.forward(batch, cache, experts);
  }
  ExpertStore& experts() override { return inner_.experts(); }
  const ExpertStore& experts() const override { return inner_.experts(); }
  size_t kv_cache_bytes_per_token() const override { return inner_.kv_cache_bytes_per_token(); }
  const DeviceSteps* device_steps() const override { return this; }
  const DraftModule* draft_module() const override { return inner_.draft_module() != nullptr ? this : nullptr; }
  Kind kind() const override { return module().kind(); }
  void enable() override { inner_.draft_module()->enable(); }
  bool enabled() const override { return module().enabled(); }
  int64_t block_size() const override { return module().block_size(); }
  std::vector<DraftBlock> dspark_draft(const ForwardBatch& anchors, KvCache& cache,
                                       std::span<const SamplingRow> rows) const override {
    EXPECT_FALSE(draft_started_) << "an in-order draft while a chained one is in flight";
    std::vector<DraftBlock> blocks = module().dspark_draft(anchors, cache, rows);
    for (size_t s = 0; s < blocks.size(); ++s) {
      std::vector<int32_t> history(anchors.sequences[s].earlier_tokens.begin(), anchors.sequences[s].earlier_tokens.end());
      history.push_back(anchors.token_ids[s]);
      make_right(history, blocks[s]);
    }
    return blocks;
  }
  // (the MTP drafter's batches carry each sequence's tokens up to its rows' first position: earlier_tokens)
  std::vector<MtpDraft> mtp_draft(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                  KvCache& cache) const override {
    EXPECT_FALSE(draft_started_) << "an in-order draft while a chained one is in flight";
    std::vector<MtpDraft> drafts = module().mtp_draft(batch, hidden_rows, cache);
    int64_t first = 0;
    for (size_t s = 0; s < drafts.size(); ++s) {
      const SequenceChunk& seq = batch.sequences[s];
      std::vector<int32_t> history(seq.earlier_tokens.begin(), seq.earlier_tokens.end());
      history.insert(history.end(), batch.token_ids.begin() + first, batch.token_ids.begin() + first + seq.num_new);
      DraftBlock block{{drafts[s].token}, {drafts[s].confidence}, std::ssize(history) - 1};
      make_right(history, block);
      drafts[s].token = block.tokens[0];
      first += seq.num_new;
    }
    return drafts;
  }
  bool samples_async() const override { return true; }
  bool chains_drafts() const override { return true; }
  std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                          std::span<const SamplingRow> rows, const TokenMasks* masks,
                                          uint64_t*) const override {
    EXPECT_TRUE(masks == nullptr || masks->empty());
    EXPECT_TRUE(batch.tokens_from_draft.empty()) << "an in-order step names a draft's tokens";
    return sample(inner_.forward(batch, cache, experts), rows);
  }
  void start_forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                std::span<const SamplingRow> rows, bool) const override {
    EXPECT_FALSE(step_started_) << "the engine finishes a verify step before it starts the next";
    verify_ = batch;
    const std::vector<int32_t>& owed = batch.tokens_from_draft;
    for (size_t i = 0; i < owed.size(); i += 2) {
      EXPECT_EQ(batch.token_ids[owed[i]], 0) << "a draft input not left at 0";
      EXPECT_TRUE(draft_started_) << "a step names the tokens of no draft in flight";
      verify_.token_ids[owed[i]] = draft_tokens_.at(owed[i + 1]);
    }
    linked_drafts_ += static_cast<int64_t>(owed.size() / 2);
    step_tokens_ = sample(inner_.forward(verify_, cache, experts), rows);
    step_started_ = true;
    accepted_.clear();
    if (!batch.speculative_verify) return;
    int64_t first = 0;  // each sequence's acceptance, as the device finds it: from the step's inputs and draws
    for (const SequenceChunk& seq : batch.sequences) {
      int64_t a = 0;
      while (a < seq.num_new - 1 && step_tokens_[first + a] == verify_.token_ids[first + a + 1]) ++a;
      accepted_.push_back(a);
      first += seq.num_new;
    }
  }
  std::vector<int32_t> finish_forward_and_sample(uint64_t*) const override {
    EXPECT_TRUE(step_started_);
    step_started_ = false;
    return step_tokens_;
  }
  void start_chained_draft(const ForwardBatch& verify, KvCache& cache, std::span<const SamplingRow> rows) const override {
    EXPECT_FALSE(draft_started_) << "a chained draft started before the last one finished";
    EXPECT_EQ(verify.sequences.size(), accepted_.size()) << "a draft after no verify step";
    // As in order: each sequence with its accepted drafts and next token appended (history: its tokens to the anchor).
    ForwardBatch anchors, mtp;
    std::vector<int64_t> hidden_rows;
    std::vector<std::vector<int32_t>> histories;
    int64_t first = 0;
    for (size_t s = 0; s < verify.sequences.size(); ++s) {
      const SequenceChunk& seq = verify.sequences[s];
      const int64_t a = accepted_[s];
      histories.emplace_back(seq.earlier_tokens.begin(), seq.earlier_tokens.end());
      histories.back().insert(histories.back().end(), verify_.token_ids.begin() + first,
                              verify_.token_ids.begin() + first + a + 1);
      histories.back().push_back(step_tokens_[first + a]);
      anchors.token_ids.push_back(histories.back().back());
      SequenceChunk anchor{seq.num_cached + 1 + a, 1, seq.block_table};
      anchor.swa_floor = seq.swa_floor;
      anchors.sequences.push_back(anchor);
      mtp.token_ids.insert(mtp.token_ids.end(), histories.back().end() - (a + 1), histories.back().end());
      mtp.sequences.push_back({seq.num_cached, a + 1, seq.block_table});
      for (int64_t r = 0; r <= a; ++r) hidden_rows.push_back(first + r);
      first += seq.num_new;
    }
    accepted_.clear();
    if (kind() == Kind::kDspark) {
      blocks_ = module().dspark_draft(anchors, cache, rows);
    } else {
      blocks_.clear();
      for (const MtpDraft& d : module().mtp_draft(mtp, hidden_rows, cache)) blocks_.push_back({{d.token}, {d.confidence}, -1});
    }
    for (size_t s = 0; s < blocks_.size(); ++s) {
      blocks_[s].position = std::ssize(histories[s]) - 1;
      make_right(histories[s], blocks_[s]);
    }
    const auto S = static_cast<int64_t>(blocks_.size()), B = static_cast<int64_t>(blocks_.at(0).tokens.size());
    draft_tokens_.assign(S * B, -1);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < B; ++k) draft_tokens_[k * S + s] = blocks_[s].tokens[k];
    draft_started_ = true;
    ++chained_drafts_;
  }
  std::vector<DraftBlock> finish_chained_draft() const override {
    EXPECT_TRUE(draft_started_);
    draft_started_ = false;
    return blocks_;
  }
  int64_t chained_drafts() const { return chained_drafts_; }
  int64_t linked_drafts() const { return linked_drafts_; }

 private:
  const DraftModule& module() const { return *inner_.draft_module(); }
  // history: a sequence's tokens up to its anchor (position size - 1); the block's drafts follow it.
  void make_right(const std::vector<int32_t>& history, DraftBlock& block) const {
    EXPECT_EQ(block.position + 1, std::ssize(history)) << "a block not anchored at its last token";
    for (const std::vector<int32_t>& reference : references_) {
      if (reference.size() < history.size() || !std::equal(history.begin(), history.end(), reference.begin())) continue;
      for (size_t k = 0; k < block.tokens.size() && history.size() + k < reference.size(); ++k)
        if (splitmix64(history.size() * 31 + k) % 4 != 0) block.tokens[k] = reference[history.size() + k];
      return;
    }
  }
  std::vector<int32_t> sample(const Tensor& logits, std::span<const SamplingRow> rows) const {
    std::vector<int32_t> tokens(rows.size());
    cpu::sample_rows(logits.data<float>(), logits.size(0), config().vocab_size, rows.data(), tokens.data());
    return tokens;
  }

  CausalLm& inner_;
  const std::vector<std::vector<int32_t>>& references_;
  mutable ForwardBatch verify_;  // the started verify step, its draft rows filled
  mutable std::vector<int32_t> step_tokens_, draft_tokens_;
  mutable std::vector<int64_t> accepted_;
  mutable std::vector<DraftBlock> blocks_;
  mutable bool step_started_ = false, draft_started_ = false;
  mutable int64_t chained_drafts_ = 0, linked_drafts_ = 0;
};

// `drafts` drafts a step from the model's own drafter (its module enabled) through the engine three ways on
// speculation_requests: plain, in order, and chained (overlapped scheduling through LateDrafts); the in-order and
// chained runs with the drafts made right 3 in 4 (LateDrafts). Chained = in order: the outputs (= plain) and the
// drafted / verified / accepted counts, steps and preemptions; then under the variable-length rule (chained, each
// step laid out once its draft is back; lengths follow measured times) the outputs = plain.
inline void expect_chained_drafts_give_the_in_order_run(CausalLm& model, int64_t drafts, float temperature,
                                                        int64_t cache_tokens, const std::string& name) {
  const std::vector<Request> requests = speculation_requests(model.config().vocab_size, temperature);
  std::vector<std::vector<int32_t>> references;
  const LateDrafts late(model, references);
  const auto run = [&](const CausalLm& backend, int64_t n, bool overlap, bool varlen) {
    EngineOptions options;
    options.kv_cache_tokens = cache_tokens;
    options.speculation.num_drafts = n;
    options.speculation.variable_length = varlen;
    options.speculation.cost_warmup_steps = 2 * (n + 1);
    options.speculation.model_drafter = n > 0;
    options.overlap_schedule = overlap;
    Engine engine(backend, options);
    EXPECT_EQ(engine.overlaps_steps(), overlap) << name;
    for (const Request& r : requests) engine.add_request(r);
    engine.run_to_completion();
    return std::tuple(engine.results(), engine.stats(), engine.num_preemptions());
  };
  const auto [plain, plain_stats, plain_preemptions] = run(model, 0, false, false);
  for (size_t i = 0; i < plain.size(); ++i) {
    references.push_back(requests[i].prompt_token_ids);
    references.back().insert(references.back().end(), plain[i].output_token_ids.begin(), plain[i].output_token_ids.end());
  }
  const auto [in_order, in_order_stats, in_order_preemptions] = run(late, drafts, false, false);
  EXPECT_EQ(late.chained_drafts(), 0) << name;
  const auto [chained, chained_stats, preemptions] = run(late, drafts, true, false);
  EXPECT_GT(late.chained_drafts(), 0) << name << ": no draft was chained";
  EXPECT_GT(late.linked_drafts(), 0) << name << ": no verify step took its drafts from a draft in flight";
  ASSERT_EQ(chained.size(), plain.size()) << name;
  ASSERT_EQ(in_order.size(), plain.size()) << name;
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(in_order[i].output_token_ids, plain[i].output_token_ids) << name << ", request " << i;
    EXPECT_EQ(chained[i].output_token_ids, plain[i].output_token_ids) << name << ", request " << i;
    EXPECT_EQ(chained[i].finish_reason, plain[i].finish_reason) << name << ", request " << i;
  }
  const SpeculationStats &a = chained_stats.speculation, &b = in_order_stats.speculation;
  EXPECT_EQ(a.drafted, b.drafted) << name;
  EXPECT_EQ(a.verified, b.verified) << name;
  EXPECT_EQ(a.accepted, b.accepted) << name;
  EXPECT_EQ(a.accepted_by_position, b.accepted_by_position) << name;
  EXPECT_EQ(a.calibration_error(), b.calibration_error()) << name;
  EXPECT_EQ(chained_stats.num_steps, in_order_stats.num_steps) << name;
  EXPECT_EQ(preemptions, in_order_preemptions) << name;
  if (cache_tokens < 1024) {
    EXPECT_GT(preemptions, 0) << name;
  }
  EXPECT_GT(a.accepted, a.verified / 4) << name << ": drafts accepted too rarely to move the anchors";
  std::printf("%s: %lld drafted, %lld verified, %lld accepted, %lld steps (plain %lld), %lld preemptions\n",
              name.c_str(), static_cast<long long>(a.drafted), static_cast<long long>(a.verified),
              static_cast<long long>(a.accepted), static_cast<long long>(chained_stats.num_steps),
              static_cast<long long>(plain_stats.num_steps), static_cast<long long>(preemptions));
  const int64_t chained_now = late.chained_drafts(), linked_now = late.linked_drafts();
  const auto [varlen, varlen_stats, varlen_preemptions] = run(late, drafts, true, true);
  EXPECT_GT(late.chained_drafts(), chained_now) << name << " varlen";
  EXPECT_EQ(late.linked_drafts(), linked_now) << name << " varlen: the drafts are on the host when a step is laid out";
  EXPECT_GT(varlen_stats.speculation.verified, 0) << name << " varlen";
  for (size_t i = 0; i < varlen.size() && i < plain.size(); ++i)
    EXPECT_EQ(varlen[i].output_token_ids, plain[i].output_token_ids) << name << " varlen, request " << i;
}

}  // namespace deepinfer::testing
