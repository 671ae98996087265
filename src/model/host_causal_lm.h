// What the CPU models (DeepseekModel, DeepseekV41Model) share: the config, the fp32 weights, the routed
// experts (a HostExpertStore, taken out of the weights at load), and a host cache in the MLA layout with a
// model-chosen entry (latent floats + rope floats per token and layer).
#pragma once

#include <memory>

#include "src/model/causal_lm.h"
#include "src/model/host_expert_store.h"
#include "src/model/deepseek/mla_kv_cache.h"
#include "src/model/weights.h"

namespace deepinfer {

class HostCausalLm : public CausalLm {
 public:
  const ModelConfig& config() const override { return config_; }
  ExpertStore& experts() override { return experts_; }
  const ExpertStore& experts() const override { return experts_; }
  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override;
  size_t kv_cache_bytes_per_token() const override;

 protected:
  HostCausalLm(ModelConfig config, WeightStore weights);
  // The cache entry the model's layers store per token (set once the model knows it).
  void set_cache_entry(int64_t latent_floats, int64_t rope_floats);
  // `cache` as this model's host cache; an error where a cache of another backend or shape is passed.
  MlaKvCache& host_cache(KvCache& cache) const;

  // Cache layers past the model's own (the MTP module's, once enabled).
  void add_cache_layers(int64_t n) { extra_cache_layers_ += n; }
  int64_t cache_layers() const { return config_.num_hidden_layers + extra_cache_layers_; }

  ModelConfig config_;
  WeightStore weights_;
  HostExpertStore experts_;

 private:
  int64_t cache_latent_ = 0, cache_rope_ = 0;
  int64_t extra_cache_layers_ = 0;
};

}  // namespace deepinfer
