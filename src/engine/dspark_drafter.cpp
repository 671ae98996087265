#include "src/engine/dspark_drafter.h"

#include <algorithm>

namespace deepinfer {

DraftProposal DsparkDrafter::propose(const Sequence& seq, int64_t max_drafts) {
  DraftProposal proposal;
  const auto it = pending_.find(&seq);
  if (it == pending_.end() || it->second.position != seq.num_tokens()) return proposal;
  const auto n = std::min<int64_t>(max_drafts, static_cast<int64_t>(it->second.block.tokens.size()));
  proposal.tokens.assign(it->second.block.tokens.begin(), it->second.block.tokens.begin() + n);
  proposal.confidence.assign(it->second.block.confidence.begin(), it->second.block.confidence.begin() + n);
  return proposal;
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
    SequenceChunk anchor{seq.num_cached, 1, seq.block_table};
    anchor.swa_floor = seq.swa_floor;  // no window state below it
    anchors.sequences.push_back(anchor);
    const SamplingParams& p = seq.request->sampling;
    rows.push_back({p.temperature, p.top_p, p.top_k, p.seed + kDraftSeedOffset, 0});
    drafted.push_back(&seq);
  }
  if (drafted.empty()) return;
  std::vector<CausalLm::DraftBlock> drafts = model_.dspark_draft(anchors, cache, rows);
  for (size_t s = 0; s < drafted.size(); ++s) pending_[drafted[s]] = {drafted[s]->num_tokens(), std::move(drafts[s])};
}

}  // namespace deepinfer
