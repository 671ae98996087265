// Expert-parallel dispatch and combine around an all-to-all (DeepEP's "normal" mode, over NCCL):
//   ep_layout   each (token, k) picks the slot that serves its logical expert (a replica on this rank if
//               there is one, else replicas in turn by (my_rank + token), as ExpertPlacement::pick_slot) and
//               so its destination rank; each token gets one position in the send segment of each distinct
//               destination (token_pos[t, r], -1 where r is not a destination); send_counts[r] counts them.
//               expert_counts[e] += tokens routed to logical expert e (the EPLB load).
//   ep_pack     one record per (token, destination) at segment offset + position: the token's bf16 row, then
//               K int32 logical experts (-1 where the entry is served on another rank), then K float weights
//               (0 there). Records are record_bytes long (ep_record_bytes), so rows stay 16-byte aligned.
//   ep_unpack   received records -> x [n, H], ids [n, K] (-1 becomes `dummy_expert`, an id the caller's
//               expert pass leaves out), weights [n, K].
//   ep_combine  out[t] = bf16(out[t] + sum over destinations r, ascending, of returned[offset_r + pos[t, r]]).
//   ep_pair_rows (--batch-invariant) where the destinations return each entry's own expert output instead of a
//               sum (K rows per record, entry k at row k): row_of[t*K + k] = the returned row of (t, k), so that
//               moe_unpermute adds them in k order, as the one-rank path does.
// Positions within a segment come from atomics (order varies run to run); each output row depends only on its
// own input row, and the combine sums in rank order, so results do not. At most 64 ranks, hidden % 8 == 0.
// Flat launchers: device pointers, sizes, a stream; they allocate nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int kMaxEpRanks = 64;

int64_t ep_record_bytes(int64_t hidden, int64_t top_k);

// send_counts [num_ranks] and expert_counts are accumulated into: zero send_counts first.
void ep_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t top_k, const int32_t* replica_offsets,
               const int32_t* replica_slots, const int32_t* local_slot, int64_t slots_per_rank, int num_ranks,
               int my_rank, int32_t* entry_rank, int32_t* token_pos, int32_t* send_counts, unsigned long long* expert_counts,
               cudaStream_t stream);

void ep_pack(const __nv_bfloat16* x, const int32_t* topk_ids, const float* topk_weights, const int32_t* entry_rank,
             const int32_t* token_pos, const int32_t* send_counts, int64_t num_tokens, int64_t top_k, int64_t hidden,
             int num_ranks, int64_t record_bytes, void* send_records, cudaStream_t stream);

void ep_unpack(const void* records, int64_t num_records, int64_t top_k, int64_t hidden, int64_t record_bytes,
               int32_t dummy_expert, __nv_bfloat16* x, int32_t* ids, float* weights, cudaStream_t stream);

void ep_combine(const __nv_bfloat16* returned, const int32_t* token_pos, const int32_t* send_counts,
                int64_t num_tokens, int64_t hidden, int num_ranks, __nv_bfloat16* out, cudaStream_t stream);

void ep_pair_rows(const int32_t* entry_rank, const int32_t* token_pos, const int32_t* send_counts, int64_t num_tokens,
                  int64_t top_k, int num_ranks, int32_t* row_of, cudaStream_t stream);

}  // namespace deepinfer::cuda
