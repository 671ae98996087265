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

SliceLayout RankSliceDispatcher::layout(int64_t layer, int64_t num_tokens) const {
  const int64_t H = hidden_, K = routing_.top_k(), S = placement_.slots_per_rank();
  const int num_ranks = static_cast<int>(placement_.ep_size());
  const int64_t record_bytes = (H + 2 * K) * static_cast<int64_t>(sizeof(float));
  SliceLayout out;
  out.pairs_of_slot.assign(S, 0);
  std::vector<int32_t> ids(K), owners(K), slots(K);
  std::vector<float> weights(K);
  for (int src = 0; src < num_ranks; ++src) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      routing_.route(steps_, layer, src * num_tokens + t, ids.data(), weights.data());
      placement_.place_entries(layer, ids.data(), K, src, t, owners.data(), slots.data());
      bool here = false;
      for (int64_t k = 0; k < K; ++k) {
        here |= owners[k] == rank_;
        if (owners[k] != rank_) slots[k] = -1;
        else ++out.pairs_of_slot[slots[k]];
      }
      if (src == rank_) {  // what this rank sends: one record per distinct other destination
        out.own_routed.insert(out.own_routed.end(), ids.begin(), ids.end());
        std::vector<int32_t> dests = owners;
        std::sort(dests.begin(), dests.end());
        dests.erase(std::unique(dests.begin(), dests.end()), dests.end());
        for (int32_t d : dests)
          if (d != rank_) ++out.exchange.tokens_sent, out.exchange.dispatch_bytes += record_bytes;
      }
      if (!here) continue;
      if (src == rank_) out.own_rows.emplace_back(t, out.rows());
      else out.exchange.combine_bytes += H * static_cast<int64_t>(sizeof(float));
      out.source_token.push_back(static_cast<int32_t>(t));  // a peer's token: its row stands in
      out.slots.insert(out.slots.end(), slots.begin(), slots.end());
      out.weights.insert(out.weights.end(), weights.begin(), weights.end());
    }
  }
  out.exchange.num_exchanges = 1;
  out.exchange.tokens_received = out.rows();
  return out;
}

SliceLayout RankSliceDispatcher::prefix(const SliceLayout& drawn, int64_t layer, int64_t num_tokens) const {
  const int64_t H = hidden_, K = routing_.top_k();
  const int64_t record_bytes = (H + 2 * K) * static_cast<int64_t>(sizeof(float));
  DI_CHECK(static_cast<int64_t>(drawn.own_routed.size()) >= num_tokens * K,
           "a layout of {} tokens cannot give the prefix of {}", drawn.own_routed.size() / K, num_tokens);
  SliceLayout out;
  out.pairs_of_slot.assign(drawn.pairs_of_slot.size(), 0);
  std::vector<int32_t> new_row(drawn.rows(), -1);
  for (int64_t r = 0; r < drawn.rows(); ++r) {
    if (drawn.source_token[r] >= num_tokens) continue;
    new_row[r] = static_cast<int32_t>(out.rows());
    out.source_token.push_back(drawn.source_token[r]);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t slot = drawn.slots[r * K + k];
      out.slots.push_back(slot);
      out.weights.push_back(drawn.weights[r * K + k]);
      if (slot >= 0) ++out.pairs_of_slot[slot];
    }
  }
  for (const auto& [token, row] : drawn.own_rows)
    if (token < num_tokens) out.own_rows.emplace_back(token, new_row[row]);
  out.own_routed.assign(drawn.own_routed.begin(), drawn.own_routed.begin() + num_tokens * K);
  std::vector<int32_t> owners(K), slots(K);
  for (int64_t t = 0; t < num_tokens; ++t) {  // what this rank sends: one record per distinct other destination
    placement_.place_entries(layer, out.own_routed.data() + t * K, K, rank_, t, owners.data(), slots.data());
    std::sort(owners.begin(), owners.end());
    owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
    for (int32_t d : owners)
      if (d != rank_) ++out.exchange.tokens_sent, out.exchange.dispatch_bytes += record_bytes;
    owners.resize(K);
  }
  out.exchange.combine_bytes =
      (out.rows() - static_cast<int64_t>(out.own_rows.size())) * H * static_cast<int64_t>(sizeof(float));
  out.exchange.num_exchanges = 1;
  out.exchange.tokens_received = out.rows();
  return out;
}

void RankSliceDispatcher::record(int64_t layer, const SliceLayout& layout) {
  const int64_t S = placement_.slots_per_rank();
  stats_ += layout.exchange;
  ++work_.num_exchanges;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t pairs = layout.pairs_of_slot[s];
    if (pairs == 0) continue;
    served_counts_[layer * placement_.num_experts() + placement_.logical_of_slot(layer, rank_ * S + s)] += pairs;
    ++work_.slots_touched;
    work_.pairs += pairs;
  }
}

HostDispatch RankSliceDispatcher::dispatch(int64_t moe_layer_idx, const float* x, const int32_t* /*topk_ids*/,
                                           const float* /*topk_weights*/, int64_t num_tokens) {
  const int64_t H = hidden_, S = placement_.slots_per_rank();
  last_ = layout(moe_layer_idx, num_tokens);
  record(moe_layer_idx, last_);
  const int64_t rows = last_.rows();
  recv_x_.resize(rows * H);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(x + last_.source_token[r] * H, x + (last_.source_token[r] + 1) * H, recv_x_.begin() + r * H);
  expert_of_slot_.resize(S);
  for (int64_t s = 0; s < S; ++s) expert_of_slot_[s] = placement_.logical_of_slot(moe_layer_idx, rank_ * S + s);
  partial_.assign(rows * H, 0.0f);
  return {recv_x_.data(), last_.slots.data(), last_.weights.data(), expert_of_slot_, rows, partial_.data()};
}

void RankSliceDispatcher::combine(float* out) {
  for (const auto& [token, row] : last_.own_rows)
    cpu::axpy(1.0f, partial_.data() + row * hidden_, out + token * hidden_, hidden_);
}

void RankSliceDispatcher::after_step(ExpertStore& /*experts*/) { ++steps_; }

void RankSliceDispatcher::fetch_split_rows(std::span<const int64_t> /*keys*/, std::span<const int32_t> /*owners*/,
                                           int64_t /*row_bytes*/, const ServeRows& /*serve*/, std::byte* /*out*/) {
  throw InputError("a rank slice holds whole engram tables: run it with --engram-split none");
}

}  // namespace deepinfer
