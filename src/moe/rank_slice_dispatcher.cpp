#include "src/moe/rank_slice_dispatcher.h"

#include <algorithm>

#include "kernels/cpu/ops.h"
#include "src/core/check.h"

namespace deepinfer {

RankSliceDispatcher::RankSliceDispatcher(ExpertPlacement placement, int rank, int64_t hidden, SyntheticRouting routing)
    : placement_(std::move(placement)), rank_(rank), hidden_(hidden), routing_(std::move(routing)),
      served_counts_(placement_.num_layers() * placement_.num_experts(), 0) {
  DI_CHECK(rank >= 0 && rank < placement_.ep_size(), "slice rank {} of an EP group of {}", rank, placement_.ep_size());
}

HostDispatch RankSliceDispatcher::dispatch(int64_t moe_layer_idx, const float* x, const int32_t* /*topk_ids*/,
                                           const float* /*topk_weights*/, int64_t num_tokens) {
  const int64_t H = hidden_, K = routing_.top_k(), S = placement_.slots_per_rank();
  const int num_ranks = static_cast<int>(placement_.ep_size());
  const int64_t record_bytes = (H + 2 * K) * static_cast<int64_t>(sizeof(float));
  recv_x_.clear(), recv_ids_.clear(), recv_weights_.clear(), own_rows_.clear();
  std::vector<int32_t> ids(K), owners(K), slots(K);
  std::vector<float> weights(K);
  // Received records arrive grouped by source rank, tokens ascending within each (as the all-to-all delivers).
  for (int src = 0; src < num_ranks; ++src) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      routing_.route(steps_, moe_layer_idx, src * num_tokens + t, ids.data(), weights.data());
      placement_.place_entries(moe_layer_idx, ids.data(), K, src, t, owners.data(), slots.data());
      bool here = false;
      for (int64_t k = 0; k < K; ++k) {
        here |= owners[k] == rank_;
        if (owners[k] != rank_) slots[k] = -1;
      }
      if (src == rank_) {  // what this rank sends: one record per distinct other destination
        std::vector<int32_t> dests = owners;
        std::sort(dests.begin(), dests.end());
        dests.erase(std::unique(dests.begin(), dests.end()), dests.end());
        for (int32_t d : dests)
          if (d != rank_) ++stats_.tokens_sent, stats_.dispatch_bytes += record_bytes;
      }
      if (!here) continue;
      const int64_t row = static_cast<int64_t>(recv_ids_.size()) / K;
      if (src == rank_) own_rows_.emplace_back(t, row);
      else stats_.combine_bytes += H * static_cast<int64_t>(sizeof(float));
      recv_x_.insert(recv_x_.end(), x + t * H, x + (t + 1) * H);  // a peer's token: its row stands in
      recv_ids_.insert(recv_ids_.end(), slots.begin(), slots.end());
      recv_weights_.insert(recv_weights_.end(), weights.begin(), weights.end());
    }
  }
  const int64_t num_received = static_cast<int64_t>(recv_ids_.size()) / K;
  expert_of_slot_.resize(S);
  for (int64_t s = 0; s < S; ++s) expert_of_slot_[s] = placement_.logical_of_slot(moe_layer_idx, rank_ * S + s);
  for (int32_t id : recv_ids_)
    if (id >= 0) ++served_counts_[moe_layer_idx * placement_.num_experts() + expert_of_slot_[id]];
  partial_.assign(num_received * H, 0.0f);
  ++stats_.num_exchanges;
  stats_.tokens_received += num_received;
  return {recv_x_.data(), recv_ids_.data(), recv_weights_.data(), expert_of_slot_, num_received, partial_.data()};
}

void RankSliceDispatcher::combine(float* out) {
  for (const auto& [token, row] : own_rows_) cpu::axpy(1.0f, partial_.data() + row * hidden_, out + token * hidden_, hidden_);
}

void RankSliceDispatcher::after_step(ExpertStore& /*experts*/) { ++steps_; }

void RankSliceDispatcher::fetch_split_rows(std::span<const int64_t> /*keys*/, std::span<const int32_t> /*owners*/,
                                           int64_t /*row_bytes*/, const ServeRows& /*serve*/, std::byte* /*out*/) {
  throw InputError("a rank slice holds whole engram tables: run it with --engram-split none");
}

}  // namespace deepinfer
