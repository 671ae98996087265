// A deployment: how many ranks play each role and how each role's ranks form expert-parallel groups.
// Read from a TOML file (configs/deploy/*.toml); the schema is documented in configs/deploy/README.md.
// Ranks are laid out by role in file order: prefill ranks [0, P), decode ranks [P, P + D).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace deepinfer {

enum class Role { kPrefill, kDecode, kColocated };

std::string_view role_name(Role role);

struct RoleSpec {
  Role role = Role::kColocated;
  int num_ranks = 0;
  int ep_size = 0;               // ranks per expert-parallel group; divides num_ranks
  int chunk_tokens = 4096;       // prefill chunk per step (prefill and colocated roles)
  int max_running = 256;         // concurrent sequences per rank (decode and colocated roles)
  int eplb_interval = 0;         // steps between expert rebalances; 0: never
  int redundant_experts = 0;     // extra expert slots per MoE layer in each EP group

  int num_ep_groups() const { return num_ranks / ep_size; }
};

struct Deployment {
  std::string name;
  std::vector<RoleSpec> roles;  // {prefill, decode} or {colocated}

  int world_size() const;
  const RoleSpec* find(Role role) const;

  // Throws InputError naming the file and the offending key or value.
  static Deployment from_toml_file(const std::filesystem::path& path);
  // One colocated rank (EP 1): what `generate` runs without --deploy.
  static Deployment single_rank(int chunk_tokens, int max_running);
  static Deployment from_toml_string(std::string_view text, std::string_view source_name);
};

// Where one global rank sits in a deployment. Pure arithmetic, no MPI.
struct RankPlacement {
  Role role = Role::kColocated;
  int role_spec_idx = 0;  // index into Deployment::roles
  int rank_in_role = 0;
  int ep_group_idx = 0;
  int rank_in_ep_group = 0;
};

RankPlacement place_rank(const Deployment& deployment, int world_rank);

}  // namespace deepinfer
