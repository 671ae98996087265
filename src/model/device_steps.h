// What a backend that runs its steps on a device adds to CausalLm (the CUDA models, through CudaCausalLm; tests'
// stand-ins on the CPU): sampling where the logits are, steps started before the previous step's tokens are back,
// CUDA graphs, and the device's idle time. A model gives it through CausalLm::device_steps() (null: a host backend,
// whose logits the engine samples).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/model/expert_dispatch.h"
#include "src/model/forward_batch.h"

namespace deepinfer {

class KvCache;
struct TokenMasks;

// How long the device sat idle between the end of one model call's work and the start of the next (host
// post-processing and preparation showing through), summed since the model was made: the gaps measured and their ms.
// A step with a model drafter has two calls (the verify step, the draft).
struct DeviceIdle {
  int64_t gaps = 0;
  double ms = 0.0;
};

class DeviceSteps {
 public:
  virtual ~DeviceSteps() = default;

  // Runs the batch like CausalLm::forward and draws one token per logits row with `rows` (only the tokens come back,
  // not rows x vocab floats), each masked row drawn among the tokens its mask admits (`masks` may be null: none);
  // logits_hashes (may be null: not wanted) [rows] takes each row's fingerprint before any mask
  // (cpu::logits_row_hashes).
  virtual std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                                  std::span<const SamplingRow> rows, const TokenMasks* masks,
                                                  uint64_t* logits_hashes) const = 0;

  // Overlapped scheduling with the tokens left on the device: start_forward_and_sample queues a step like
  // forward_and_sample (no masks), whose inputs may be tokens the step started before it samples
  // (ForwardBatch::tokens_from_previous_step), and returns before its own tokens exist; finish_forward_and_sample
  // waits for the oldest started step's tokens (and fingerprints into logits_hashes, when the step asked for them).
  // Steps finish in the order they started, at most two outstanding. Where samples_async is false (a step's inputs
  // must reach the host first), neither may be called.
  virtual bool samples_async() const = 0;
  virtual void start_forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                        std::span<const SamplingRow> rows, bool logits_hashes) const = 0;
  virtual std::vector<int32_t> finish_forward_and_sample(uint64_t* logits_hashes) const = 0;

  // The device's idle time between model calls so far ({0, 0} where not measured).
  virtual DeviceIdle device_idle() const { return {}; }
  // Backends that capture decode steps as CUDA graphs replay them unless this turns them off (every step eager);
  // how many steps so far ran from a graph.
  virtual void set_cuda_graphs(bool /*enabled*/) {}
  virtual int64_t graph_replays() const { return 0; }
};

}  // namespace deepinfer
