#include "src/model/cuda/decode_graphs.h"

#include <spdlog/spdlog.h>

#include "src/core/check.h"

namespace deepinfer {

float* DecodeGraphs::run(const Key& key, const std::function<float*()>& step,
                         std::initializer_list<ScratchPool*> pools) {
  // A pool that replaced its chunks (ScratchPool::reset) has moved the buffers every graph baked in.
  std::vector<uint64_t> generations;
  for (const ScratchPool* pool : pools) generations.push_back(pool->generation());
  if (generations != pool_generations_) graphs_.clear(), pool_generations_ = std::move(generations);
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) graphs_.clear();
    graphs_.emplace(key, CapturedStep{});  // seen once: run eagerly, capture next time
    return step();
  }
  CapturedStep& captured = found->second;
  if (!captured.exec) {
    DI_CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed));
    cudaGraph_t graph = nullptr;
    try {
      captured.logits = step();
    } catch (...) {  // leave the stream out of capture mode, and this shape uncaptured
      if (cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
      graphs_.erase(found);
      throw;
    }
    DI_CUDA_CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph));
    size_t nodes = 0;
    DI_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    captured.exec = GraphExec(graph);
    captured.ends.clear();
    for (const ScratchPool* pool : pools) captured.ends.push_back(pool->mark());
    spdlog::debug("captured the decode step of {} sequences ({} KV blocks each at most): {} graph nodes",
                  key.tokens, key.max_blocks, nodes);
  } else {
    size_t i = 0;  // what the graph's buffers occupy stays taken for the rest of the step
    for (ScratchPool* pool : pools) pool->rewind(captured.ends[i++]);
  }
  DI_CUDA_CHECK(cudaGraphLaunch(captured.exec.get(), cudaStreamPerThread));
  ++replays_;
  return captured.logits;
}

DecodeGraphs::GraphExec::GraphExec(cudaGraph_t graph) {
  DI_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0));
  cudaGraphDestroy(graph);
}

DecodeGraphs::GraphExec::~GraphExec() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

}  // namespace deepinfer
