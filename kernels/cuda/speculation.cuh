// Speculative decoding's bookkeeping on the device, for drafts chained behind their verify step (overlapped
// scheduling with DSpark, cuda_v41_dspark.cpp): which drafts a verify step accepted, and the next draft's rows at the
// positions that acceptance reaches, before the host has the verify step's tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/sampling.cuh"

namespace deepinfer::cuda {

// Per sequence s of a verify step (its rows first_rows[s] .. + num_rows[s]: its last token, then its drafts):
// accepted[s] = how many drafts equal the token drawn at the row before them, in order (engine/speculation.h's
// rule), and anchors[s] = the token drawn at the first rejecting row (or after the last draft): the sequence's next
// token. inputs: the step's input tokens [rows]; drawn: its sampled tokens [rows].
void accept_drafts(const int32_t* inputs, const int32_t* drawn, const int32_t* first_rows, const int32_t* num_rows,
                   int64_t num_seqs, int32_t* accepted, int32_t* anchors, cudaStream_t stream);

// A draft of num_seqs blocks of `block` rows (sequence after sequence) laid out for zero accepted drafts, moved to
// where each sequence's acceptance puts it: positions and window_ends += accepted[s], inverse_positions -=
// accepted[s], and each block's first input token = anchors[s].
void shift_draft_rows(const int32_t* accepted, const int32_t* anchors, int64_t num_seqs, int64_t block,
                      int32_t* positions, int32_t* inverse_positions, int32_t* window_ends, int32_t* token_ids,
                      cudaStream_t stream);

// DeepSeek-V3's MTP module over every row of a verify step (first_rows / num_rows as accept_drafts'): row j of
// sequence s takes the token after its position, the step's input at j + 1 while j < accepted[s] and anchors[s] at
// j = accepted[s] (rows past it: anchors[s] too, their outputs unread); logits_rows[s] = the row at accepted[s].
void chain_mtp_inputs(const int32_t* inputs, const int32_t* accepted, const int32_t* anchors, const int32_t* first_rows,
                      const int32_t* num_rows, int64_t num_seqs, int32_t* mtp_tokens, int32_t* logits_rows,
                      cudaStream_t stream);

// rows[s].position += offsets[s] for s < num_rows (the sampling position of a draft slot, which follows acceptance).
void offset_sampling_positions(SamplingRow* rows, int64_t num_rows, const int32_t* offsets, cudaStream_t stream);

}  // namespace deepinfer::cuda
