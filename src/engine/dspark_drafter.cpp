#include "src/engine/dspark_drafter.h"

#include <algorithm>

#include "src/core/check.h"
#include "src/core/log.h"

namespace deepinfer {

DsparkDrafter::~DsparkDrafter() {
  // A draft left on the device (an engine dropped mid-generation) is waited for, so that the model's next call
  // does not find it unfinished.
  try {
    finish_drafts();
  } catch (const std::exception& e) {
    spdlog::error("a DSpark draft failed: {}", e.what());
  }
}

DraftProposal DsparkDrafter::propose(const Sequence& seq, int64_t max_drafts) {
  DI_CHECK(!started_, "DSpark drafts proposed before the started ones were finished");
  DraftProposal proposal;
  const auto it = pending_.find(&seq);
  if (it == pending_.end() || it->second.position != seq.num_tokens()) return proposal;
  const auto n = std::min<int64_t>(max_drafts, static_cast<int64_t>(it->second.block.tokens.size()));
  proposal.tokens.assign(it->second.block.tokens.begin(), it->second.block.tokens.begin() + n);
  proposal.confidence.assign(it->second.block.confidence.begin(), it->second.block.confidence.begin() + n);
  return proposal;
}

void DsparkDrafter::after_step(const ScheduledBatch& batch, KvCache& cache) {
  finish_drafts();
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
  started_ = model_.start_dspark_draft(anchors, cache, rows);
  for (const Sequence* seq : drafted) started_for_.emplace_back(seq, seq->num_tokens());
}

void DsparkDrafter::finish_drafts() {
  if (!started_) return;
  std::vector<CausalLm::DraftBlock> drafts = std::exchange(started_, nullptr)();
  DI_CHECK(drafts.size() == started_for_.size(), "{} DSpark blocks for {} sequences", drafts.size(),
           started_for_.size());
  for (size_t s = 0; s < drafts.size(); ++s)
    pending_[started_for_[s].first] = {started_for_[s].second, std::move(drafts[s])};
  started_for_.clear();
}

}  // namespace deepinfer
