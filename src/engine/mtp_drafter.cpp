#include "src/engine/mtp_drafter.h"

#include "src/core/check.h"

namespace deepinfer {

void MtpDrafter::after_step(const ScheduledBatch& batch, const ForwardBatch& forward, KvCache& cache) {
  DI_CHECK(forward.sequences.size() == batch.items.size(), "the MTP drafter: {} sequences run for {} scheduled",
           forward.sequences.size(), batch.items.size());
  ForwardBatch mtp;
  std::vector<int64_t> hidden_rows;  // rows of the step the module reads
  std::vector<const Sequence*> drafted;
  int64_t offset = 0;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const Sequence& seq = *batch.items[i].seq;
    const SequenceChunk& ran = forward.sequences[i];
    if (seq.status == SequenceStatus::kFinished) {  // its blocks are gone, and it drafts no more
      drop(seq);
      offset += ran.num_new;
      continue;
    }
    // Rows [ran.num_cached, seq.num_cached) are cached now, and the token after each is known.
    const int64_t n = seq.num_cached - ran.num_cached;
    if (n > 0) {
      DI_CHECK(n <= ran.num_new && seq.num_tokens() > seq.num_cached, "sequence {}: {} rows cached of {} run",
               seq.idx, n, ran.num_new);
      mtp.token_ids.insert(mtp.token_ids.end(), seq.tokens.begin() + ran.num_cached + 1,
                           seq.tokens.begin() + seq.num_cached + 1);
      // (earlier_tokens: the tokens up to the rows' first position, the one before the first of token_ids)
      mtp.sequences.push_back({ran.num_cached, n, seq.block_table,
                               {seq.tokens.data(), static_cast<size_t>(ran.num_cached + 1)}});
      for (int64_t r = 0; r < n; ++r) hidden_rows.push_back(offset + r);
      drafted.push_back(&seq);
    }
    offset += ran.num_new;
  }
  if (mtp.sequences.empty()) return;
  const std::vector<MtpDraft> drafts = module_.mtp_draft(mtp, hidden_rows, cache);
  DI_CHECK(drafts.size() == drafted.size(), "{} MTP drafts for {} sequences", drafts.size(), drafted.size());
  for (size_t s = 0; s < drafted.size(); ++s)
    hold(*drafted[s], {{drafts[s].token}, {drafts[s].confidence}, drafted[s]->num_tokens() - 1});
}

}  // namespace deepinfer
