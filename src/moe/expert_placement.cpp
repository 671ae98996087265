#include "src/moe/expert_placement.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "src/core/check.h"
#include "src/core/json_depth.h"
#include "src/core/files.h"
#include "src/model/architectures.h"

namespace deepinfer {

ExpertPlacement ExpertPlacement::make_default(int64_t num_layers, int64_t num_experts, int64_t ep_size,
                                              int64_t min_slots) {
  DI_CHECK(num_experts > 0 && ep_size > 0, "placement of {} experts on {} ranks", num_experts, ep_size);
  const int64_t slots_per_rank = (std::max(num_experts, min_slots) + ep_size - 1) / ep_size;
  std::vector<int32_t> row(slots_per_rank * ep_size);
  for (size_t s = 0; s < row.size(); ++s) row[s] = static_cast<int32_t>(s % num_experts);
  return from_phy2log(std::vector<std::vector<int32_t>>(num_layers, row), num_experts, ep_size);
}

ExpertPlacement ExpertPlacement::from_phy2log(std::vector<std::vector<int32_t>> phy2log, int64_t num_experts,
                                              int64_t ep_size) {
  ExpertPlacement p;
  p.num_experts_ = num_experts;
  p.ep_size_ = ep_size;
  const int64_t num_physical = phy2log.empty() ? ep_size : static_cast<int64_t>(phy2log[0].size());
  DI_INPUT_CHECK(num_physical >= num_experts, "placement has {} slots for {} experts: every expert needs one",
                 num_physical, num_experts);
  DI_INPUT_CHECK(num_physical % ep_size == 0, "placement has {} slots, not a multiple of the EP size {}",
                 num_physical, ep_size);
  p.slots_per_rank_ = num_physical / ep_size;
  p.log2phy_.resize(phy2log.size());
  for (size_t l = 0; l < phy2log.size(); ++l) {
    DI_INPUT_CHECK(static_cast<int64_t>(phy2log[l].size()) == num_physical,
                   "placement layer {} has {} slots, layer 0 has {}", l, phy2log[l].size(), num_physical);
    p.log2phy_[l].resize(num_experts);
    for (int64_t s = 0; s < num_physical; ++s) {
      const int32_t e = phy2log[l][s];
      DI_INPUT_CHECK(e >= 0 && e < num_experts, "placement layer {} slot {} names expert {} of {}", l, s, e, num_experts);
      p.log2phy_[l][e].push_back(static_cast<int32_t>(s));
    }
    for (int64_t e = 0; e < num_experts; ++e)
      DI_INPUT_CHECK(!p.log2phy_[l][e].empty(), "placement layer {} has no slot for expert {}", l, e);
  }
  p.phy2log_ = std::move(phy2log);
  return p;
}

std::function<bool(const std::string& name)> weights_held_by(const ExpertPlacement& placement, int ep_rank,
                                                             const ModelConfig& config) {
  const Architecture* arch = find_architecture(config.model_type);
  DI_CHECK(arch != nullptr && arch->routed_expert_of, "no expert naming for '{}'", config.model_type);
  // Captures by value: the filter runs again when dummy weights are generated on the GPU, after this returns.
  return [placement, ep_rank, naming = arch->routed_expert_of, num_layers = config.num_hidden_layers,
          first_moe = config.first_k_dense_replace](const std::string& name) {
    const std::optional<std::pair<int64_t, int64_t>> expert = naming(name);
    if (!expert || expert->first >= num_layers) return true;
    return placement.rank_holds(ep_rank, expert->first - first_moe, expert->second);
  };
}

ExpertPlacement ExpertPlacement::from_plan_file(const std::filesystem::path& path, int64_t num_layers,
                                                int64_t num_experts, int64_t ep_size) {
  const std::string text = read_text_file(path, "placement plan");
  check_json_file_depth(text, path.string());
  std::vector<std::vector<int32_t>> phy2log;
  try {
    phy2log = nlohmann::json::parse(text).at("phy2log").get<std::vector<std::vector<int32_t>>>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed placement plan: {}", path.string(), e.what()));
  }
  DI_INPUT_CHECK(static_cast<int64_t>(phy2log.size()) == num_layers, "{}: {} layers in the plan, the model has {} MoE layers",
                 path.string(), phy2log.size(), num_layers);
  return from_phy2log(std::move(phy2log), num_experts, ep_size);
}

bool ExpertPlacement::rank_holds(int ep_rank, int64_t layer, int64_t expert) const {
  for (int32_t slot : log2phy_[layer][expert])
    if (owner_of_slot(slot) == ep_rank) return true;
  return false;
}

int64_t ExpertPlacement::pick_slot(int64_t layer, int64_t expert, int src_rank, int64_t token_idx) const {
  const std::vector<int32_t>& slots = log2phy_[layer][expert];
  for (int32_t slot : slots)
    if (owner_of_slot(slot) == src_rank) return slot;
  return slots[static_cast<size_t>(src_rank + token_idx) % slots.size()];
}

void ExpertPlacement::place_entries(int64_t layer, const int32_t* experts, int64_t top_k, int src_rank,
                                    int64_t token_idx, int32_t* owner, int32_t* local_slot) const {
  for (int64_t k = 0; k < top_k; ++k) {
    const int64_t slot = pick_slot(layer, experts[k], src_rank, token_idx);
    owner[k] = owner_of_slot(slot);
    local_slot[k] = static_cast<int32_t>(slot % slots_per_rank_);
  }
}

}  // namespace deepinfer
