#include "src/moe/nccl_expert_dispatch.h"

#include <algorithm>

#include "kernels/cuda/ep_dispatch.cuh"
#include "kernels/cuda/moe_permute.cuh"

namespace deepinfer {

namespace {

// At least `n` elements in `array`; a larger array replaces it (after the device is done with the old one).
template <class T>
T* at_least(DeviceArray<T>& array, int64_t n) {
  if (static_cast<int64_t>(array.size()) < n) {
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    array = DeviceArray<T>(std::max<size_t>(static_cast<size_t>(n), array.size() * 3 / 2));
  }
  return array.data();
}

}  // namespace

NcclExpertDispatch::NcclExpertDispatch(NcclCommunicator& comm, int64_t num_experts, int64_t hidden, int64_t top_k)
    : comm_(comm), num_experts_(num_experts), hidden_(hidden), top_k_(top_k),
      record_bytes_(cuda::ep_record_bytes(hidden, top_k)), counts_(2 * comm.size()), sent_(comm.size()),
      received_(comm.size()) {
  DI_CHECK(comm.size() <= cuda::kMaxEpRanks, "the device dispatch handles at most {} EP ranks, the group has {}",
           cuda::kMaxEpRanks, comm.size());
  DI_CHECK(hidden % 8 == 0, "the device dispatch moves rows in 16-byte pieces: hidden size {} is not a multiple of 8",
           hidden);
}

void NcclExpertDispatch::set_placement(const std::vector<std::vector<int32_t>>& phy2log, int64_t slots_per_rank) {
  const int64_t L = static_cast<int64_t>(phy2log.size()), E = num_experts_;
  const int me = comm_.rank();
  std::vector<int32_t> offsets, slots, local(L * E, -1);
  for (int64_t l = 0; l < L; ++l) {
    std::vector<std::vector<int32_t>> replicas(E);
    for (int64_t s = 0; s < static_cast<int64_t>(phy2log[l].size()); ++s) replicas[phy2log[l][s]].push_back(s);
    const auto base = static_cast<int32_t>(slots.size());
    for (int64_t e = 0; e < E; ++e) {
      offsets.push_back(static_cast<int32_t>(slots.size()) - base);
      for (int32_t s : replicas[e]) {
        if (local[l * E + e] < 0 && s / slots_per_rank == me) local[l * E + e] = s;
        slots.push_back(s);
      }
    }
    offsets.push_back(static_cast<int32_t>(slots.size()) - base);
  }
  DI_CUDA_CHECK(cudaDeviceSynchronize());  // a dispatch in flight may still read the old tables
  replica_offsets_ = DeviceArray<int32_t>::from_host(offsets);
  replica_slots_ = DeviceArray<int32_t>::from_host(slots);
  local_slot_ = DeviceArray<int32_t>::from_host(local);
  if (L != num_layers_) {
    routed_counts_ = DeviceArray<unsigned long long>(L * E);
    DI_CUDA_CHECK(cudaMemset(routed_counts_.data(), 0, L * E * sizeof(unsigned long long)));
  }
  num_layers_ = L;
  slots_per_rank_ = slots_per_rank;
  num_physical_ = L > 0 ? static_cast<int64_t>(phy2log[0].size()) : 0;
}

void NcclExpertDispatch::drain_routed_counts(std::span<int64_t> counts) {
  DI_CHECK(static_cast<int64_t>(counts.size()) == num_layers_ * num_experts_, "routed counts for {} entries, have {}",
           counts.size(), num_layers_ * num_experts_);
  const std::vector<unsigned long long> mine = routed_counts_.to_host();
  for (size_t i = 0; i < mine.size(); ++i) counts[i] += static_cast<int64_t>(mine[i]);
  DI_CUDA_CHECK(cudaMemset(routed_counts_.data(), 0, mine.size() * sizeof(unsigned long long)));
}

DeviceDispatch NcclExpertDispatch::dispatch_on(int64_t moe_layer_idx, const void* x, const int32_t* topk_ids,
                                               const float* topk_weights, int64_t num_tokens, cudaStream_t stream) {
  DI_CHECK(moe_layer_idx >= 0 && moe_layer_idx < num_layers_, "MoE layer {} of {} placed", moe_layer_idx, num_layers_);
  const int R = comm_.size(), me = comm_.rank();
  const int64_t E = num_experts_, K = top_k_, H = hidden_;
  const int64_t returned_row = pair_outputs_ ? K * H : H;  // what combine sends back per record
  num_tokens_ = num_tokens;
  topk_weights_ = topk_weights;
  int32_t* entry_rank = at_least(entry_rank_, num_tokens * K);
  int32_t* token_pos = at_least(token_pos_, num_tokens * R);
  DI_CUDA_CHECK(cudaMemsetAsync(counts_.data(), 0, R * sizeof(int32_t), stream));
  cuda::ep_layout(topk_ids, num_tokens, K, replica_offsets_.data() + moe_layer_idx * (E + 1),
                  replica_slots_.data() + moe_layer_idx * num_physical_,
                  local_slot_.data() + moe_layer_idx * E, slots_per_rank_, R, me, entry_rank, token_pos, counts_.data(),
                  routed_counts_.data() + moe_layer_idx * E, stream);
  comm_.wait_for(stream);
  const std::vector<int64_t> one(R, 1);
  comm_.all_to_all_v(counts_.data(), one, counts_.data() + R, one, DType::kI32, "moe dispatch counts");
  std::vector<int32_t> counts(2 * R);
  DI_CUDA_CHECK(cudaMemcpy(counts.data(), counts_.data(), 2 * R * sizeof(int32_t), cudaMemcpyDeviceToHost));
  sent_.assign(counts.begin(), counts.begin() + R);
  received_.assign(counts.begin() + R, counts.end());
  int64_t total_sent = 0, total_received = 0;
  std::vector<int64_t> send_bytes(R), recv_bytes(R);
  for (int r = 0; r < R; ++r) {
    total_sent += sent_[r];
    total_received += received_[r];
    send_bytes[r] = sent_[r] * record_bytes_;
    recv_bytes[r] = received_[r] * record_bytes_;
    if (r == me) continue;
    stats_.dispatch_bytes += send_bytes[r];
    stats_.combine_bytes += received_[r] * returned_row * 2;
    stats_.tokens_sent += sent_[r];
  }
  ++stats_.num_exchanges;
  stats_.tokens_received += total_received;

  void* send = at_least(send_records_, std::max<int64_t>(total_sent, 1) * record_bytes_);
  void* recv = at_least(recv_records_, std::max<int64_t>(total_received, 1) * record_bytes_);
  cuda::ep_pack(static_cast<const __nv_bfloat16*>(x), topk_ids, topk_weights, entry_rank, token_pos, counts_.data(), num_tokens, K, H, R, record_bytes_,
                send, stream);
  comm_.wait_for(stream);
  comm_.all_to_all_v(send, send_bytes, recv, recv_bytes, DType::kU8, "moe dispatch tokens");
  const int64_t rows = std::max<int64_t>(total_received, 1);
  __nv_bfloat16* x_recv = at_least(x_recv_, rows * H);
  int32_t* ids_recv = at_least(ids_recv_, rows * K);
  float* weights_recv = at_least(weights_recv_, rows * K);
  cuda::ep_unpack(recv, total_received, K, H, record_bytes_, static_cast<int32_t>(E), x_recv, ids_recv, weights_recv,
                  stream);
  return {x_recv, ids_recv, weights_recv, total_received, at_least(y_recv_, rows * returned_row)};
}

void NcclExpertDispatch::combine_on(void* out, cudaStream_t stream) {
  const int R = comm_.size();
  const int64_t H = hidden_, K = top_k_, row = pair_outputs_ ? K * H : H;
  std::vector<int64_t> back_send(R), back_recv(R);
  int64_t total_sent = 0;
  for (int r = 0; r < R; ++r) {
    back_send[r] = received_[r] * row;
    back_recv[r] = sent_[r] * row;
    total_sent += sent_[r];
  }
  __nv_bfloat16* returned = at_least(returned_, std::max<int64_t>(total_sent, 1) * row);
  comm_.wait_for(stream);
  comm_.all_to_all_v(y_recv_.data(), back_send, returned, back_recv, DType::kBF16, "moe combine");
  if (pair_outputs_) {
    int32_t* row_of = at_least(pair_row_of_, std::max<int64_t>(num_tokens_ * K, 1));
    cuda::ep_pair_rows(entry_rank_.data(), token_pos_.data(), counts_.data(), num_tokens_, K, R, row_of, stream);
    cuda::moe_unpermute(returned, row_of, topk_weights_, num_tokens_, K, H, static_cast<__nv_bfloat16*>(out), stream);
    return;
  }
  cuda::ep_combine(returned, token_pos_.data(), counts_.data(), num_tokens_, H, R, static_cast<__nv_bfloat16*>(out),
                   stream);
}

}  // namespace deepinfer
