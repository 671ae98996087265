#include "src/engine/mtp_drafter.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"

namespace deepinfer {

DraftProposal MtpDrafter::propose(const Sequence& seq, int64_t max_drafts) {
  DraftProposal proposal;
  const auto it = pending_.find(&seq);
  if (max_drafts < 1 || it == pending_.end() || it->second.position != seq.num_tokens()) return proposal;
  proposal.tokens.push_back(it->second.token);
  proposal.confidence.push_back(it->second.confidence);
  return proposal;
}

void MtpDrafter::after_step(const ScheduledBatch& batch, const ForwardBatch& forward, const Tensor& hidden,
                            KvCache& cache) {
  const int64_t H = model_.config().hidden_size;
  DI_CHECK(hidden.size(0) == forward.num_tokens() && forward.sequences.size() == batch.items.size(),
           "the MTP drafter needs every row's hidden state of the step ({} rows, {} given)", forward.num_tokens(),
           hidden.size(0));
  ForwardBatch mtp;
  std::vector<float> rows;
  std::vector<const Sequence*> drafted;
  int64_t offset = 0;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const Sequence& seq = *batch.items[i].seq;
    const SequenceChunk& ran = forward.sequences[i];
    if (seq.status == SequenceStatus::kFinished) {  // its blocks are gone, and it drafts no more
      pending_.erase(&seq);
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
      mtp.sequences.push_back({ran.num_cached, n, seq.block_table});
      rows.insert(rows.end(), hidden.data<float>() + offset * H, hidden.data<float>() + (offset + n) * H);
      drafted.push_back(&seq);
    }
    offset += ran.num_new;
  }
  if (mtp.sequences.empty()) return;
  const Tensor logits = model_.mtp_forward(mtp, rows.data(), cache);
  const int64_t vocab = logits.size(1);
  for (size_t s = 0; s < drafted.size(); ++s) {
    const float* row = logits.data<float>() + static_cast<int64_t>(s) * vocab;
    const int64_t best = std::max_element(row, row + vocab) - row;  // ties to the lowest index
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - row[best]);
    pending_[drafted[s]] = {drafted[s]->num_tokens(), static_cast<int32_t>(best), 1.0 / sum};
  }
}

}  // namespace deepinfer
