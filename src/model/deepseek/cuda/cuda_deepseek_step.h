// What one step of CudaDeepseekModel runs, in device-ready index arrays: made on the host by make_plan, uploaded into
// the step's scratch once, read by the attention and the blocks (cuda_deepseek_blocks.h).
#pragma once

#include <cstdint>

#include "src/model/deepseek/cuda/cuda_deepseek_model.h"

namespace deepinfer {

struct CudaDeepseekModel::StepPlan {
  int64_t num_tokens = 0;
  bool absorbed = false;
  int32_t* positions = nullptr;   // [T]
  int64_t* new_slots = nullptr;   // [T] cache slots of the new tokens
  // absorbed (every sequence has one new token, or a verify step): one query row per row of the step
  int32_t* block_table = nullptr;  // [T, max_blocks]
  int64_t max_blocks = 0;
  int32_t* seq_lens = nullptr;     // [T]
  int64_t max_len = 0;
  // expanded: each sequence's whole context
  int64_t num_keys = 0;
  int64_t* key_slots = nullptr;  // [Tk]
  int32_t* q_seq = nullptr;      // [T]
  int32_t* q_pos = nullptr;      // [T]
  int32_t* cu_k = nullptr;       // [B + 1]
  int32_t* tiles = nullptr;      // row tiles of the prefill attention
  int64_t num_tiles = 0;
};

}  // namespace deepinfer
