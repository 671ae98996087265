#include "src/engine/dspark_drafter.h"

#include <algorithm>

#include "src/core/check.h"

namespace deepinfer {

DraftProposal DsparkDrafter::propose(const Sequence& seq, int64_t max_drafts) {
  DraftProposal proposal;
  const auto it = pending_.find(&seq);
  if (it == pending_.end() || it->second.position != seq.num_tokens()) return proposal;
  const Pending& pending = it->second;
  if (pending.in_flight >= 0) {
    const int64_t n = std::min(max_drafts, model_.dspark_block_size());
    proposal.tokens.assign(n, 0);
    proposal.confidence.assign(n, 0.0);
    return proposal;
  }
  const auto n = std::min<int64_t>(max_drafts, static_cast<int64_t>(pending.block.tokens.size()));
  proposal.tokens.assign(pending.block.tokens.begin(), pending.block.tokens.begin() + n);
  proposal.confidence.assign(pending.block.confidence.begin(), pending.block.confidence.begin() + n);
  return proposal;
}

SamplingRow DsparkDrafter::sampling_row(const Sequence& seq) {
  const SamplingParams& p = seq.request->sampling;
  return {p.temperature, p.top_p, p.top_k, p.seed + kDraftSeedOffset, 0};
}

void DsparkDrafter::after_step(const ScheduledBatch& batch, KvCache& cache) {
  ForwardBatch anchors;
  std::vector<SamplingRow> rows;
  std::vector<const Sequence*> drafted;
  for (const ScheduledSequence& item : batch.items) {
    const Sequence& seq = *item.seq;
    if (seq.status != SequenceStatus::kRunning || seq.num_cached != seq.num_tokens() - 1) {
      pending_.erase(&seq);  // finished (its blocks are gone), preempted, or still prefilling
      continue;
    }
    anchors.token_ids.push_back(seq.tokens.back());
    SequenceChunk anchor{seq.num_cached, 1, seq.block_table, {seq.tokens.data(), static_cast<size_t>(seq.num_cached)}};
    anchor.swa_floor = seq.swa_floor;  // no window state below it
    anchors.sequences.push_back(anchor);
    rows.push_back(sampling_row(seq));
    drafted.push_back(&seq);
  }
  if (drafted.empty()) return;
  std::vector<CausalLm::DraftBlock> drafts = model_.dspark_draft(anchors, cache, rows);
  for (size_t s = 0; s < drafted.size(); ++s) pending_[drafted[s]] = {drafted[s]->num_tokens(), std::move(drafts[s])};
}

void DsparkDrafter::after_chained_step(const ScheduledBatch& batch) {
  DI_CHECK(in_flight_.empty(), "a chained draft started before the one in flight settled");
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const Sequence& seq = *batch.items[i].seq;
    if (seq.status != SequenceStatus::kRunning || seq.num_cached != seq.num_tokens() - 1) {
      pending_.erase(&seq);
      in_flight_.push_back(nullptr);
      continue;
    }
    pending_[&seq] = {seq.num_tokens(), {}, static_cast<int64_t>(i)};
    in_flight_.push_back(&seq);
  }
}

void DsparkDrafter::settle(std::vector<CausalLm::DraftBlock> blocks) {
  DI_CHECK(blocks.size() == in_flight_.size(), "a chained draft of {} blocks for {} sequences", blocks.size(),
           in_flight_.size());
  for (size_t s = 0; s < blocks.size(); ++s) {
    const Sequence* seq = in_flight_[s];
    const auto it = seq != nullptr ? pending_.find(seq) : pending_.end();
    if (it == pending_.end() || it->second.in_flight != static_cast<int64_t>(s)) continue;
    // The device's acceptance anchored the block; the host's put the sequence's next token at position - 1.
    DI_CHECK(blocks[s].position == it->second.position - 1, "sequence {}'s chained draft is anchored at position {}, "
             "but the verify step's tokens put its last token at {}", seq->idx, blocks[s].position,
             it->second.position - 1);
    it->second.block = std::move(blocks[s]);
    it->second.in_flight = -1;
  }
  in_flight_.clear();
}

int32_t DsparkDrafter::draft_row(const Sequence& seq, int64_t k) const {
  const auto it = pending_.find(&seq);
  if (it == pending_.end() || it->second.in_flight < 0 || it->second.position != seq.num_tokens()) return -1;
  return static_cast<int32_t>(k * static_cast<int64_t>(in_flight_.size()) + it->second.in_flight);
}

}  // namespace deepinfer
