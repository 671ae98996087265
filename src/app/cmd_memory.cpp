// `deepinfer memory --deploy D --model M`: what one rank of each role of a deployment holds of a model, before
// anything is launched — its expert slots (as generate places them, redundant replicas included), its weights as the
// CUDA backend holds them (V2/V3: bench/deepseek_floor.h — FP8 as the checkpoint stores it but kv_b_proj in bf16,
// and beside that every weight in bf16 (how the backend held an FP8 checkpoint before); V4.1: bench/v41_floor.h, its
// engram tables where --engram-tables / --engram-split put them), the draft module where the model has one (the
// engine loads it whenever the checkpoint carries it), and what a GPU's memory leaves for the KV cache and the
// activations. Reads config.json and, for a checkpoint directory, its tensors' headers; one process.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/app/commands.h"
#include "src/app/model_loading.h"
#include "src/app/spmd_command.h"
#include "src/app/spmd_setup.h"
#include "src/bench/deepseek_floor.h"
#include "src/bench/v41_floor.h"
#include "src/comm/deployment.h"
#include "src/core/check.h"
#include "src/model/architectures.h"
#include "src/model/safetensors.h"

namespace deepinfer::app {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Bytes in GiB, or MiB below one (the tiny fixtures).
std::string size_text(double bytes) {
  return bytes >= kGiB || bytes == 0 ? fmt::format("{:.1f} GiB", bytes / kGiB) : fmt::format("{:.1f} MiB", bytes / (1 << 20));
}

std::string weights_text(const ModelConfig& c) {
  if (is_v41(c))
    return fmt::format("DeepSeek-V4.1: {} projections, {} experts", c.quantization.fp8 ? "FP8" : "bf16",
                       c.quantization.fp4_experts ? "FP4" : c.quantization.fp8 ? "FP8" : "bf16");
  const double params = deepseek_parameter_count(c);
  const std::string count = params >= 1e9 ? fmt::format("{:.1f}B", params / 1e9) : fmt::format("{:.1f}M", params / 1e6);
  if (!c.quantization.fp8) return fmt::format("{} parameters, bf16 on the GPU", count);
  return fmt::format("{} parameters, FP8 e4m3 with an fp32 scale per {} x {} block", count, c.quantization.block_rows,
                     c.quantization.block_cols);
}

std::string engram_text(const ModelConfig& c, const MemoryOptions& o) {
  if (c.v41.engram_layer_ids.empty()) return "no engram layers";
  if (o.engram_tables == "host") return "engram tables in host memory";
  return o.engram_split == "group" ? "engram tables split across each EP group" : "engram tables whole on every rank";
}

// Whether the engine would load a draft module: the config has one and, for a checkpoint directory, its tensors are
// there (a transformers-saved V3 has none).
bool has_draft_module(const ModelConfig& c, const std::string& model_path) {
  if (is_v41(c) ? !c.v41.dspark.enabled() : c.num_nextn_predict_layers == 0) return false;
  if (!std::filesystem::is_directory(model_path)) return true;  // a bare config: the released checkpoint's
  return SafetensorsCheckpoint(model_path).find(draft_module_tensor(c, is_v41(c))) != nullptr;
}

std::string draft_text(const ModelConfig& c, bool present, bool counted) {
  if (is_v41(c) ? !c.v41.dspark.enabled() : c.num_nextn_predict_layers == 0) return "no draft module";
  if (!present) return fmt::format("no draft module in the checkpoint (no {})", draft_module_tensor(c, is_v41(c)));
  if (!counted) return "draft module left out (--no-draft-module)";
  return is_v41(c) ? "its DSpark draft layers counted, held whole"
                   : fmt::format("its MTP layer counted, with its {} experts whole on every rank", c.n_routed_experts);
}

}  // namespace

int run_memory(const MemoryOptions& options, const World& world) {
  ModelConfig config;
  std::optional<Deployment> deployment;
  std::vector<int64_t> slots;  // a rank's expert slots, per role
  auto prepare = [&] {
    require_single_rank(world, "memory");
    DI_INPUT_CHECK(options.gpu_memory_gib > 0 && options.gpu_memory_gib <= 1e5,
                   "--gpu-memory-gib {} is not a GPU's memory (0 to 100,000 GiB)", options.gpu_memory_gib);
    DI_INPUT_CHECK(options.engram_tables == "device" || options.engram_tables == "host",
                   "--engram-tables '{}': device or host", options.engram_tables);
    DI_INPUT_CHECK(options.engram_split == "group" || options.engram_split == "none",
                   "--engram-split '{}': group or none", options.engram_split);
    config = load_model_config(options.model_path);
    DI_INPUT_CHECK(is_v41(config) || (options.engram_tables == "device" && options.engram_split == "group" &&
                                      !options.no_engram),
                   "--engram-tables, --engram-split and --no-engram are for DeepSeek-V4.1; {} is a {} model",
                   options.model_path, config.model_type);
    if (options.no_engram) config.v41.engram_layer_ids.clear();
    DI_INPUT_CHECK(config.n_routed_experts > 0, "{} has no routed experts: every rank holds the whole model",
                   options.model_path);
    deployment = Deployment::from_toml_file(options.deploy_path);
    for (const RoleSpec& spec : deployment->roles)  // placed as generate places them (and refused as it refuses)
      slots.push_back(group_placement(config, spec, -1, "").slots_per_rank());
  };
  auto execute = [&] {
    const bool v41 = is_v41(config);
    const bool present = has_draft_module(config, options.model_path);
    const bool drafts = present && !options.no_draft_module;
    // V2/V3's latent KV (bf16); V4.1's caches (window, compressed entries, indexer keys) are not counted in tokens.
    const double kv_per_token = v41 ? 0.0 : static_cast<double>(config.num_hidden_layers) * config.kv_entry_dim() * 2.0;
    const bool dequantised_column = !v41 && config.quantization.fp8;
    fmt::print("{} ({}; {}{}) on deployment '{}', a rank of each role on a GPU of {:.1f} GiB:\n", options.model_path,
               weights_text(config), v41 ? engram_text(config, options) + "; " : "", draft_text(config, present, drafts),
               deployment->name, options.gpu_memory_gib);
    constexpr std::string_view kRow = "{:<9} {:>5} {:>4} {:>10} {:>10} {:>10} {:>10}  {:<33} {}\n";
    fmt::print(fmt::runtime(kRow), "role", "ranks", "ep", "slots/rank", "non-expert", "experts", "total",
               "left for KV and activations", dequantised_column ? "all bf16: total, left" : "");
    for (size_t role = 0; role < deployment->roles.size(); ++role) {
      const RoleSpec& spec = deployment->roles[role];
      auto rank_bytes = [&](WeightForm form) {
        if (!v41) return deepseek_rank_weight_bytes(config, slots[role], form, drafts);
        const double engram_share = options.engram_tables == "host" ? 0.0
                                    : options.engram_split == "group" ? 1.0 / spec.ep_size : 1.0;
        return v41_rank_weight_bytes(config, slots[role], engram_share, drafts);
      };
      auto left = [&](const RankWeightBytes& w) {
        const double bytes = options.gpu_memory_gib * kGiB - w.total();
        if (bytes <= 0) return fmt::format("does not fit ({} over)", size_text(-bytes));
        if (kv_per_token == 0) return size_text(bytes);
        return fmt::format("{} ({:.2f}M tokens of KV)", size_text(bytes), bytes / kv_per_token / 1e6);
      };
      const RankWeightBytes stored = rank_bytes(WeightForm::kCudaBackend);
      const RankWeightBytes bf16 = dequantised_column ? rank_bytes(WeightForm::kBf16) : RankWeightBytes{};
      fmt::print(fmt::runtime(kRow), role_name(spec.role), spec.num_ranks, spec.ep_size, slots[role],
                 size_text(stored.non_expert), size_text(stored.experts), size_text(stored.total()), left(stored),
                 dequantised_column ? fmt::format("{}, {}", size_text(bf16.total()), left(bf16)) : "");
    }
    if (kv_per_token > 0)
      fmt::print("KV: {:.1f} KiB a token (the bf16 latent of {} layers). ", kv_per_token / 1024, config.num_hidden_layers);
    fmt::print("Weights only: 'left' is before the KV cache, activations and workspace.\n");
    std::fflush(stdout);
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
