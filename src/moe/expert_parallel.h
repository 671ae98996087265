// Expert parallelism with DeepEP's semantics, over any Communicator:
//   layout   each token's top-k logical experts -> slots (ExpertPlacement::pick_slot) -> owning EP ranks;
//   dispatch each token goes once to each distinct destination rank, with its top-k slot ids (-1 where the
//            slot is elsewhere) and weights; counts first, then the records, in one all-to-all each;
//   compute  (the MoE block, between the two calls) each rank runs its local slots' experts over the tokens
//            it received, summing the weighted outputs per received token;
//   combine  the partial sums go back (one all-to-all) and are added at each token's source position.
// Ranks with no tokens still take part in every exchange.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "src/comm/communicator.h"
#include "src/model/expert_dispatch.h"
#include "src/model/expert_store.h"
#include "src/moe/eplb.h"
#include "src/moe/expert_placement.h"
#include "src/moe/synthetic_routing.h"

namespace deepinfer {


// Online EPLB: every `interval_steps` steps the group sums its routed-token counts per (layer, expert) over
// the steps since the last rebalance, every rank computes the same plan (rebalance_experts), the experts whose
// slots move are sent point-to-point in one all-to-all, and the new placement takes effect at that step
// boundary on every rank.
struct EplbOptions {
  int64_t interval_steps = 0;  // 0: never rebalance
  int64_t num_groups = 1;      // expert groups for the hierarchical policy (n_group when it fits)
  int64_t num_nodes = 1;
};

struct RebalanceReport {
  int64_t step = 0;
  std::vector<double> imbalance_before;  // per MoE layer: max/mean tokens over EP ranks, old placement
  std::vector<double> imbalance_after;   // same loads under the new placement
  int64_t experts_moved = 0;             // received by this rank
  int64_t bytes_moved = 0;               // sent by this rank
  double seconds = 0.0;
};

class ExpertParallelDispatcher final : public ExpertDispatcher {
 public:
  // hidden and top_k: the rows' width and the entries routed per token.
  ExpertParallelDispatcher(Communicator& ep_comm, ExpertPlacement placement, int64_t hidden, int64_t top_k,
                           EplbOptions eplb = {});

  HostDispatch dispatch(int64_t moe_layer_idx, const float* x, const int32_t* topk_ids, const float* topk_weights,
                        int64_t num_tokens) override;
  void combine(float* out) override;
  void combine_pairs(float* pairs) override;
  bool pair_outputs() const override { return pair_outputs_; }
  // --batch-invariant on the GPU: the block returns each entry's own output (HostDispatch::y [rows, top_k, hidden])
  // and the source sums them in k order (combine_pairs), so a token's bits do not depend on the EP layout; the
  // device path too. combine() then adds the weighted entries in k order on the host.
  void set_pair_outputs(bool on);
  void after_step(ExpertStore& experts) override;
  DeviceExpertDispatcher* device() override { return device_.get(); }
  void fetch_split_rows(std::span<const int64_t> keys, std::span<const int32_t> owners, int64_t row_bytes,
                        const ServeRows& serve, std::byte* out) override;
  // From now on the model exchanges through `device` (GPU to GPU); placement changes reach it too.
  void attach_device(std::unique_ptr<DeviceExpertDispatcher> device);

  // Host exchanges plus those of the device path.
  ExchangeStats stats() const;
  const ExpertPlacement& placement() const { return placement_; }
  const std::vector<RebalanceReport>& rebalances() const { return rebalances_; }
  // Rebalances now (collective over the group), from the loads counted since the last rebalance.
  void rebalance(ExpertStore& experts);
  // From now on every dispatch routes by `routing` instead of the router's choice (host exchanges only; bench
  // and sweep, where every rank dispatches as many tokens a step, token t of rank r being r * tokens + t).
  void set_synthetic_routing(SyntheticRouting routing) { routing_.emplace(std::move(routing)); }
  // [moe layer][logical expert]: the (token, expert) pairs this rank's slots received, since construction, in the
  // host exchange (the NCCL device path does not count them yet).
  const std::vector<int64_t>& served_counts() const { return served_counts_; }

 private:
  Communicator& comm_;
  ExpertPlacement placement_;
  int64_t hidden_, top_k_;
  EplbOptions eplb_;
  ExchangeStats stats_;
  int64_t steps_ = 0;
  std::vector<int64_t> window_counts_;  // [moe layer][logical expert]: tokens this rank routed there
  std::vector<int64_t> served_counts_;  // [moe layer][logical expert]: pairs this rank's slots received
  std::optional<SyntheticRouting> routing_;
  std::vector<int32_t> drawn_ids_;
  std::vector<float> drawn_weights_;
  std::vector<RebalanceReport> rebalances_;
  std::unique_ptr<DeviceExpertDispatcher> device_;
  // The combine's exchange: every received record's floats_per_record partial values back to its source, in the
  // order the source sent them.
  std::vector<float> send_back(int64_t floats_per_record, const char* what);
  // The last dispatch, kept for its combine: per-rank record counts, each token's distinct destinations (ascending)
  // and each (token, destination)'s send position (CSR over tokens), the received rows unpacked, their partial sums,
  // this rank's slot -> expert.
  std::vector<int64_t> send_counts_, recv_counts_, token_dest_begin_, token_dests_, record_of_;
  std::vector<float> recv_x_, recv_weights_, partial_;
  // Pair outputs: each (token, k)'s destination and weight, from the last dispatch.
  bool pair_outputs_ = false;
  std::vector<int32_t> entry_dest_;
  std::vector<float> entry_weight_;
  std::vector<int32_t> recv_ids_, expert_of_slot_;
};

// max/mean over EP ranks of the tokens each rank serves for one layer, under `placement` (an expert's tokens
// split evenly over its replicas).
double rank_imbalance(const ExpertPlacement& placement, int64_t layer, const std::vector<double>& expert_load);

}  // namespace deepinfer
