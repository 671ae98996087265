#include "src/engine/model_drafter.h"

#include <algorithm>

#include "src/core/check.h"

namespace deepinfer {

DraftProposal ModelDrafter::propose(const Sequence& seq, int64_t max_drafts) {
  DraftProposal proposal;
  const auto it = pending_.find(&seq);
  if (it == pending_.end() || it->second.position != seq.num_tokens()) return proposal;
  const Pending& pending = it->second;
  if (pending.in_flight >= 0) {
    const int64_t n = std::clamp<int64_t>(max_drafts, 0, block_size_);
    proposal.tokens.assign(n, 0);
    proposal.confidence.assign(n, 0.0);
    return proposal;
  }
  const auto n = std::clamp<int64_t>(max_drafts, 0, static_cast<int64_t>(pending.block.tokens.size()));
  proposal.tokens.assign(pending.block.tokens.begin(), pending.block.tokens.begin() + n);
  proposal.confidence.assign(pending.block.confidence.begin(), pending.block.confidence.begin() + n);
  return proposal;
}

SamplingRow ModelDrafter::sampling_row(const Sequence& seq) {
  const SamplingParams& p = seq.request->sampling;
  return {p.temperature, p.top_p, p.top_k, p.seed + kDraftSeedOffset, 0};
}

void ModelDrafter::hold(const Sequence& seq, DraftBlock block) {
  pending_[&seq] = {seq.num_tokens(), std::move(block), -1};
}

void ModelDrafter::after_chained_step(const ScheduledBatch& batch) {
  DI_CHECK(in_flight_.empty(), "a chained draft started before the one in flight settled");
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const Sequence& seq = *batch.items[i].seq;
    if (!ready(seq)) {  // finished (its blocks are gone) or preempted
      pending_.erase(&seq);
      in_flight_.push_back(nullptr);
      continue;
    }
    pending_[&seq] = {seq.num_tokens(), {}, static_cast<int64_t>(i)};
    in_flight_.push_back(&seq);
  }
}

void ModelDrafter::settle(std::vector<DraftBlock> blocks) {
  DI_CHECK(blocks.size() == in_flight_.size(), "a chained draft of {} blocks for {} sequences", blocks.size(),
           in_flight_.size());
  for (size_t s = 0; s < blocks.size(); ++s) {
    const Sequence* seq = in_flight_[s];
    const auto it = seq != nullptr ? pending_.find(seq) : pending_.end();
    if (it == pending_.end() || it->second.in_flight != static_cast<int64_t>(s)) continue;
    // The device's acceptance anchored the block; the host's put the sequence's last token at position - 1.
    DI_CHECK(blocks[s].position == it->second.position - 1, "sequence {}'s chained draft is anchored at position {}, "
             "but the verify step's tokens put its last token at {}", seq->idx, blocks[s].position,
             it->second.position - 1);
    it->second.block = std::move(blocks[s]);
    it->second.in_flight = -1;
  }
  in_flight_.clear();
}

int32_t ModelDrafter::draft_row(const Sequence& seq, int64_t k) const {
  const auto it = pending_.find(&seq);
  if (it == pending_.end() || it->second.in_flight < 0 || it->second.position != seq.num_tokens()) return -1;
  return static_cast<int32_t>(k * static_cast<int64_t>(in_flight_.size()) + it->second.in_flight);
}

}  // namespace deepinfer
