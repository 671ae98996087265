#include "kernels/cuda/speculation.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 128;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void accept_drafts_kernel(const int32_t* inputs, const int32_t* drawn, const int32_t* first_rows,
                                     const int32_t* num_rows, int64_t num_seqs, int32_t* accepted, int32_t* anchors) {
  const int64_t s = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (s >= num_seqs) return;
  const int32_t first = first_rows[s], drafts = num_rows[s] - 1;
  int32_t a = 0;
  while (a < drafts && drawn[first + a] == inputs[first + a + 1]) ++a;
  accepted[s] = a;
  anchors[s] = drawn[first + a];
}

__global__ void shift_draft_rows_kernel(const int32_t* accepted, const int32_t* anchors, int64_t num_seqs,
                                        int64_t block, int32_t* positions, int32_t* inverse_positions,
                                        int32_t* window_ends, int32_t* token_ids) {
  const int64_t t = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (t >= num_seqs * block) return;
  const int64_t s = t / block;
  const int32_t a = accepted[s];
  positions[t] += a;
  inverse_positions[t] -= a;
  window_ends[t] += a;
  if (t % block == 0) token_ids[t] = anchors[s];
}

__global__ void chain_mtp_inputs_kernel(const int32_t* inputs, const int32_t* accepted, const int32_t* anchors,
                                        const int32_t* first_rows, const int32_t* num_rows, int64_t num_seqs,
                                        int32_t* mtp_tokens, int32_t* logits_rows) {
  const int64_t s = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (s >= num_seqs) return;
  const int32_t first = first_rows[s], n = num_rows[s], a = accepted[s];
  for (int32_t j = 0; j < n; ++j) mtp_tokens[first + j] = j < a ? inputs[first + j + 1] : anchors[s];
  logits_rows[s] = first + a;
}

__global__ void offset_sampling_positions_kernel(SamplingRow* rows, int64_t num_rows, const int32_t* offsets) {
  const int64_t r = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (r < num_rows) rows[r].position += offsets[r];
}

}  // namespace

void accept_drafts(const int32_t* inputs, const int32_t* drawn, const int32_t* first_rows, const int32_t* num_rows,
                   int64_t num_seqs, int32_t* accepted, int32_t* anchors, cudaStream_t stream) {
  if (num_seqs > 0)
    accept_drafts_kernel<<<blocks_for(num_seqs), kThreads, 0, stream>>>(inputs, drawn, first_rows, num_rows, num_seqs,
                                                                        accepted, anchors);
}

void shift_draft_rows(const int32_t* accepted, const int32_t* anchors, int64_t num_seqs, int64_t block,
                      int32_t* positions, int32_t* inverse_positions, int32_t* window_ends, int32_t* token_ids,
                      cudaStream_t stream) {
  if (num_seqs * block > 0)
    shift_draft_rows_kernel<<<blocks_for(num_seqs * block), kThreads, 0, stream>>>(
        accepted, anchors, num_seqs, block, positions, inverse_positions, window_ends, token_ids);
}

void chain_mtp_inputs(const int32_t* inputs, const int32_t* accepted, const int32_t* anchors, const int32_t* first_rows,
                      const int32_t* num_rows, int64_t num_seqs, int32_t* mtp_tokens, int32_t* logits_rows,
                      cudaStream_t stream) {
  if (num_seqs > 0)
    chain_mtp_inputs_kernel<<<blocks_for(num_seqs), kThreads, 0, stream>>>(inputs, accepted, anchors, first_rows,
                                                                           num_rows, num_seqs, mtp_tokens, logits_rows);
}

void offset_sampling_positions(SamplingRow* rows, int64_t num_rows, const int32_t* offsets, cudaStream_t stream) {
  if (num_rows > 0)
    offset_sampling_positions_kernel<<<blocks_for(num_rows), kThreads, 0, stream>>>(rows, num_rows, offsets);
}

}  // namespace deepinfer::cuda
