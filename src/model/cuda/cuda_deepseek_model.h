// The DeepSeek V2/V3 forward pass on one GPU: bf16 weights and activations, fp32 accumulation, the kernels of
// kernels/cuda and cuBLAS. Same function as the CPU reference (DeepseekModel), checked against it.
// Prefill chunks use the expanded attention, decode steps the absorbed form on the paged latent cache.
// Routed experts run on the device: a few tokens as matrix-vector kernels straight from the routing; decode
// batches as permute, the device-offset grouped kernels (each expert's weights streamed once), unpermute;
// prefill as permute, cuBLAS GEMMs batched over 256-row chunks of each expert's rows, unpermute. With expert
// parallelism the rows go GPU to GPU through the dispatcher's device path (NCCL), or are staged through host
// memory (MPI transport); without expert parallelism the shared experts run on a side stream meanwhile. Decode
// steps replay CUDA graphs (run_to_logits).
#pragma once

#include <compare>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "src/core/device_array.h"
#include "src/model/causal_lm.h"
#include "src/model/deepseek_layers.h"
#include "src/model/cuda/cuda_expert_store.h"
#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/device_memory.h"
#include "src/model/cuda/step_profiler.h"
#include "src/model/cuda/weight_source.h"
#include "src/model/weights.h"

namespace deepinfer {

class CudaDeepseekModel final : public CausalLm {
 public:
  // Fills the weights on `device` (which becomes the current device) from `weights`.
  CudaDeepseekModel(ModelConfig config, const DeviceWeightSource& weights, int device);

  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override;
  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts = nullptr) const override;
  bool samples_on_device() const override { return true; }
  std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                          std::span<const SamplingRow> rows) const override;
  ExpertStore& experts() override { return *experts_; }
  const ExpertStore& experts() const override { return *experts_; }
  size_t kv_cache_bytes_per_token() const override { return config_.num_hidden_layers * config_.kv_entry_dim() * 2; }
  // Off: every step runs eagerly (no CUDA graph capture or replay).
  void set_cuda_graphs(bool enabled) { graphs_enabled_ = enabled; }
  double device_idle_before_last_step_ms() const override { return idle_ms_; }

 private:
  using Bf16 = __nv_bfloat16;
  using Mlp = DeviceMlp;
  struct Attention {
    const Bf16* q_a = nullptr;
    const Bf16* q_a_norm = nullptr;
    const Bf16* q_b = nullptr;
    const Bf16* q = nullptr;
    const Bf16* kv_a = nullptr;
    const Bf16* kv_a_norm = nullptr;
    const Bf16* kv_b = nullptr;
    const Bf16* o = nullptr;
  };
  struct Moe {
    const Bf16* router = nullptr;
    const float* correction_bias = nullptr;
    const Bf16* experts_gate_up = nullptr;  // [E, 2 * inter, hidden], in the expert store
    const Bf16* experts_down = nullptr;     // [E, hidden, inter]
    Mlp shared;
    bool has_shared = false;
  };
  using Layer = DeepseekLayerWeights<Bf16, Attention, Mlp, Moe>;
  struct StepPlan;  // host-side indices of one forward step, uploaded once (cuda_deepseek_model.cpp)
  // Up to this many (token, expert) pairs the routed experts run as matrix-vector products (moe_gemv.cuh), which
  // measured faster there than the grouped kernels (results/h200/design-measurements.md).
  static constexpr int64_t kGemvMaxPairs = 64;
  // Below this many pairs the permuted rows run through the device-offset grouped kernels (moe_grouped.cuh):
  // no host round trip, so such steps are graphed too. From it (prefill) each expert's rows are padded to
  // 256-row chunks and every projection is one batched cuBLAS GEMM of uniform chunks.
  static constexpr int64_t kGroupedMaxPairs = 4096;
  static constexpr int64_t kExpertChunk = 256;
  // Whether the routed experts of `pairs` (token, expert) pairs run without reading anything back to the host.
  bool experts_stay_on_device(int64_t pairs) const;

  // The step up to its fp32 logits [rows, vocab] on the device (in the step's scratch); decode steps below
  // kGroupedMaxPairs (token, expert) pairs replay a captured CUDA graph.
  float* run_to_logits(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts, int64_t* rows) const;
  // KV splits of the decode attention for this many sequences, the longest `max_len` tokens.
  int64_t decode_splits(int64_t num_tokens, int64_t max_len) const;

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
  // A decode step's shape: what the captured graph baked in.
  struct GraphKey {
    int64_t tokens, max_blocks, rows;
    const void* cache;
    int64_t splits;
    auto operator<=>(const GraphKey&) const = default;
  };
  struct CapturedStep {
    GraphExec exec;           // empty until the shape is seen a second time
    float* logits = nullptr;  // where the graph leaves them
    ScratchPool::Mark end{};  // the scratch the graph's buffers occupy
  };
  static constexpr size_t kMaxGraphs = 64;

  Bf16* upload(const DeviceWeightSource& weights, const std::string& name);
  Mlp upload_mlp(const DeviceWeightSource& weights, const std::string& prefix, int64_t inter);

  void attention(int64_t layer_idx, const Attention& w, const StepPlan& plan, Bf16* cache_layer, const Bf16* h,
                 Bf16* out, ScratchPool& scratch) const;
  // y[m, n] = x[m, k] . w[n, k]^T (y bf16 or fp32) on the model's stream (device_linear).
  void linear(const Bf16* x, const Bf16* w, void* y, bool y_fp32, int64_t m, int64_t n, int64_t k) const;
  // The model's stream (the per-thread default); the shared experts may run on the side stream instead.
  Lane main_lane() const { return {cudaStreamPerThread, cublas_.get()}; }
  // What comes after a sub-layer: its output added to the residual stream, which is normalised with `weight`
  // into `normed` (the next layer's input norm, or the final one).
  struct ResidualNorm {
    Bf16* residual;
    const Bf16* weight;
    Bf16* normed;
  };
  // Returns whether it also did `then` (its last kernel can, on the decode path); if not, `out` holds the output.
  bool moe(int64_t moe_layer_idx, const Moe& w, const Bf16* h, Bf16* out, int64_t rows,
           ExpertDispatcher* dispatcher, ScratchPool& scratch, const ResidualNorm& then) const;
  // out[t] += sum_k weights[t, k] * expert_{ids[t, k]}(x[t]) over this rank's experts; ids in [0, num_ids), and
  // ids >= n_routed_experts are entries to leave out (num_ids = n_routed_experts + 1 for expert parallelism).
  // out_ready (optional): an event after which `out` may be added to (the shared expert writes it on the side
  // stream); everything before the final combine runs without waiting for it. With `then`, where the final
  // combine can (returned), it does `then` instead of storing out.
  bool routed_experts(const Moe& w, const Bf16* x, const int32_t* ids, const float* weights, int64_t rows,
                      int64_t num_ids, Bf16* out, ScratchPool& scratch, cudaEvent_t out_ready = nullptr,
                      const ResidualNorm* then = nullptr) const;

  ModelConfig config_;
  std::map<std::string, Shape> shapes_;  // every tensor the architecture names
  DeviceSelection device_;  // first CUDA member: the ones below are created on this device
  int num_sms_ = 0;  // the device's multiprocessors (decode attention splits)
  DeviceArena arena_;
  CublasHandle cublas_;
  // The shared experts run here, beside the router and the routed experts (they need only the layer input).
  CudaStream side_stream_;
  CublasHandle side_cublas_{side_stream_.get()};
  CudaEvent shared_start_, shared_done_;
  std::unique_ptr<CudaExpertStore> experts_;
  std::vector<Layer> layers_;
  const Bf16* embed_ = nullptr;
  const Bf16* final_norm_ = nullptr;
  const Bf16* lm_head_ = nullptr;
  DeviceArray<float> inv_freq_;
  // The grouped expert kernel's counters (moe_grouped.cuh): zeroed here, left zeroed by every launch.
  mutable DeviceArray<int32_t> expert_sync_;
  float attention_factor_ = 1.0f;
  // Step buffers, reused across steps. forward() is const but not reentrant: one step at a time per model.
  mutable ScratchPool scratch_;
  mutable StepProfiler profiler_;
  mutable std::map<GraphKey, CapturedStep> graphs_;
  bool graphs_enabled_ = true;
  // The gap on the device between steps: an event where a step's work starts, and one where each step's work
  // ends (two, alternating, so the previous step's stays readable); measured once the step's results are back.
  void record_step_end() const;
  void measure_idle() const;
  mutable CudaEvent step_start_;
  mutable CudaEvent step_end_[2];
  mutable int end_slot_ = 0;
  mutable bool have_previous_end_ = false;
  mutable double idle_ms_ = -1.0;
};

}  // namespace deepinfer
