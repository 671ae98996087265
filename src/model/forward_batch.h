// What one forward step runs: the new tokens of several sequences, each continuing from the tokens its KV
// cache already holds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/sampling.h"

namespace deepinfer {

// How to draw one token from one row of a step's logits (the engine's SamplingParams, flattened): greedy when
// temperature <= 0; `position` is where the token will land, which indexes the request's Philox stream.
using SamplingRow = cpu::SamplingRow;

struct SequenceChunk {
  int64_t num_cached = 0;  // positions [0, num_cached) are in the KV cache; the new tokens follow
  int64_t num_new = 0;
  std::span<const int32_t> block_table;  // covers positions [0, num_cached + num_new)
  // The tokens just before the new ones, at positions [num_cached - size, num_cached) (the engine passes all
  // cached tokens; DeepSeek-V4.1's engram hashing reads the last max_ngram_size - 1 of them).
  std::span<const int32_t> earlier_tokens = {};
  // DeepSeek-V4.1's bounded decoder replay (mask mode): the decoder layers' windows see no position below this
  // one (0: everything; engine.h's ReplayOptions).
  int64_t replay_floor = 0;
  // SWA replay after a prefix hit whose blocks came without their window state (DeepInfer's: the block KV from the
  // store, the sliding-window state kept apart): every layer's window sees no position below swa_floor (those have
  // no window state), and rows below keep_inputs_below write only their window K=V, leaving the compressor inputs
  // the hit loaded (exact) as they are. 0: neither.
  int64_t swa_floor = 0;
  int64_t keep_inputs_below = 0;
};

// Expanded: the latent cache is decompressed into per-head keys and values (prefill: many queries share the
// work). Absorbed: queries are folded into the latent space and attend to the cache directly (decode: no
// per-token decompression; FlashMLA's form). Auto picks absorbed when every sequence has one new token.
enum class AttentionPath { kAuto, kExpanded, kAbsorbed };

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // new tokens of all sequences, in sequence order
  std::vector<SequenceChunk> sequences;
  AttentionPath attention_path = AttentionPath::kAuto;
  bool all_logits = false;  // logits for every new token, instead of each sequence's last one
  // A speculative verify step: each sequence's rows are its last token and its drafts (engine/speculation.h).
  // Backends compute such rows as a one-token decode step would where they can (the CPU's absorbed MLA), so that
  // speculation leaves the outputs as they are.
  bool speculative_verify = false;
  // DeepSeek-V4.1's bounded decoder replay, compact form: from v41_first_compact_layer on, rows below their
  // sequence's replay_floor are dropped (each sequence keeps at least its last row); without it the floor only
  // masks the decoder layers' windows.
  bool compact_replay = false;
  // Overlapped scheduling with the tokens left on the device (DeviceSteps::samples_async): pairs (input row, row of the
  // step started just before this one) whose input is the token that step samples; those inputs' token_ids hold 0
  // until the backend writes the token there, on the device.
  std::vector<int32_t> tokens_from_previous_step;
  // Drafts chained behind their verify step (DraftModule::start_chained_draft): pairs (input row, row of the started
  // draft's tokens: slot k of its block s at k * blocks + s) whose input is that draft token; 0 there until then.
  std::vector<int32_t> tokens_from_draft;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  // Each new token's position in its sequence.
  std::vector<int32_t> positions() const {
    std::vector<int32_t> out;
    for (const SequenceChunk& seq : sequences)
      for (int64_t i = 0; i < seq.num_new; ++i) out.push_back(static_cast<int32_t>(seq.num_cached + i));
    return out;
  }
  // Bounded replay's compact form: the rows kept (each sequence's at or above its replay_floor, at least its last),
  // ascending, and `kept` set to the batch of those rows (earlier_tokens dropped: the engram hashing reads them for
  // the whole step at its start).
  std::vector<int64_t> keep_replay_rows(ForwardBatch& kept) const {
    std::vector<int64_t> rows;
    kept = ForwardBatch{};
    int64_t first = 0;
    for (const SequenceChunk& seq : sequences) {
      const int64_t from = std::clamp<int64_t>(seq.replay_floor - seq.num_cached, 0, seq.num_new - 1);
      SequenceChunk chunk = seq;
      chunk.num_cached += from;
      chunk.num_new -= from;
      chunk.earlier_tokens = {};
      kept.sequences.push_back(chunk);
      for (int64_t i = from; i < seq.num_new; ++i) {
        rows.push_back(first + i);
        kept.token_ids.push_back(token_ids[first + i]);
      }
      first += seq.num_new;
    }
    return rows;
  }
  // The token rows whose logits are wanted: every row with all_logits, else each sequence's last.
  std::vector<int64_t> logits_rows() const {
    std::vector<int64_t> rows;
    if (all_logits) {
      for (int64_t t = 0; t < num_tokens(); ++t) rows.push_back(t);
    } else {
      int64_t end = 0;
      for (const SequenceChunk& seq : sequences) rows.push_back((end += seq.num_new) - 1);
    }
    return rows;
  }
};

}  // namespace deepinfer
