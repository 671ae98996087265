#include "src/moe/expert_parallel.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "src/model/causal_lm.h"

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

ExpertParallelExecutor::ExpertParallelExecutor(Communicator& ep_comm, const ExpertPlacement& placement)
    : comm_(ep_comm), placement_(placement) {
  DI_CHECK(placement.ep_size() == ep_comm.size(), "placement for {} EP ranks on a group of {}", placement.ep_size(),
           ep_comm.size());
}

void ExpertParallelExecutor::run(const CausalLm& model, int64_t moe_layer_idx, const float* x,
                                 const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, float* out) {
  const int num_ranks = comm_.size();
  const int me = comm_.rank();
  const RecordLayout rec{model.config().hidden_size, model.config().num_experts_per_tok};
  const int64_t H = rec.hidden;
  const int64_t K = rec.top_k;
  const int64_t S = placement_.slots_per_rank();

  // Layout: the destination rank and local slot of every (token, k).
  std::vector<int32_t> dest(num_tokens * K), local_slot(num_tokens * K);
  std::vector<int64_t> send_counts(num_ranks, 0);
  std::vector<int64_t> token_dests;  // per token, its distinct destinations in ascending order, flattened
  std::vector<int64_t> token_dest_begin(num_tokens + 1, 0);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t slot = placement_.pick_slot(moe_layer_idx, topk_ids[t * K + k], me, t);
      dest[t * K + k] = placement_.owner_of_slot(slot);
      local_slot[t * K + k] = static_cast<int32_t>(slot % S);
    }
    std::vector<int32_t> mine(dest.begin() + t * K, dest.begin() + (t + 1) * K);
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    for (int32_t d : mine) {
      token_dests.push_back(d);
      ++send_counts[d];
    }
    token_dest_begin[t + 1] = static_cast<int64_t>(token_dests.size());
  }

  // Dispatch: records grouped by destination, tokens ascending within each group.
  std::vector<int64_t> offset(num_ranks + 1, 0);
  for (int r = 0; r < num_ranks; ++r) offset[r + 1] = offset[r] + send_counts[r];
  std::vector<float> send_records(offset[num_ranks] * rec.floats());
  std::vector<int64_t> cursor(offset.begin(), offset.end() - 1);
  std::vector<int64_t> record_of(token_dests.size());  // send position of each (token, destination)
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = token_dest_begin[t]; i < token_dest_begin[t + 1]; ++i) {
      const int64_t d = token_dests[i];
      const int64_t r = cursor[d]++;
      record_of[i] = r;
      float* record = send_records.data() + r * rec.floats();
      std::copy_n(x + t * H, H, record);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t slot = dest[t * K + k] == d ? local_slot[t * K + k] : -1;
        std::memcpy(record + H + k, &slot, sizeof(slot));
        record[H + K + k] = topk_weights[t * K + k];
      }
    }
  }
  std::vector<int64_t> recv_counts(num_ranks, 0);
  comm_.all_to_all_v(send_counts.data(), std::vector<int64_t>(num_ranks, 1), recv_counts.data(),
                     std::vector<int64_t>(num_ranks, 1), DType::kI64, "moe dispatch counts");
  int64_t num_received = 0;
  for (int64_t c : recv_counts) num_received += c;
  std::vector<float> recv_records(num_received * rec.floats());
  std::vector<int64_t> send_floats(num_ranks), recv_floats(num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    send_floats[r] = send_counts[r] * rec.floats();
    recv_floats[r] = recv_counts[r] * rec.floats();
  }
  comm_.all_to_all_v(send_records.data(), send_floats, recv_records.data(), recv_floats, DType::kF32,
                     "moe dispatch tokens");

  // Compute: per local slot, the received tokens that chose it; weighted outputs summed per record.
  std::vector<std::vector<std::pair<int64_t, float>>> by_slot(S);
  for (int64_t r = 0; r < num_received; ++r) {
    const float* record = recv_records.data() + r * rec.floats();
    for (int64_t k = 0; k < K; ++k) {
      int32_t slot = -1;
      std::memcpy(&slot, record + H + k, sizeof(slot));
      if (slot >= 0) by_slot[slot].emplace_back(r, record[H + K + k]);
    }
  }
  std::vector<float> partial(num_received * H, 0.0f), inputs, outputs;
  for (int64_t s = 0; s < S; ++s) {
    if (by_slot[s].empty()) continue;
    const int64_t expert = placement_.logical_of_slot(moe_layer_idx, me * S + s);
    const auto n = static_cast<int64_t>(by_slot[s].size());
    inputs.resize(n * H);
    outputs.resize(n * H);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(recv_records.data() + by_slot[s][i].first * rec.floats(), H, inputs.data() + i * H);
    model.compute_expert(moe_layer_idx, expert, inputs.data(), n, outputs.data());
    for (int64_t i = 0; i < n; ++i)
      cpu::axpy(by_slot[s][i].second, outputs.data() + i * H, partial.data() + by_slot[s][i].first * H, H);
  }

  // Combine: partial sums return in the order they came; each adds into its token's output.
  std::vector<float> returned(offset[num_ranks] * H);
  std::vector<int64_t> back_send(num_ranks), back_recv(num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    back_send[r] = recv_counts[r] * H;
    back_recv[r] = send_counts[r] * H;
  }
  comm_.all_to_all_v(partial.data(), back_send, returned.data(), back_recv, DType::kF32, "moe combine");
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t i = token_dest_begin[t]; i < token_dest_begin[t + 1]; ++i)
      cpu::axpy(1.0f, returned.data() + record_of[i] * H, out + t * H, H);

  ++stats_.num_exchanges;
  for (int r = 0; r < num_ranks; ++r) {
    if (r == me) continue;
    stats_.dispatch_bytes += send_counts[r] * rec.floats() * static_cast<int64_t>(sizeof(float));
    stats_.combine_bytes += recv_counts[r] * H * static_cast<int64_t>(sizeof(float));
    stats_.tokens_sent += send_counts[r];
  }
  stats_.tokens_received += num_received;
}

}  // namespace deepinfer
