#include "src/model/cuda/cuda_causal_lm.h"

#include <fmt/format.h>

#include "src/model/architectures.h"

namespace deepinfer {

CudaCausalLm::CudaCausalLm(ModelConfig config, int device) : config_(std::move(config)), device_(device) {
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_.id()));
  for (const TensorSpec& spec : find_architecture(config_.model_type)->tensor_specs(config_))
    shapes_[spec.name] = spec.shape;
}

Tensor CudaCausalLm::forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts) const {
  int64_t rows = 0;
  const float* logits = run_to_logits(batch, cache, experts, &rows);
  Tensor out = Tensor::zeros({rows, config_.vocab_size});
  DI_CUDA_CHECK(cudaGetLastError());
  idle_.record_end();
  DI_CUDA_CHECK(cudaMemcpy(out.data<float>(), logits, out.nbytes(), cudaMemcpyDeviceToHost));
  idle_.measure();
  profiler_.mark("logits to host");
  profiler_.report(fmt::format("{}: {} tokens, {} sequences", config_.model_type, batch.num_tokens(),
                               batch.sequences.size()));
  return out;
}

std::vector<int32_t> CudaCausalLm::forward_and_sample(const ForwardBatch& batch, KvCache& cache,
                                                      ExpertDispatcher* experts, std::span<const SamplingRow> rows,
                                                      const TokenMasks* masks, uint64_t* logits_hashes) const {
  int64_t num_rows = 0;
  float* logits = run_to_logits(batch, cache, experts, &num_rows);
  std::vector<int32_t> tokens = sample_on_device(logits, num_rows, config_.vocab_size, rows, masks, logits_hashes,
                                                 scratch_, idle_.end_event());
  idle_.measure();
  if (num_rows == 0) return tokens;
  profiler_.mark("sample");
  profiler_.report(fmt::format("{}: {} tokens, {} sequences", config_.model_type, batch.num_tokens(),
                               batch.sequences.size()));
  return tokens;
}

void CudaCausalLm::start_forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                            std::span<const SamplingRow> rows, bool logits_hashes) const {
  DI_CHECK(samples_async(), "this {} model cannot start a step before its inputs reach the host "
           "(DeviceSteps::samples_async)", config_.model_type);
  int64_t num_rows = 0;
  float* logits = run_to_logits(batch, cache, experts, &num_rows);
  sampler_.start(logits, num_rows, config_.vocab_size, rows, logits_hashes, scratch_, idle_.end_event());
  const DraftModule* drafter = draft_module();
  if (batch.speculative_verify && drafter != nullptr && drafter->chains_drafts())
    chain_.accept(batch, step_token_ids_, sampler_.started_tokens(), step_pool());
}

std::vector<int32_t> CudaCausalLm::finish_forward_and_sample(uint64_t* logits_hashes) const {
  std::vector<int32_t> tokens = sampler_.finish(logits_hashes);
  idle_.measure();
  return tokens;
}

void CudaCausalLm::begin_device_work(const ForwardBatch& batch, int32_t* token_ids, ScratchPool& pool) const {
  idle_.record_start();
  sampler_.fill_inputs(token_ids, batch.tokens_from_previous_step, pool);
  chain_.fill_inputs(token_ids, batch.tokens_from_draft, pool);
  step_token_ids_ = token_ids;
}

bool CudaCausalLm::may_graph(ExpertDispatcher* experts, int64_t routed_pairs) const {
  return graphs_enabled_ && experts == nullptr && !profiler_.enabled() &&
         (routed_pairs == 0 || moe_->experts_stay_on_device(routed_pairs));
}

CudaCausalLm::Bf16* CudaCausalLm::upload(const DeviceWeightSource& weights, const std::string& name) {
  const Shape& shape = shapes_.at(name);
  auto* dst = static_cast<Bf16*>(arena_.take(shape_numel(shape) * sizeof(Bf16)));
  weights.fill_bf16(name, shape, dst);
  return dst;
}

float* CudaCausalLm::upload_f32(const DeviceWeightSource& weights, const std::string& name) {
  const Shape& shape = shapes_.at(name);
  auto* dst = static_cast<float*>(arena_.take(shape_numel(shape) * sizeof(float)));
  weights.fill_f32(name, shape, dst);
  return dst;
}

DeviceLinear CudaCausalLm::upload_linear(const DeviceWeightSource& weights, const std::vector<std::string>& names,
                                         int64_t fp8_block) {
  DeviceLinear w;
  w.k = shapes_.at(names.front())[1];
  bool fp8 = fp8_block > 0 && w.k % 16 == 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t rows = shapes_.at(names[i])[0];
    fp8 = fp8 && weights.stored_fp8(names[i]).value_or(config_.quantization.fp8) &&
          (i + 1 == names.size() || rows % fp8_block == 0);
    w.n += rows;
  }
  int64_t row = 0;
  if (!fp8) {
    auto* bf16 = static_cast<Bf16*>(arena_.take(w.n * w.k * sizeof(Bf16)));
    for (const std::string& name : names) {
      weights.fill_bf16(name, shapes_.at(name), bf16 + row * w.k);
      row += shapes_.at(name)[0];
    }
    w.bf16 = bf16;
    return w;
  }
  const cuda::Fp8BlockScales grid{nullptr, true, static_cast<int32_t>(fp8_block)};
  auto* codes = static_cast<uint8_t*>(arena_.take(w.n * w.k));
  auto* scales = static_cast<float*>(arena_.take(grid.bytes(w.n, w.k)));
  for (const std::string& name : names) {
    weights.fill_fp8(name, shapes_.at(name), fp8_block, codes + row * w.k,
                     scales + row / fp8_block * grid.per_row(w.k));
    row += shapes_.at(name)[0];
  }
  w.fp8 = codes;
  w.scales = cuda::Fp8BlockScales::fp32(scales, static_cast<int32_t>(fp8_block));
  return w;
}

void CudaCausalLm::linear(const Bf16* x, const Bf16* w, void* y, bool y_fp32, int64_t m, int64_t n,
                          int64_t k) const {
  device_linear(main_lane(), x, w, y, y_fp32, m, n, k, num_sms_);
}

void CudaCausalLm::linear(const Bf16* x, const DeviceLinear& w, void* y, bool y_fp32, int64_t m,
                          ScratchPool& scratch) const {
  device_linear(main_lane(), x, w, y, y_fp32, m, scratch, num_sms_);
}

}  // namespace deepinfer
