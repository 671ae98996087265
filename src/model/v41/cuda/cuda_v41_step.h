// One forward step of the CUDA V4.1 model (cuda_v41_model.h): the index arrays its kernels read, computed on the
// host and uploaded once at the start (StepPlan), and what its layers publish to the later ones (StepState), both
// in the step's `published_` pool; with bounded replay's compact form, a second plan and state of the kept rows
// from v41_first_compact_layer on. Included by the model's two source files only.
#pragma once

#include <map>
#include <vector>

#include "src/model/v41/cuda/cuda_v41_model.h"

namespace deepinfer {

struct CudaV41Model::StepPlan {
  struct Sequence {
    int64_t first = 0;    // its first new token's row
    int64_t num_new = 0;
    int64_t context = 0;  // cached + new tokens
  };
  // Per compress ratio r among the layers: which compressed entries each row may see ((position + 1) / r), and
  // each sequence's complete groups (context / r; a partial last group waits for its tokens). Laid out packed
  // (sequence after sequence) or, for a step of fixed shapes, in `width` rows a sequence, the capacity of its
  // block table: then every launch's size follows from the batch size and the block tables' length alone, and a
  // captured decode step replays while the contexts grow.
  struct Groups {
    const int32_t* visible = nullptr;          // [T]
    const int64_t* row_offsets = nullptr;      // [T]: each row's sequence's first group
    const int32_t* counts = nullptr;           // [S] on the device
    const int64_t* offsets = nullptr;          // [S] on the device
    std::vector<int64_t> count, offset;        // the same on the host
    int64_t total = 0;  // rows of the layout
    int64_t width = 0;  // entries a launch covers per sequence: the largest count, or the capacity
    // The groups already in the cache's group slots (read from there), and those this step completes, pooled
    // into a compact layout of their own (new_width rows a sequence with fixed shapes: one, or padding), then
    // written to their slots and their rows of the layout above (padding rows: slot and row -1).
    const int32_t* cached = nullptr;        // [S]
    const int32_t* new_first = nullptr;     // [S] = cached
    const int32_t* new_counts = nullptr;    // [S]
    const int64_t* new_offsets = nullptr;   // [S]
    const int32_t* new_positions = nullptr; // [new_total]: g * r
    const int64_t* new_slots = nullptr;     // [new_total]
    const int64_t* new_rows = nullptr;      // [new_total]
    int64_t new_total = 0, new_width = 0;
  };

  // With `fixed_shapes`, the groups' capacity layout; rebuild[s]: sequence s's cached groups are missing (an
  // import) and are pooled again with the new ones.
  // `experts`: the EP group's exchange, which fetches engram rows when the tables are split across its ranks.
  StepPlan(const ForwardBatch& batch, const V41TextConfig& v, const std::vector<Layer>& layers, bool fixed_shapes,
           const std::vector<bool>& rebuild, ExpertDispatcher* experts, ScratchPool& pool);
  // Bounded replay's compact form: the plan of the rows `kept` (ascending rows of `full`'s step) that `kept_batch`
  // holds, from v41_first_compact_layer on. The sequences and their groups' layouts are `full`'s (the compressed
  // entries published before stay valid); the engram rows are `full`'s of the kept rows, not hashed again.
  StepPlan(const StepPlan& full, const ForwardBatch& kept_batch, const std::vector<int64_t>& kept,
           const V41TextConfig& v, const std::vector<Layer>& layers, ScratchPool& pool);

  std::vector<Sequence> sequences;
  int64_t num_tokens = 0, num_rows = 0, max_blocks = 1;
  bool fixed_shapes = false;
  int32_t* token_ids = nullptr;  // (written by the sampler's fill_inputs under overlapped scheduling)
  const int32_t* row_ids = nullptr;            // [num_rows] the rows whose logits are wanted
  const int32_t* positions = nullptr;          // [T]
  const int32_t* inverse_positions = nullptr;  // [T] -position: RoPE backwards
  const int64_t* new_slots = nullptr;          // [T] the new tokens' cache slots
  const int32_t* row_tables = nullptr;         // [T, max_blocks] each row's sequence's block table
  const int32_t* seq_tables = nullptr;         // [S, max_blocks]
  const int32_t* extra_offsets = nullptr;      // [T + 1] = t * index_topk: each row's slots of selected entries
  int32_t* engram_rows = nullptr;              // [engram layers, T, columns]: the tables' rows (engram_hash.h)
  // Tables whole on this rank: engram_rows are hashed on the device once the step's inputs are there (some may be
  // written there: overlapped scheduling), from these sources [T, max_ngram] (cuda::engram_hash_rows).
  const int32_t* engram_sources = nullptr;
  // Tables split across the EP group (v.engram_shard): the step's rows fetched from their holders here, every
  // layer's in the order of the hash, engram_rows then indexing these (FP8 codes + scales, or bf16 values).
  const uint8_t *fetched_engram_codes = nullptr, *fetched_engram_scales = nullptr;
  const Bf16* fetched_engram_values = nullptr;
  std::map<int64_t, Groups> groups;            // by compress ratio
  // Bounded replay: per row, the decoder layers' windows reach no lower than this position (null: no floor).
  const int32_t* decoder_window_floors = nullptr;

 private:
  struct NoEngramRows {};
  // Everything but the engram rows.
  StepPlan(const ForwardBatch& batch, const V41TextConfig& v, const std::vector<Layer>& layers, bool fixed_shapes,
           const std::vector<bool>& rebuild, ScratchPool& pool, NoEngramRows);
  void hash_engram_rows(const ForwardBatch& batch, const V41TextConfig& v, const std::vector<Layer>& layers,
                        ExpertDispatcher* experts, ScratchPool& pool);
};

struct CudaV41Model::StepState {
  // Rows of head_dim-wide (or index_head_dim-wide) entries in the layout of the plan's groups of `ratio`
  // (0: none published yet; data null where the layout has no rows).
  struct Entries {
    Bf16* data = nullptr;
    int64_t ratio = 0;
  };

  StepState(const StepPlan& plan, const V41TextConfig& v, int64_t hidden, ScratchPool& pool);
  // Bounded replay's compact form: the state of `kept_plan`'s rows, `kept` [rows] (device ids of `full`'s rows):
  // what the remaining layers read per row (the streams, the next collapse weights, the picks, the candidate masks)
  // gathered; what is published per sequence (compressed entries, indexer keys) shared.
  StepState(const StepState& full, const StepPlan& kept_plan, const int64_t* kept, const V41TextConfig& v,
            int64_t hidden, ScratchPool& pool);

  float *streams, *pre, *next_pre, *post, *comb;  // [T, hc, H], [T, hc] x 3, [T, hc, hc]
  Bf16 *h, *out;                                  // a sublayer's input and output [T, H]
  Entries compressed;  // of the latest KV source
  Entries index_keys;  // of the latest KV source that owns indexer keys
  // The latest index source's picks per row: ids into the row's sequence's compressed entries of ratio
  // `selected_ratio` (0: no picks yet), ascending, and how many.
  int32_t* selected_ids = nullptr;     // [T, index_topk]
  int32_t* selected_counts = nullptr;  // [T]
  int64_t selected_ratio = 0;
  // The candidate source's masks [T, candidate_width] over the entries of ratio `candidate_ratio` (null: none yet).
  uint8_t* candidate_mask = nullptr;
  int64_t candidate_width = 0, candidate_ratio = 0;
};

}  // namespace deepinfer
