// One rank of an expert-parallel group, run alone (bench --rank-slice): the MoE work rank `rank` of a deployment
// does, with no other rank present. Routing is drawn (moe/synthetic_routing.h), so the slice knows every peer's
// pairs: as in a bench or sweep step of the real group, each of the group's ranks dispatches as many tokens as
// this one, token t of rank p being p * tokens + t. dispatch() hands the block the rows the real rank receives,
// in the order it receives them (by source rank, then token): its own tokens' pairs on its slots, and the pairs
// its peers' tokens send it, their rows copies of its own token rows (the work does not depend on the values).
// combine() adds back only the sums of its own tokens' pairs it served itself: what peers would return is not
// modelled, so the slice's outputs are not the real run's, its work is. Exchange statistics count what the real
// rank sends and receives, so a communication model can charge them.
#pragma once

#include <cstdint>
#include <vector>

#include "src/model/expert_dispatch.h"
#include "src/moe/expert_placement.h"
#include "src/moe/synthetic_routing.h"

namespace deepinfer {

class RankSliceDispatcher final : public ExpertDispatcher {
 public:
  RankSliceDispatcher(ExpertPlacement placement, int rank, int64_t hidden, SyntheticRouting routing);

  HostDispatch dispatch(int64_t moe_layer_idx, const float* x, const int32_t* topk_ids, const float* topk_weights,
                        int64_t num_tokens) override;
  void combine(float* out) override;
  void after_step(ExpertStore& experts) override;
  // The slice holds whole tables (there are no peers to fetch from): refused for split ones.
  void fetch_split_rows(std::span<const int64_t> keys, std::span<const int32_t> owners, int64_t row_bytes,
                        const ServeRows& serve, std::byte* out) override;

  const ExchangeStats& stats() const { return stats_; }
  // [moe layer][logical expert]: pairs this rank's slots received, as ExpertParallelDispatcher::served_counts.
  const std::vector<int64_t>& served_counts() const { return served_counts_; }
  const ExpertPlacement& placement() const { return placement_; }

 private:
  ExpertPlacement placement_;
  int rank_;
  int64_t hidden_;
  SyntheticRouting routing_;
  int64_t steps_ = 0;
  ExchangeStats stats_;
  std::vector<int64_t> served_counts_;
  // The last dispatch: received rows, their slot ids (-1 elsewhere), weights, partial sums; this rank's slot ->
  // expert; and for each own token served here, (token, received row).
  std::vector<float> recv_x_, recv_weights_, partial_;
  std::vector<int32_t> recv_ids_, expert_of_slot_;
  std::vector<std::pair<int64_t, int64_t>> own_rows_;
};

}  // namespace deepinfer
