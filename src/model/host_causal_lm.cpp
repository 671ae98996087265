#include "src/model/host_causal_lm.h"

namespace deepinfer {

namespace {
ExpertStore::Dims routed_expert_dims(const ModelConfig& c) {
  return {c.num_hidden_layers - c.first_k_dense_replace, c.n_routed_experts, c.hidden_size, c.moe_intermediate_size};
}
}  // namespace

HostCausalLm::HostCausalLm(ModelConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)),
      experts_(routed_expert_dims(config_), static_cast<float>(config_.swiglu_limit)) {}

void HostCausalLm::set_cache_entry(int64_t latent_floats, int64_t rope_floats) {
  cache_latent_ = latent_floats;
  cache_rope_ = rope_floats;
}

std::unique_ptr<KvCache> HostCausalLm::make_kv_cache(int64_t num_blocks) const {
  return std::make_unique<MlaKvCache>(cache_layers(), num_blocks, cache_latent_, cache_rope_);
}

size_t HostCausalLm::kv_cache_bytes_per_token() const {
  return static_cast<size_t>(cache_layers() * (cache_latent_ + cache_rope_)) * sizeof(float);
}

MlaKvCache& HostCausalLm::host_cache(KvCache& cache) const {
  auto* host = dynamic_cast<MlaKvCache*>(&cache);
  DI_CHECK(host != nullptr && host->entry_dim() == cache_latent_ + cache_rope_ &&
               host->num_layers() == cache_layers(),
           "the CPU model needs the host cache it made (make_kv_cache)");
  return *host;
}

}  // namespace deepinfer
