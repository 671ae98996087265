#include "src/comm/deployment.h"

#include <toml++/toml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "src/core/check.h"
#include "src/core/files.h"

namespace deepinfer {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
    case Role::kColocated: return "colocated";
  }
  return "?";
}

int Deployment::world_size() const {
  int total = 0;
  for (const RoleSpec& spec : roles) total += spec.num_ranks;
  return total;
}

const RoleSpec* Deployment::find(Role role) const {
  for (const RoleSpec& spec : roles)
    if (spec.role == role) return &spec;
  return nullptr;
}

namespace {

int read_positive_int(const toml::table& table, std::string_view key, std::string_view where,
                      std::optional<int> fallback) {
  const toml::node* node = table.get(key);
  if (node == nullptr) {
    DI_INPUT_CHECK(fallback.has_value(), "{}: missing key '{}'", where, key);
    return *fallback;
  }
  auto value = node->value<int64_t>();
  DI_INPUT_CHECK(value.has_value() && node->is_integer(), "{}: key '{}' must be an integer", where, key);
  DI_INPUT_CHECK(*value > 0 && *value <= (1 << 24), "{}: key '{}' = {} is out of range (1..{})", where,
                 key, *value, 1 << 24);
  return static_cast<int>(*value);
}

int read_non_negative_int(const toml::table& table, std::string_view key, std::string_view where) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return 0;
  auto value = node->value<int64_t>();
  DI_INPUT_CHECK(value.has_value() && node->is_integer(), "{}: key '{}' must be an integer", where, key);
  DI_INPUT_CHECK(*value >= 0 && *value <= (1 << 24), "{}: key '{}' = {} is out of range (0..{})", where, key, *value,
                 1 << 24);
  return static_cast<int>(*value);
}

RoleSpec read_role(const toml::table& table, Role role, std::string_view source) {
  const std::string where = fmt::format("{} [{}]", source, role_name(role));
  static const std::set<std::string_view> kKeys = {"ranks", "ep_size", "chunk_tokens", "max_running",
                                                   "eplb_interval", "redundant_experts"};
  for (const auto& [key, node] : table) {
    DI_INPUT_CHECK(key.str() != "max_requests", "{}: 'max_requests' is now 'max_running' (the same name as "
                   "--max-running)", where);
    DI_INPUT_CHECK(kKeys.contains(key.str()), "{}: unknown key '{}' (known: ranks, ep_size, chunk_tokens, "
                   "max_running, eplb_interval, redundant_experts)", where, key.str());
  }
  RoleSpec spec;
  spec.role = role;
  spec.num_ranks = read_positive_int(table, "ranks", where, std::nullopt);
  spec.ep_size = read_positive_int(table, "ep_size", where, spec.num_ranks);
  spec.chunk_tokens = read_positive_int(table, "chunk_tokens", where, spec.chunk_tokens);
  spec.max_running = read_positive_int(table, "max_running", where, spec.max_running);
  spec.eplb_interval = read_non_negative_int(table, "eplb_interval", where);
  spec.redundant_experts = read_non_negative_int(table, "redundant_experts", where);
  DI_INPUT_CHECK(spec.num_ranks % spec.ep_size == 0,
                 "{}: impossible layout: ep_size {} does not divide ranks {}", where, spec.ep_size,
                 spec.num_ranks);
  return spec;
}

}  // namespace

Deployment Deployment::from_toml_string(std::string_view text, std::string_view source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& begin = e.source().begin;
    throw InputError(fmt::format("{}:{}:{}: malformed TOML: {}", source, begin.line, begin.column,
                                 e.description()));
  }
  Deployment deployment;
  for (const auto& [key, node] : root) {
    const std::string_view name = key.str();
    if (name == "name") {
      DI_INPUT_CHECK(node.is_string(), "{}: key 'name' must be a string", source);
      deployment.name = *node.value<std::string>();
      continue;
    }
    DI_INPUT_CHECK(name == "prefill" || name == "decode" || name == "colocated",
                   "{}: unknown key '{}' (known: name, [prefill], [decode], [colocated])", source, name);
    DI_INPUT_CHECK(node.is_table(), "{}: '{}' must be a table ([{}])", source, name, name);
  }
  // Roles are read in a fixed order, which is also the rank order: prefill first, then decode.
  for (Role role : {Role::kPrefill, Role::kDecode, Role::kColocated})
    if (const toml::table* table = root[role_name(role)].as_table())
      deployment.roles.push_back(read_role(*table, role, source));

  const bool has_prefill = deployment.find(Role::kPrefill) != nullptr;
  const bool has_decode = deployment.find(Role::kDecode) != nullptr;
  const bool has_colocated = deployment.find(Role::kColocated) != nullptr;
  DI_INPUT_CHECK(!(has_colocated && (has_prefill || has_decode)),
                 "{}: impossible layout: [colocated] cannot be combined with [prefill] or [decode]", source);
  DI_INPUT_CHECK(has_colocated || (has_prefill && has_decode),
                 "{}: impossible layout: a disaggregated deployment needs both [prefill] and [decode] "
                 "(or use [colocated])", source);
  if (deployment.name.empty()) deployment.name = std::filesystem::path(source).stem().string();
  return deployment;
}

Deployment Deployment::single_rank(int chunk_tokens, int max_running) {
  RoleSpec spec;
  spec.role = Role::kColocated;
  spec.num_ranks = 1;
  spec.ep_size = 1;
  spec.chunk_tokens = chunk_tokens;
  spec.max_running = max_running;
  return Deployment{"one rank", {spec}};
}

Deployment Deployment::from_toml_file(const std::filesystem::path& path) {
  std::error_code ec;
  DI_INPUT_CHECK(std::filesystem::exists(path, ec), "cannot open deployment file '{}': it does not exist",
                 path.string());
  return from_toml_string(read_text_file(path, "deployment file"), path.string());
}

RankPlacement place_rank(const Deployment& deployment, int world_rank) {
  DI_CHECK(world_rank >= 0 && world_rank < deployment.world_size(), "rank {} outside world of {}",
           world_rank, deployment.world_size());
  int first_rank = 0;
  for (size_t idx = 0; idx < deployment.roles.size(); ++idx) {
    const RoleSpec& spec = deployment.roles[idx];
    if (world_rank < first_rank + spec.num_ranks) {
      RankPlacement placement;
      placement.role = spec.role;
      placement.role_spec_idx = static_cast<int>(idx);
      placement.rank_in_role = world_rank - first_rank;
      placement.ep_group_idx = placement.rank_in_role / spec.ep_size;
      placement.rank_in_ep_group = placement.rank_in_role % spec.ep_size;
      return placement;
    }
    first_rank += spec.num_ranks;
  }
  DI_CHECK(false, "unreachable");
  return {};
}

}  // namespace deepinfer
