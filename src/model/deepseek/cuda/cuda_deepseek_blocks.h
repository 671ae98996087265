// The CUDA blocks of the V2/V3 layer loop (deepseek_layers.h), which CudaDeepseekModel::run_to_logits instantiates
// with them: device work on this thread's stream over the step's plan (cuda_deepseek_step.h), whose inputs were
// uploaded before. The MoE's last kernel may add its output into x and apply the next norm (one launch less a MoE
// layer); the loop then skips that norm.
#pragma once

#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "src/model/cuda/cuda_kv_cache.h"
#include "src/model/deepseek/cuda/cuda_deepseek_model.h"
#include "src/model/deepseek/cuda/cuda_deepseek_step.h"
#include "src/model/deepseek/deepseek_layers.h"

namespace deepinfer {

struct CudaDeepseekModel::CudaBlocks {
  const CudaDeepseekModel& model;
  const StepPlan& plan;
  CudaMlaKvCache& cache;
  ExpertDispatcher* experts;
  ScratchPool& scratch;
  const int32_t* token_ids;
  const int32_t* row_ids;
  Bf16* kept_hidden;  // null: not wanted
  int64_t T, H, R;
  Bf16* x = nullptr;      // the residual stream
  Bf16* h = nullptr;      // its normalised copy
  Bf16* delta = nullptr;  // a sub-layer's output
  ScratchPool::Mark step_buffers{};

  const ModelConfig& c() const { return model.config_; }
  const Bf16* norm_of(NormSite site) const {
    if (site.kind == NormSite::kFinal) return model.final_norm_;
    const Layer& layer = model.layers_[site.layer];
    return site.kind == NormSite::kInput ? layer.input_norm : layer.post_attention_norm;
  }
  void embed() {
    x = scratch.alloc<Bf16>(T * H);
    h = scratch.alloc<Bf16>(T * H);
    delta = scratch.alloc<Bf16>(T * H);
    model.profiler_.mark("start");
    cuda::embedding(model.embed_, token_ids, x, T, H, nullptr);
    model.profiler_.mark("host plan+embedding");
    step_buffers = scratch.mark();
  }
  // Stream order: the previous layer's kernels that read these buffers are queued first.
  void begin_layer(int64_t) { scratch.rewind(step_buffers); }
  void add_norm(bool add_delta, NormSite site) {
    const bool add = add_delta && (site.kind != NormSite::kFinal || T > 0);
    cuda::add_rms_norm(add ? delta : nullptr, x, norm_of(site), h, T, H, c().rms_norm_eps, nullptr);
    if (site.kind == NormSite::kPostAttention) model.profiler_.mark("norms");
  }
  void attention(int64_t l) {
    model.attention(l, model.layers_[l].attention, plan, static_cast<Bf16*>(cache.layer_data(l)), h, delta, scratch);
  }
  bool moe(int64_t l, NormSite next) {
    const ResidualNorm then{x, norm_of(next), h};
    const bool fused =
        model.moe_->run(l - c().first_k_dense_replace, model.layers_[l].moe, h, delta, T, experts, scratch, &then);
    model.profiler_.mark("moe:after");
    return fused;
  }
  void mlp(int64_t l) {
    device_mlp(model.main_lane(), model.layers_[l].mlp, h, delta, T, H, scratch, model.num_sms_);
    model.profiler_.mark("dense mlp");
  }
  float* head() {
    if (kept_hidden != nullptr && T > 0)
      DI_CUDA_CHECK(cudaMemcpyAsync(kept_hidden, h, T * H * sizeof(Bf16), cudaMemcpyDeviceToDevice,
                                    cudaStreamPerThread));
    auto* selected = scratch.alloc<Bf16>(R * H);
    cuda::embedding(h, row_ids, selected, R, H, nullptr);  // a row gather
    auto* logits = scratch.alloc<float>(R * c().vocab_size);
    model.linear(selected, model.lm_head_, logits, true, R, c().vocab_size, H);
    model.profiler_.mark("final norm+lm head");
    return logits;
  }
};

}  // namespace deepinfer
