// One rank of an expert-parallel group, run alone (bench --rank-slice): the MoE work rank `rank` of a deployment
// does, with no other rank present. Routing is drawn (moe/synthetic_routing.h), so the slice knows every peer's
// pairs: as in a bench or sweep step of the real group, each of the group's ranks dispatches as many tokens as
// this one, token t of rank p being p * tokens + t. dispatch() hands the block the rows the real rank receives,
// in the order it receives them (by source rank, then token): its own tokens' pairs on its slots, and the pairs
// its peers' tokens send it, their rows copies of its own token rows (the work does not depend on the values).
// combine() adds back only the sums of its own tokens' pairs it served itself: what peers would return is not
// modelled, so the slice's outputs are not the real run's, its work is. Exchange statistics count what the real
// rank sends and receives, so a communication model can charge them.
// On the GPU (set_device_form: moe/device_rank_slice.h) the same layout is built on the host and its rows
// gathered on the device, so the step times the experts' work without a host round trip.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/model/expert_dispatch.h"
#include "src/moe/expert_placement.h"
#include "src/moe/synthetic_routing.h"

namespace deepinfer {

// What rank `rank` receives in one MoE layer at one step, in the order the all-to-all delivers it (by source rank,
// then token).
struct SliceLayout {
  std::vector<int32_t> source_token;  // [rows]: the own token whose row stands for each received row
  std::vector<int32_t> slots;         // [rows * top_k]: the slot on this rank (0..slots_per_rank), -1 elsewhere
  std::vector<float> weights;         // [rows * top_k]
  std::vector<std::pair<int64_t, int64_t>> own_rows;  // (own token, received row) for the own tokens served here
  std::vector<int32_t> own_routed;    // [own tokens * top_k]: the logical experts of the own tokens' pairs
  std::vector<int64_t> pairs_of_slot; // [slots_per_rank]: pairs each slot of this rank receives
  ExchangeStats exchange;             // this one exchange, as the real rank counts it
  int64_t rows() const { return static_cast<int64_t>(source_token.size()); }
};

// Per exchange, what the slice's experts computed: slots with at least one pair (their weights are read) and pairs.
struct SliceExpertWork {
  int64_t num_exchanges = 0, slots_touched = 0, pairs = 0;
};

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

  DeviceExpertDispatcher* device() override { return device_form_.get(); }
  // The GPU form (made by make_device_rank_slice, CUDA builds), used by the CUDA MoE block instead of dispatch().
  void set_device_form(std::unique_ptr<DeviceExpertDispatcher> form) { device_form_ = std::move(form); }

  // The layout of MoE layer `layer` at the current step for `num_tokens` own tokens, and its accounting (stats,
  // served counts, expert work) once it is used.
  SliceLayout layout(int64_t layer, int64_t num_tokens) const;
  void record(int64_t layer, const SliceLayout& layout);
  // The layout of the first `num_tokens` tokens of every rank, taken from `drawn` (a layout of this layer for as
  // many or more tokens a rank): the rows and pairs of those tokens, renumbered, and their exchange counted as
  // layout() counts it. Each token's routing is drawn independently, so this is a draw for num_tokens too; steps of
  // many different sizes (speculative decoding's verify steps) then share one draw per size bucket.
  SliceLayout prefix(const SliceLayout& drawn, int64_t layer, int64_t num_tokens) const;
  int64_t step() const { return steps_; }
  int rank() const { return rank_; }
  int64_t top_k() const { return routing_.top_k(); }

  const ExchangeStats& stats() const { return stats_; }
  const SliceExpertWork& expert_work() const { return work_; }
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
  SliceExpertWork work_;
  std::vector<int64_t> served_counts_;
  std::unique_ptr<DeviceExpertDispatcher> device_form_;
  // The last host dispatch: its layout, received rows, partial sums; this rank's slot -> expert.
  SliceLayout last_;
  std::vector<float> recv_x_, partial_;
  std::vector<int32_t> expert_of_slot_;
};

}  // namespace deepinfer
