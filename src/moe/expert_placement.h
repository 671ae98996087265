// ExpertPlacement: where each logical expert of each MoE layer lives in an expert-parallel group. There are
// num_physical() slots per layer, slots_per_rank() on each EP rank (rank r owns slots [r*S, (r+1)*S)), and
// phy2log maps a slot to the logical expert whose weights it holds. A logical expert may have several slots
// (redundant replicas); a token's replica is chosen by a deterministic rule so every run routes alike.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "src/model/model_config.h"

namespace deepinfer {

class ExpertPlacement {
 public:
  // Slots spread evenly: S = ceil(E / ep_size) slots per rank, slot s holds expert s mod E. With more ranks
  // than experts every rank still gets a slot, and experts are replicated round-robin.
  // `min_slots` asks for redundant slots: S = ceil(max(E, min_slots) / ep_size).
  static ExpertPlacement make_default(int64_t num_layers, int64_t num_experts, int64_t ep_size, int64_t min_slots = 0);
  // From a plan file {"phy2log": [[...], ...]} (one row per MoE layer, as `deepinfer eplb plan` writes).
  // InputError if the rows do not fit the model or the EP group.
  static ExpertPlacement from_plan_file(const std::filesystem::path& path, int64_t num_layers, int64_t num_experts,
                                        int64_t ep_size);
  static ExpertPlacement from_phy2log(std::vector<std::vector<int32_t>> phy2log, int64_t num_experts, int64_t ep_size);

  int64_t num_layers() const { return static_cast<int64_t>(phy2log_.size()); }
  int64_t num_experts() const { return num_experts_; }
  int64_t ep_size() const { return ep_size_; }
  int64_t num_physical() const { return slots_per_rank_ * ep_size_; }
  int64_t slots_per_rank() const { return slots_per_rank_; }
  int owner_of_slot(int64_t slot) const { return static_cast<int>(slot / slots_per_rank_); }
  int32_t logical_of_slot(int64_t layer, int64_t slot) const { return phy2log_[layer][slot]; }
  const std::vector<std::vector<int32_t>>& phy2log() const { return phy2log_; }
  const std::vector<int32_t>& replicas(int64_t layer, int64_t expert) const { return log2phy_[layer][expert]; }
  // Whether `ep_rank` holds any replica of `expert` in any layer (which expert weights it must load).
  bool rank_holds(int ep_rank, int64_t layer, int64_t expert) const;

  // The slot that serves `expert` for the token at `token_idx` on source `src_rank`: a replica on the
  // source rank if there is one (no transfer), else replicas in turn by (src_rank + token_idx).
  int64_t pick_slot(int64_t layer, int64_t expert, int src_rank, int64_t token_idx) const;
  // Where token `token_idx` of `src_rank` sends its top_k entries `experts`: each entry's owning rank and its slot
  // there (pick_slot). The layout of a dispatch, shared by the real dispatcher and the rank slice.
  void place_entries(int64_t layer, const int32_t* experts, int64_t top_k, int src_rank, int64_t token_idx,
                     int32_t* owner, int32_t* local_slot) const;

 private:
  int64_t num_experts_ = 0;
  int64_t ep_size_ = 1;
  int64_t slots_per_rank_ = 1;
  std::vector<std::vector<int32_t>> phy2log_;               // [layer][slot]
  std::vector<std::vector<std::vector<int32_t>>> log2phy_;  // [layer][expert] -> slots
};

// The weights `ep_rank` loads under `placement`: every tensor but the routed experts, and of those only the ones
// its slots hold; the draft (MTP) layers' experts, past the main layers, are kept whole for speculative
// decoding. Tensor names are read through the architecture registry.
std::function<bool(const std::string& name)> weights_held_by(const ExpertPlacement& placement, int ep_rank,
                                                             const ModelConfig& config);

}  // namespace deepinfer
