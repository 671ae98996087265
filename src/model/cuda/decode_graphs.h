// Decode steps replayed from CUDA graphs, for both CUDA models. A step's device work is captured the second
// time its shape is seen (the first run is eager: it loads the kernels and sizes the scratch pools) and replayed
// from then on. A graph bakes in the addresses of the step's buffers; they repeat for the same shape because a
// step allocates from its (reset) pools in the same order with the same sizes every time, and the pools keep
// their chunks. So a step may be graphed only if every launch's size and every host decision in it follows from
// the key alone, with everything else (token ids, positions, block tables, context lengths) read from device
// arrays uploaded before the step.
#pragma once

#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include "src/model/cuda/device_memory.h"

namespace deepinfer {

class DecodeGraphs {
 public:
  // What a captured step baked in.
  struct Key {
    int64_t tokens = 0, max_blocks = 0, rows = 0;
    const void* cache = nullptr;
    int64_t variant = 0;  // a model's own shape parameter (V2/V3: the decode attention's KV splits)
    auto operator<=>(const Key&) const = default;
  };

  // The logits of `step` (its device work on the per-thread default stream, returning where it leaves them): run
  // eagerly the first time `key` is seen, captured and replayed the second time, replayed after that. `pools`
  // are the step's scratch pools, reset before the call; they are left where the step leaves them, so that what
  // follows (sampling) allocates after the step's buffers.
  float* run(const Key& key, const std::function<float*()>& step, std::initializer_list<ScratchPool*> pools);
  // How many steps ran from a graph (the capturing one included).
  int64_t replays() const { return replays_; }

 private:
  class GraphExec {  // an instantiated CUDA graph (RAII)
   public:
    GraphExec() = default;
    explicit GraphExec(cudaGraph_t graph);  // instantiates, then destroys `graph`
    GraphExec(GraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
    GraphExec& operator=(GraphExec&& other) noexcept {
      std::swap(exec_, other.exec_);
      return *this;
    }
    ~GraphExec();
    cudaGraphExec_t get() const { return exec_; }
    explicit operator bool() const { return exec_ != nullptr; }

   private:
    cudaGraphExec_t exec_ = nullptr;
  };
  struct CapturedStep {
    GraphExec exec;                       // empty until the shape is seen a second time
    float* logits = nullptr;              // where the graph leaves them
    std::vector<ScratchPool::Mark> ends;  // each pool's end after the step
  };
  static constexpr size_t kMaxGraphs = 64;

  std::map<Key, CapturedStep> graphs_;
  std::vector<uint64_t> pool_generations_;  // of the pools the graphs were captured with
  int64_t replays_ = 0;
};

}  // namespace deepinfer
