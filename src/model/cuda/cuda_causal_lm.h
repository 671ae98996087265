// What the CUDA models (CudaDeepseekModel, CudaV41Model) share, as HostCausalLm is for the CPU models: the device and
// its arena, cuBLAS, the routed experts and their MoE, the step's scratch pool, the profiler, the decode graphs, the
// idle meter, the sampler of overlapped steps and the draft chain; and the four ways of calling a step (forward,
// forward_and_sample, start_/finish_forward_and_sample), written once over the model's run_to_logits.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/model/causal_lm.h"
#include "src/model/cuda/cuda_expert_store.h"
#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/cuda_moe.h"
#include "src/model/cuda/decode_graphs.h"
#include "src/model/cuda/device_idle.h"
#include "src/model/cuda/device_memory.h"
#include "src/model/cuda/device_sampling.h"
#include "src/model/cuda/draft_chain.h"
#include "src/model/cuda/step_profiler.h"
#include "src/model/cuda/weight_source.h"

namespace deepinfer {

class CudaCausalLm : public CausalLm, public DeviceSteps {
 public:
  const ModelConfig& config() const override { return config_; }
  ExpertStore& experts() override { return *experts_; }
  const ExpertStore& experts() const override { return *experts_; }

  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts = nullptr) const final;
  const DeviceSteps* device_steps() const final { return this; }
  using CausalLm::device_steps;

  std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                          std::span<const SamplingRow> rows, const TokenMasks* masks,
                                          uint64_t* logits_hashes) const final;
  bool samples_async() const override { return true; }
  void start_forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                std::span<const SamplingRow> rows, bool logits_hashes) const final;
  std::vector<int32_t> finish_forward_and_sample(uint64_t* logits_hashes) const final;

  // Off: every step runs eagerly (no CUDA graph capture or replay).
  void set_cuda_graphs(bool enabled) final { graphs_enabled_ = enabled; }
  int64_t graph_replays() const final { return graphs_.replays(); }
  DeviceIdle device_idle() const final { return idle_.totals(); }

 protected:
  using Bf16 = __nv_bfloat16;
  // Makes `device` current and reads the shapes of every tensor the architecture names.
  CudaCausalLm(ModelConfig config, int device);

  // The step up to its fp32 logits [rows, vocab] on the device, in the step's pools; `rows` set to their count.
  // It calls begin_device_work once its uploads are queued.
  virtual float* run_to_logits(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                               int64_t* rows) const = 0;
  // The pool whose buffers last the whole step (the chain reads the step's tokens from it after the step).
  virtual ScratchPool& step_pool() const { return scratch_; }

  // Where a step's device work starts (its uploads queued before, asynchronously): the idle meter's mark, then the
  // inputs the step owes to the step in flight (overlapped scheduling) and to a chained draft, into `token_ids`.
  void begin_device_work(const ForwardBatch& batch, int32_t* token_ids, ScratchPool& pool) const;
  // Whether a step of decode shape may replay a CUDA graph: graphs on, experts that need no host round trip (no
  // dispatcher, and `routed_pairs` (token, expert) pairs the MoE keeps on the device), no profiler marks.
  bool may_graph(ExpertDispatcher* experts, int64_t routed_pairs) const;

  // A weight of the architecture's shape, bf16 or fp32, in the arena.
  Bf16* upload(const DeviceWeightSource& weights, const std::string& name);
  float* upload_f32(const DeviceWeightSource& weights, const std::string& name);
  // A Linear's weight from the tensors `names` stacked by rows ([their rows, k]) in the arena: FP8 e4m3 codes with
  // fp32 scales a fp8_block x fp8_block tile (DeepSeek-V3's form, as the checkpoint stores them) where fp8_block > 0,
  // every part is stored so (dummy weights: where the config's quantization says) and each part but the last fills
  // whole tiles (their scale rows then stack too); bf16 otherwise.
  DeviceLinear upload_linear(const DeviceWeightSource& weights, const std::vector<std::string>& names,
                             int64_t fp8_block);
  // y[m, n] = x[m, k] . w[n, k]^T (y bf16 or fp32) on the model's stream (device_linear).
  void linear(const Bf16* x, const Bf16* w, void* y, bool y_fp32, int64_t m, int64_t n, int64_t k) const;
  // The same with a DeviceLinear (bf16 or FP8), its temporaries (an FP8 weight dequantised for many rows) from
  // `scratch`.
  void linear(const Bf16* x, const DeviceLinear& w, void* y, bool y_fp32, int64_t m, ScratchPool& scratch) const;
  // The model's stream (the per-thread default).
  Lane main_lane() const { return {cudaStreamPerThread, cublas_.get(), config_.batch_invariant, fp8_gemm_}; }

  ModelConfig config_;
  std::map<std::string, Shape> shapes_;  // every tensor the architecture names
  DeviceSelection device_;               // first CUDA member: the ones below are created on this device
  int num_sms_ = 0;                      // the device's multiprocessors
  DeviceArena arena_;
  CublasHandle cublas_;
  const Fp8Gemm fp8_gemm_ = fp8_gemm_from_environment();  // the lanes' FP8 GEMM (Lane::fp8_gemm)
  std::unique_ptr<CudaExpertStore> experts_;
  std::unique_ptr<CudaMoe> moe_;
  // Step buffers, reused across steps. A step is const but not reentrant: one step at a time per model.
  mutable ScratchPool scratch_;
  mutable StepProfiler profiler_;
  mutable DecodeGraphs graphs_;
  bool graphs_enabled_ = true;
  mutable DeviceIdleMeter idle_;     // the device's idle time between steps
  mutable DeviceSampler sampler_;    // overlapped scheduling's started steps
  mutable DraftChain chain_;         // drafts chained behind their verify steps (draft_chain.h)
  mutable const int32_t* step_token_ids_ = nullptr;  // the last step's input tokens on the device
};

}  // namespace deepinfer
