#include "src/engine/dspark_drafter.h"

namespace deepinfer {

void DsparkDrafter::after_step(const ScheduledBatch& batch, const ForwardBatch&, KvCache& cache) {
  ForwardBatch anchors;
  std::vector<SamplingRow> rows;
  std::vector<const Sequence*> drafted;
  for (const ScheduledSequence& item : batch.items) {
    const Sequence& seq = *item.seq;
    if (!ready(seq)) {
      drop(seq);  // finished (its blocks are gone), preempted, or still prefilling
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
  std::vector<DraftBlock> drafts = module_.dspark_draft(anchors, cache, rows);
  for (size_t s = 0; s < drafted.size(); ++s) hold(*drafted[s], std::move(drafts[s]));
}

}  // namespace deepinfer
