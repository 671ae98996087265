// A sequence in flight: its tokens (prompt, then generated), how many of them the KV cache holds, and the
// blocks that hold them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "src/engine/request.h"

namespace deepinfer {

// kHandedOff: prefilled on a prefill rank, its KV on its way to a decode rank.
enum class SequenceStatus { kWaiting, kRunning, kHandedOff, kFinished };

// Overlapped scheduling's stand-in for a token a step in flight has yet to sample (Sequence::num_pending).
inline constexpr int32_t kPendingToken = -1;

struct Sequence {
  int64_t idx = 0;  // position in the input, which is also the output order
  const Request* request = nullptr;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t num_prompt_tokens = 0;
  int64_t num_cached = 0;  // tokens[0, num_cached) are in the KV cache
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;  // prefix cache: the chained hashes of its blocks filled so far
  bool shares_blocks = true;           // false: it neither takes nor registers prefix-cache blocks
  // SWA replay (a prefix hit whose blocks came without window state): SequenceChunk::swa_floor and
  // keep_inputs_below for every step of the sequence; 0 when its cache is exact.
  int64_t swa_floor = 0, keep_inputs_below = 0;
  SequenceStatus status = SequenceStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int64_t num_streamed = 0;  // generated tokens Engine::take_new_tokens has reported
  // Overlapped scheduling: the last num_pending tokens are placeholders (kPendingToken) for what steps in flight will
  // sample; awaiting_last: the newest of them reaches the sequence's length, so it runs no further step.
  int64_t num_pending = 0;
  bool awaiting_last = false;
  std::optional<bool> constraint_satisfied;  // structured output: set when a constrained sequence finishes
  std::optional<RequestFailure> failure;     // it ended alone on an error (its constraint reached a dead end)
  // With EngineOptions::logits_hashes: per generated token, the fingerprint of the logits row it was drawn from.
  std::vector<uint64_t> logits_hashes;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_known_tokens() const { return num_tokens() - num_pending; }
  int64_t num_generated() const { return num_tokens() - num_prompt_tokens; }
  // Tokens not yet in the cache; the last of them is the one whose logits give the next token.
  int64_t num_uncached() const { return num_tokens() - num_cached; }
};

}  // namespace deepinfer
