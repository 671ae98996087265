// The CUDA models' last step after the logits: one token per row drawn where the logits are (greedy rows by
// argmax, the others by the sampling kernel), only the tokens copied back.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/model/causal_lm.h"
#include "src/model/cuda/device_memory.h"

namespace deepinfer {

// logits [num_rows, vocab] fp32 on the device; `rows` the engine's sampling rows, one per logits row; `masks` (may
// be null) structured output's vocabulary masks, applied to the logits in place first, after the rows' fingerprints
// go to logits_hashes (may be null: not wanted; [num_rows] on the host). Waits for the tokens; throws
// where a row has no finite logit. `step_end` (optional) is recorded after the sampling kernels, before the copy
// back.
std::vector<int32_t> sample_on_device(float* logits, int64_t num_rows, int64_t vocab,
                                      std::span<const SamplingRow> rows, const TokenMasks* masks,
                                      uint64_t* logits_hashes, ScratchPool& scratch,
                                      cudaEvent_t step_end = nullptr);

// The same draws left on the device: a token per row into `out` [num_rows] (device), queued on the per-thread default
// stream; nothing waits. A row without one finite logit gets `vocab` there (check_drawn_tokens says so once the
// tokens are on the host). For draws that feed later device work before the host needs them (DSpark's slots).
// position_offsets (device, may be null): added to each row's position first (positions that follow device work).
void sample_into_device(float* logits, int64_t num_rows, int64_t vocab, std::span<const SamplingRow> rows,
                        int32_t* out, ScratchPool& scratch, const int32_t* position_offsets = nullptr);
// Throws where a drawn token is not in [0, vocab) (its logits row had no finite value).
void check_drawn_tokens(const std::vector<int32_t>& tokens, int64_t vocab);

// Overlapped scheduling's sampling (DeviceSteps::start_forward_and_sample): each started step's tokens are drawn into
// a device buffer of their own, so that the next step's inputs can take them there (fill_inputs) before the host has
// them, and copied back into pinned memory behind an event; finish() waits for the oldest started step's. The engine
// finishes step N before it starts N + 2, so two slots serve.
class DeviceSampler {
 public:
  // Before the step's forward, on its stream: token_ids[targets[2 i]] = the previous started step's token at row
  // targets[2 i + 1] (ForwardBatch::tokens_from_previous_step). The targets go to a buffer of the sampler's own,
  // staged through the pool's pinned memory: the step's scratch allocations stay in the order a captured decode
  // graph baked in, whether or not a step has owed inputs.
  void fill_inputs(int32_t* token_ids, const std::vector<int32_t>& targets, ScratchPool& scratch);
  // After the forward: samples as sample_on_device (no masks) into this step's slot, records step_end after the
  // sampling kernels, and queues the copies back; returns at once.
  void start(float* logits, int64_t num_rows, int64_t vocab, std::span<const SamplingRow> rows, bool want_hashes,
             ScratchPool& scratch, cudaEvent_t step_end);
  // The oldest started step's tokens (and fingerprints into logits_hashes, where it asked for them and that is not
  // null); throws where a row had no finite logit.
  std::vector<int32_t> finish(uint64_t* logits_hashes);
  // The last started step's tokens on the device (valid until the step after the next starts).
  const int32_t* started_tokens() const { return slots_[(started_ + 1) % 2].tokens.data(); }

 private:
  struct Slot {
    DeviceArray<int32_t> tokens{1};
    DeviceArray<uint64_t> hashes{1};
    MappedHostArray host;  // pinned: tokens, then hashes
    CudaEvent copied;
    int64_t rows = 0;
    bool hashes_wanted = false;
  };
  Slot slots_[2];
  DeviceArray<int32_t> targets_{0};
  int64_t started_ = 0, finished_ = 0;
  int64_t vocab_ = 0;
};

}  // namespace deepinfer
