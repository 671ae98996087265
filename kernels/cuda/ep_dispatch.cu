#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ep_dispatch.cuh"

namespace deepinfer::cuda {

namespace {

__global__ void layout_kernel(const int32_t* topk_ids, int64_t num_tokens, int top_k, const int32_t* replica_offsets,
                              const int32_t* replica_slots, const int32_t* local_slot, int64_t slots_per_rank,
                              int num_ranks, int my_rank, int32_t* entry_rank, int32_t* token_pos,
                              int32_t* send_counts, unsigned long long* expert_counts) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  uint64_t destinations = 0;
  for (int k = 0; k < top_k; ++k) {
    const int32_t e = topk_ids[t * top_k + k];
    atomicAdd(&expert_counts[e], 1ull);
    int64_t slot = local_slot[e];
    if (slot < 0) {
      const int32_t first = replica_offsets[e], count = replica_offsets[e + 1] - first;
      slot = replica_slots[first + (my_rank + t) % count];
    }
    const int r = static_cast<int>(slot / slots_per_rank);
    entry_rank[t * top_k + k] = r;
    destinations |= uint64_t{1} << r;
  }
  for (int r = 0; r < num_ranks; ++r)
    token_pos[t * num_ranks + r] = (destinations >> r & 1) ? atomicAdd(&send_counts[r], 1) : -1;
}

// Segment offsets from the counts, computed by each block (num_ranks is small).
__device__ __forceinline__ void segment_offsets(const int32_t* counts, int num_ranks, int64_t* offsets) {
  if (threadIdx.x == 0) {
    int64_t sum = 0;
    for (int r = 0; r < num_ranks; ++r) offsets[r] = sum, sum += counts[r];
  }
  __syncthreads();
}

__global__ void pack_kernel(const __nv_bfloat16* x, const int32_t* topk_ids, const float* topk_weights,
                            const int32_t* entry_rank, const int32_t* token_pos, const int32_t* send_counts,
                            int top_k, int64_t hidden, int num_ranks, int64_t record_bytes, char* records) {
  __shared__ int64_t offsets[kMaxEpRanks];
  segment_offsets(send_counts, num_ranks, offsets);
  const int64_t t = blockIdx.x;
  const auto* row = reinterpret_cast<const uint4*>(x + t * hidden);
  const int64_t vectors = hidden * 2 / 16;
  for (int r = 0; r < num_ranks; ++r) {
    const int32_t pos = token_pos[t * num_ranks + r];
    if (pos < 0) continue;
    char* record = records + (offsets[r] + pos) * record_bytes;
    auto* dst = reinterpret_cast<uint4*>(record);
    for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) dst[i] = row[i];
    auto* ids = reinterpret_cast<int32_t*>(record + hidden * 2);
    auto* weights = reinterpret_cast<float*>(ids + top_k);
    for (int k = threadIdx.x; k < top_k; k += blockDim.x) {
      const bool here = entry_rank[t * top_k + k] == r;
      ids[k] = here ? topk_ids[t * top_k + k] : -1;
      weights[k] = here ? topk_weights[t * top_k + k] : 0.0f;
    }
  }
}

__global__ void unpack_kernel(const char* records, int top_k, int64_t hidden, int64_t record_bytes,
                              int32_t dummy_expert, __nv_bfloat16* x, int32_t* ids, float* weights) {
  const int64_t i = blockIdx.x;
  const char* record = records + i * record_bytes;
  const auto* src = reinterpret_cast<const uint4*>(record);
  auto* dst = reinterpret_cast<uint4*>(x + i * hidden);
  for (int64_t j = threadIdx.x; j < hidden * 2 / 16; j += blockDim.x) dst[j] = src[j];
  const auto* rec_ids = reinterpret_cast<const int32_t*>(record + hidden * 2);
  const auto* rec_weights = reinterpret_cast<const float*>(rec_ids + top_k);
  for (int k = threadIdx.x; k < top_k; k += blockDim.x) {
    ids[i * top_k + k] = rec_ids[k] < 0 ? dummy_expert : rec_ids[k];
    weights[i * top_k + k] = rec_weights[k];
  }
}

__global__ void combine_kernel(const __nv_bfloat16* returned, const int32_t* token_pos, const int32_t* send_counts,
                               int64_t hidden, int num_ranks, __nv_bfloat16* out) {
  __shared__ int64_t offsets[kMaxEpRanks];
  __shared__ int64_t rows[kMaxEpRanks];  // the returned rows of this token, in rank order
  __shared__ int num_sources;
  segment_offsets(send_counts, num_ranks, offsets);
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    int n = 0;
    for (int r = 0; r < num_ranks; ++r) {
      const int32_t pos = token_pos[t * num_ranks + r];
      if (pos >= 0) rows[n++] = offsets[r] + pos;
    }
    num_sources = n;
  }
  __syncthreads();
  const int sources = num_sources;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float acc = to_float(out[t * hidden + i]);
    for (int s = 0; s < sources; ++s) acc += to_float(returned[rows[s] * hidden + i]);
    out[t * hidden + i] = to_bf16(acc);
  }
}

// One block a token: its K entries' rows in the returned pair outputs.
__global__ void pair_rows_kernel(const int32_t* entry_rank, const int32_t* token_pos, const int32_t* send_counts,
                                 int top_k, int num_ranks, int32_t* row_of) {
  __shared__ int64_t offsets[kMaxEpRanks];
  segment_offsets(send_counts, num_ranks, offsets);
  const int64_t t = blockIdx.x;
  for (int k = threadIdx.x; k < top_k; k += blockDim.x) {
    const int r = entry_rank[t * top_k + k];
    row_of[t * top_k + k] = static_cast<int32_t>((offsets[r] + token_pos[t * num_ranks + r]) * top_k + k);
  }
}

}  // namespace

int64_t ep_record_bytes(int64_t hidden, int64_t top_k) { return (hidden * 2 + top_k * 8 + 15) / 16 * 16; }

void ep_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t top_k, const int32_t* replica_offsets,
               const int32_t* replica_slots, const int32_t* local_slot, int64_t slots_per_rank, int num_ranks,
               int my_rank, int32_t* entry_rank, int32_t* token_pos, int32_t* send_counts, unsigned long long* expert_counts,
               cudaStream_t stream) {
  if (num_tokens == 0) return;
  layout_kernel<<<static_cast<unsigned>((num_tokens + 127) / 128), 128, 0, stream>>>(
      topk_ids, num_tokens, static_cast<int>(top_k), replica_offsets, replica_slots, local_slot, slots_per_rank,
      num_ranks, my_rank, entry_rank, token_pos, send_counts, expert_counts);
}

void ep_pack(const __nv_bfloat16* x, const int32_t* topk_ids, const float* topk_weights, const int32_t* entry_rank,
             const int32_t* token_pos, const int32_t* send_counts, int64_t num_tokens, int64_t top_k, int64_t hidden,
             int num_ranks, int64_t record_bytes, void* send_records, cudaStream_t stream) {
  if (num_tokens == 0) return;
  pack_kernel<<<static_cast<unsigned>(num_tokens), 128, 0, stream>>>(x, topk_ids, topk_weights, entry_rank, token_pos,
                                                                     send_counts, static_cast<int>(top_k), hidden,
                                                                     num_ranks, record_bytes,
                                                                     static_cast<char*>(send_records));
}

void ep_unpack(const void* records, int64_t num_records, int64_t top_k, int64_t hidden, int64_t record_bytes,
               int32_t dummy_expert, __nv_bfloat16* x, int32_t* ids, float* weights, cudaStream_t stream) {
  if (num_records == 0) return;
  unpack_kernel<<<static_cast<unsigned>(num_records), 128, 0, stream>>>(
      static_cast<const char*>(records), static_cast<int>(top_k), hidden, record_bytes, dummy_expert, x, ids, weights);
}

void ep_combine(const __nv_bfloat16* returned, const int32_t* token_pos, const int32_t* send_counts,
                int64_t num_tokens, int64_t hidden, int num_ranks, __nv_bfloat16* out, cudaStream_t stream) {
  if (num_tokens == 0) return;
  combine_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(returned, token_pos, send_counts, hidden,
                                                                       num_ranks, out);
}

void ep_pair_rows(const int32_t* entry_rank, const int32_t* token_pos, const int32_t* send_counts, int64_t num_tokens,
                  int64_t top_k, int num_ranks, int32_t* row_of, cudaStream_t stream) {
  if (num_tokens == 0) return;
  pair_rows_kernel<<<static_cast<unsigned>(num_tokens), 32, 0, stream>>>(entry_rank, token_pos, send_counts,
                                                                         static_cast<int>(top_k), num_ranks, row_of);
}

}  // namespace deepinfer::cuda
