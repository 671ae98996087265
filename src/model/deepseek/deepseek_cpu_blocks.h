// The CPU blocks of the V2/V3 layer loop (deepseek_layers.h), which DeepseekModel::run instantiates with them: fp32
// activations, the model's weights, the host cache. The final norm is left to the head, which normalises only the
// rows whose logits are wanted.
#pragma once

#include <vector>

#include "kernels/cpu/ops.h"
#include "src/model/deepseek/deepseek_layers.h"
#include "src/model/deepseek/deepseek_model.h"

namespace deepinfer {

struct DeepseekModel::CpuBlocks {
  const DeepseekModel& model;
  const ForwardBatch& batch;
  const int32_t* positions;
  const float* cos;
  const float* sin;
  MlaKvCache& cache;
  ExpertDispatcher* dispatcher;
  Tensor* hidden;  // every row's final-normed hidden state, where asked for
  int64_t T, H;
  std::vector<float> x = std::vector<float>(T * H), h = std::vector<float>(T * H), delta = std::vector<float>(T * H);

  const ModelConfig& c() const { return model.config_; }
  void embed() { cpu::embedding(model.embed_, batch.token_ids.data(), x.data(), T, H); }
  void begin_layer(int64_t) {}
  void add_norm(bool add_delta, NormSite site) {
    if (add_delta) cpu::axpy(1.0f, delta.data(), x.data(), T * H);
    if (site.kind == NormSite::kFinal) return;
    const DeepseekModel::Layer& layer = model.layers_[site.layer];
    const float* w = site.kind == NormSite::kInput ? layer.input_norm : layer.post_attention_norm;
    cpu::rms_norm(x.data(), w, h.data(), T, H, c().rms_norm_eps);
  }
  void attention(int64_t l) {
    model.attention(l, model.layers_[l].attention, batch, positions, cos, sin, h.data(), delta.data(), cache);
  }
  bool moe(int64_t l, NormSite) {
    model.moe(model.experts_, l - c().first_k_dense_replace, model.layers_[l].moe, h.data(), delta.data(), T,
              dispatcher);
    return false;
  }
  void mlp(int64_t l) { model.dense_mlp(model.layers_[l].mlp, h.data(), delta.data(), T); }
  Tensor head() {
    if (hidden != nullptr) {
      *hidden = Tensor::zeros({T, H});
      cpu::rms_norm(x.data(), model.final_norm_, hidden->data<float>(), T, H, c().rms_norm_eps);
    }
    return cpu_final_logits(batch, x.data(), model.final_norm_, model.lm_head_, H, c().vocab_size, c().rms_norm_eps);
  }
};

}  // namespace deepinfer
