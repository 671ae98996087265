// Expert parallelism with DeepEP's semantics, over any Communicator:
//   layout   each token's top-k logical experts -> slots (ExpertPlacement::pick_slot) -> owning EP ranks;
//   dispatch each token goes once to each distinct destination rank, with its top-k slot ids (-1 where the
//            slot is elsewhere) and weights; counts first, then the records, in one all-to-all each;
//   compute  each rank runs its local slots' experts over the tokens it received, summing the weighted
//            outputs per received token;
//   combine  the partial sums go back (one all-to-all) and are added at each token's source position.
// Ranks with no tokens still take part in every exchange.
#pragma once

#include <cstdint>
#include <vector>

#include "src/dist/communicator.h"
#include "src/model/expert_executor.h"
#include "src/moe/expert_placement.h"

namespace deepinfer {

struct ExchangeStats {
  int64_t num_exchanges = 0;      // MoE layer calls
  int64_t dispatch_bytes = 0;     // bytes this rank sent to other ranks in dispatch (records, not counts)
  int64_t combine_bytes = 0;      // bytes this rank sent to other ranks in combine
  int64_t tokens_sent = 0;        // token copies sent to other ranks
  int64_t tokens_received = 0;    // token copies received from any rank (itself included)
};

class ExpertParallelExecutor final : public ExpertExecutor {
 public:
  ExpertParallelExecutor(Communicator& ep_comm, const ExpertPlacement& placement);

  void run(const CausalLm& model, int64_t moe_layer_idx, const float* x, const int32_t* topk_ids,
           const float* topk_weights, int64_t num_tokens, float* out) override;

  const ExchangeStats& stats() const { return stats_; }

 private:
  Communicator& comm_;
  const ExpertPlacement& placement_;
  ExchangeStats stats_;
};

}  // namespace deepinfer
