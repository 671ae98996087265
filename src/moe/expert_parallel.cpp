#include "src/moe/expert_parallel.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>

#include "kernels/cpu/ops.h"

namespace deepinfer {

namespace {

// One dispatched token: its hidden row, then per top-k entry the local slot index on the destination
// (-1 when that entry is served elsewhere) and the combine weight. Packed as floats, slot ids bit-cast.
struct RecordLayout {
  int64_t hidden;
  int64_t top_k;
  int64_t floats() const { return hidden + 2 * top_k; }
};

}  // namespace

ExpertParallelDispatcher::ExpertParallelDispatcher(Communicator& ep_comm, ExpertPlacement placement, int64_t hidden,
                                                   int64_t top_k, EplbOptions eplb)
    : comm_(ep_comm), placement_(std::move(placement)), hidden_(hidden), top_k_(top_k), eplb_(eplb),
      window_counts_(placement_.num_layers() * placement_.num_experts(), 0),
      served_counts_(window_counts_.size(), 0) {
  DI_CHECK(placement_.ep_size() == ep_comm.size(), "placement for {} EP ranks on a group of {}", placement_.ep_size(),
           ep_comm.size());
}

double rank_imbalance(const ExpertPlacement& placement, int64_t layer, const std::vector<double>& expert_load) {
  std::vector<double> load(placement.ep_size(), 0.0);
  for (int64_t s = 0; s < placement.num_physical(); ++s) {
    const int32_t e = placement.logical_of_slot(layer, s);
    load[placement.owner_of_slot(s)] += expert_load[e] / static_cast<double>(placement.replicas(layer, e).size());
  }
  double sum = 0.0, max = 0.0;
  for (double l : load) sum += l, max = std::max(max, l);
  return sum > 0.0 ? max / (sum / static_cast<double>(load.size())) : 1.0;
}

ExchangeStats ExpertParallelDispatcher::stats() const {
  ExchangeStats total = stats_;
  if (device_) total += device_->stats();
  return total;
}

void ExpertParallelDispatcher::attach_device(std::unique_ptr<DeviceExpertDispatcher> device) {
  device_ = std::move(device);
  if (device_) device_->set_placement(placement_.phy2log(), placement_.slots_per_rank());
  if (device_) device_->set_pair_outputs(pair_outputs_);
}

void ExpertParallelDispatcher::set_pair_outputs(bool on) {
  pair_outputs_ = on;
  if (device_) device_->set_pair_outputs(on);
}

void ExpertParallelDispatcher::after_step(ExpertStore& experts) {
  ++steps_;
  if (eplb_.interval_steps > 0 && steps_ % eplb_.interval_steps == 0) rebalance(experts);
}

void ExpertParallelDispatcher::rebalance(ExpertStore& experts) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t L = placement_.num_layers(), E = placement_.num_experts();
  const int me = comm_.rank(), num_ranks = comm_.size();
  if (device_) device_->drain_routed_counts(window_counts_);
  std::vector<int64_t> counts = window_counts_;
  comm_.all_reduce_sum(counts.data(), static_cast<int64_t>(counts.size()), DType::kI64, "eplb: expert loads");
  std::vector<std::vector<double>> load(L, std::vector<double>(E));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e) load[l][e] = static_cast<double>(counts[l * E + e]);
  // Every rank computes the same plan from the same sums.
  const int64_t groups = E % eplb_.num_groups == 0 ? eplb_.num_groups : 1;
  const EplbPlan plan = rebalance_experts(load, placement_.num_physical(), groups, eplb_.num_nodes, num_ranks);
  ExpertPlacement next = ExpertPlacement::from_phy2log(plan.phy2log, E, num_ranks);

  // Which experts each rank newly needs, and who sends them (the lowest rank holding one now).
  const int64_t floats = experts.expert_floats();
  std::vector<std::vector<float>> outgoing(num_ranks);
  std::vector<int64_t> send_counts(num_ranks, 0), recv_counts(num_ranks, 0);
  std::vector<std::tuple<int64_t, int64_t, int>> incoming;  // (layer, expert, source), in receive order per source
  for (int64_t l = 0; l < L; ++l) {
    for (int r = 0; r < num_ranks; ++r) {
      for (int64_t e = 0; e < E; ++e) {
        if (!next.rank_holds(r, l, e) || placement_.rank_holds(r, l, e)) continue;
        int source = 0;
        while (!placement_.rank_holds(source, l, e)) ++source;
        if (source == me) {
          const std::vector<float> w = experts.export_weights(l, e);
          outgoing[r].insert(outgoing[r].end(), w.begin(), w.end());
          send_counts[r] += floats;
        }
        if (r == me) {
          incoming.emplace_back(l, e, source);
          recv_counts[source] += floats;
        }
      }
    }
  }
  std::vector<float> send, recv;
  for (const auto& chunk : outgoing) send.insert(send.end(), chunk.begin(), chunk.end());
  int64_t recv_total = 0;
  std::vector<int64_t> recv_offset(num_ranks, 0);
  for (int r = 0; r < num_ranks; ++r) recv_offset[r] = recv_total, recv_total += recv_counts[r];
  recv.resize(recv_total);
  comm_.all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, DType::kF32, "eplb: expert weights");
  // Drops first (what leaves was exported above): a store sized by the rank's slots has room for what comes.
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e)
      if (placement_.rank_holds(me, l, e) && !next.rank_holds(me, l, e)) experts.drop(l, e);
  for (const auto& [l, e, source] : incoming) {
    experts.import_weights(l, e, std::span<const float>(recv.data() + recv_offset[source], floats));
    recv_offset[source] += floats;
  }

  RebalanceReport report;
  report.step = steps_;
  for (int64_t l = 0; l < L; ++l) {
    report.imbalance_before.push_back(rank_imbalance(placement_, l, load[l]));
    report.imbalance_after.push_back(rank_imbalance(next, l, load[l]));
  }
  report.experts_moved = static_cast<int64_t>(incoming.size());
  for (int r = 0; r < num_ranks; ++r)
    if (r != me) report.bytes_moved += send_counts[r] * static_cast<int64_t>(sizeof(float));
  placement_ = std::move(next);
  if (device_) device_->set_placement(placement_.phy2log(), placement_.slots_per_rank());
  std::fill(window_counts_.begin(), window_counts_.end(), 0);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string layers;
  for (int64_t l = 0; l < L; ++l)
    layers += fmt::format("{}{:.2f}->{:.2f}", l ? ", " : "", report.imbalance_before[l], report.imbalance_after[l]);
  if (me == 0)
    spdlog::info("EPLB at step {}: max/mean load over {} EP ranks per MoE layer {}; this rank received {} experts, "
                 "sent {:.2f} MB, {:.1f} ms", report.step, num_ranks, layers, report.experts_moved,
                 report.bytes_moved / 1e6, report.seconds * 1e3);
  rebalances_.push_back(std::move(report));
}

HostDispatch ExpertParallelDispatcher::dispatch(int64_t moe_layer_idx, const float* x, const int32_t* topk_ids,
                                               const float* topk_weights, int64_t num_tokens) {
  const int num_ranks = comm_.size();
  const int me = comm_.rank();
  const RecordLayout rec{hidden_, top_k_};
  const int64_t H = rec.hidden;
  const int64_t K = rec.top_k;
  const int64_t S = placement_.slots_per_rank();
  if (routing_) {  // the drawn routing replaces the router's
    drawn_ids_.resize(num_tokens * K);
    drawn_weights_.resize(num_tokens * K);
    for (int64_t t = 0; t < num_tokens; ++t)
      routing_->route(steps_, moe_layer_idx, me * num_tokens + t, drawn_ids_.data() + t * K, drawn_weights_.data() + t * K);
    topk_ids = drawn_ids_.data();
    topk_weights = drawn_weights_.data();
  }

  // Layout: the destination rank and local slot of every (token, k).
  std::vector<int32_t> dest(num_tokens * K), local_slot(num_tokens * K);
  send_counts_.assign(num_ranks, 0);
  std::vector<int64_t>& token_dests = token_dests_;
  token_dests.clear();
  token_dest_begin_.assign(num_tokens + 1, 0);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t k = 0; k < K; ++k) ++window_counts_[moe_layer_idx * placement_.num_experts() + topk_ids[t * K + k]];
    placement_.place_entries(moe_layer_idx, topk_ids + t * K, K, me, t, dest.data() + t * K, local_slot.data() + t * K);
    std::vector<int32_t> mine(dest.begin() + t * K, dest.begin() + (t + 1) * K);
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    for (int32_t d : mine) {
      token_dests.push_back(d);
      ++send_counts_[d];
    }
    token_dest_begin_[t + 1] = static_cast<int64_t>(token_dests.size());
  }

  // Dispatch: records grouped by destination, tokens ascending within each group.
  std::vector<int64_t> offset(num_ranks + 1, 0);
  for (int r = 0; r < num_ranks; ++r) offset[r + 1] = offset[r] + send_counts_[r];
  std::vector<float> send_records(offset[num_ranks] * rec.floats());
  std::vector<int64_t> cursor(offset.begin(), offset.end() - 1);
  record_of_.assign(token_dests.size(), 0);  // send position of each (token, destination)
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = token_dest_begin_[t]; i < token_dest_begin_[t + 1]; ++i) {
      const int64_t d = token_dests[i];
      const int64_t r = cursor[d]++;
      record_of_[i] = r;
      float* record = send_records.data() + r * rec.floats();
      std::copy_n(x + t * H, H, record);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t slot = dest[t * K + k] == d ? local_slot[t * K + k] : -1;
        std::memcpy(record + H + k, &slot, sizeof(slot));
        record[H + K + k] = topk_weights[t * K + k];
      }
    }
  }
  recv_counts_.assign(num_ranks, 0);
  comm_.all_to_all_v(send_counts_.data(), std::vector<int64_t>(num_ranks, 1), recv_counts_.data(),
                     std::vector<int64_t>(num_ranks, 1), DType::kI64, "moe dispatch counts");
  int64_t num_received = 0;
  for (int64_t c : recv_counts_) num_received += c;
  std::vector<float> recv_records(num_received * rec.floats());
  std::vector<int64_t> send_floats(num_ranks), recv_floats(num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    send_floats[r] = send_counts_[r] * rec.floats();
    recv_floats[r] = recv_counts_[r] * rec.floats();
  }
  comm_.all_to_all_v(send_records.data(), send_floats, recv_records.data(), recv_floats, DType::kF32,
                     "moe dispatch tokens");

  // The received records as rows for the block: ids are this rank's local slots (-1: served elsewhere).
  recv_x_.resize(num_received * H);
  recv_ids_.resize(num_received * K);
  recv_weights_.resize(num_received * K);
  for (int64_t r = 0; r < num_received; ++r) {
    const float* record = recv_records.data() + r * rec.floats();
    std::copy_n(record, H, recv_x_.data() + r * H);
    std::memcpy(recv_ids_.data() + r * K, record + H, K * sizeof(int32_t));
    std::copy_n(record + H + K, K, recv_weights_.data() + r * K);
  }
  expert_of_slot_.resize(S);
  for (int64_t s = 0; s < S; ++s) expert_of_slot_[s] = placement_.logical_of_slot(moe_layer_idx, me * S + s);
  partial_.assign(num_received * (pair_outputs_ ? K : 1) * H, 0.0f);
  if (pair_outputs_) {
    entry_dest_ = dest;
    entry_weight_.assign(topk_weights, topk_weights + num_tokens * K);
  }
  for (int64_t i = 0; i < num_received * K; ++i)
    if (recv_ids_[i] >= 0) ++served_counts_[moe_layer_idx * placement_.num_experts() + expert_of_slot_[recv_ids_[i]]];

  ++stats_.num_exchanges;
  for (int r = 0; r < num_ranks; ++r) {
    if (r == me) continue;
    stats_.dispatch_bytes += send_counts_[r] * rec.floats() * static_cast<int64_t>(sizeof(float));
    stats_.combine_bytes += recv_counts_[r] * (pair_outputs_ ? K : 1) * H * static_cast<int64_t>(sizeof(float));
    stats_.tokens_sent += send_counts_[r];
  }
  stats_.tokens_received += num_received;
  return {recv_x_.data(), recv_ids_.data(), recv_weights_.data(), expert_of_slot_, num_received, partial_.data()};
}

void ExpertParallelDispatcher::combine(float* out) {
  if (pair_outputs_) {  // each entry's output, weighted and added in k order
    const int64_t H = hidden_, K = top_k_, num_tokens = static_cast<int64_t>(token_dest_begin_.size()) - 1;
    std::vector<float> pairs(num_tokens * K * H);
    combine_pairs(pairs.data());
    for (int64_t i = 0; i < num_tokens * K; ++i) cpu::axpy(entry_weight_[i], pairs.data() + i * H, out + i / K * H, H);
    return;
  }
  // Partial sums return in the order they came; each adds into its token's output, destinations ascending.
  const int64_t H = hidden_;
  const auto num_tokens = static_cast<int64_t>(token_dest_begin_.size()) - 1;
  const std::vector<float> returned = send_back(H, "moe combine");
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t i = token_dest_begin_[t]; i < token_dest_begin_[t + 1]; ++i)
      cpu::axpy(1.0f, returned.data() + record_of_[i] * H, out + t * H, H);
}

std::vector<float> ExpertParallelDispatcher::send_back(int64_t floats_per_record, const char* what) {
  const int num_ranks = comm_.size();
  int64_t num_sent = 0;
  std::vector<int64_t> back_send(num_ranks), back_recv(num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    back_send[r] = recv_counts_[r] * floats_per_record;
    back_recv[r] = send_counts_[r] * floats_per_record;
    num_sent += send_counts_[r];
  }
  std::vector<float> returned(num_sent * floats_per_record);
  comm_.all_to_all_v(partial_.data(), back_send, returned.data(), back_recv, DType::kF32, what);
  return returned;
}

void ExpertParallelDispatcher::combine_pairs(float* pairs) {
  DI_CHECK(pair_outputs_, "combine_pairs without pair outputs on");
  // Each record comes back as its K entries' rows; entry k of token t is taken from the record its destination got.
  const int64_t row = top_k_ * hidden_, H = hidden_, K = top_k_;
  const auto num_tokens = static_cast<int64_t>(token_dest_begin_.size()) - 1;
  const std::vector<float> returned = send_back(row, "moe combine (pairs)");
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t i = token_dest_begin_[t]; i < token_dest_begin_[t + 1]; ++i)
      for (int64_t k = 0; k < K; ++k)
        if (entry_dest_[t * K + k] == token_dests_[i])
          std::copy_n(returned.data() + record_of_[i] * row + k * H, H, pairs + (t * K + k) * H);
}

void ExpertParallelDispatcher::fetch_split_rows(std::span<const int64_t> keys, std::span<const int32_t> owners,
                                                int64_t row_bytes, const ServeRows& serve, std::byte* out) {
  deepinfer::fetch_split_rows(comm_, keys, owners, row_bytes, serve, out, "engram rows");
}

}  // namespace deepinfer
