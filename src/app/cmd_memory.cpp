// `deepinfer memory --deploy D --model M`: what one rank of each role of a deployment holds of a model, before
// anything is launched — its expert slots, its weights as the checkpoint stores them (V2/V3: bench/deepseek_floor.h,
// and dequantised to bf16, how the CUDA backend holds an FP8 V2/V3 checkpoint today; V4.1: bench/v41_floor.h, with
// its engram tables where --engram-tables / --engram-split put them), and what a GPU's memory leaves for the KV
// cache and the activations. Reads config.json only; one process.
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "src/app/commands.h"
#include "src/app/model_loading.h"
#include "src/app/spmd_command.h"
#include "src/bench/deepseek_floor.h"
#include "src/bench/v41_floor.h"
#include "src/comm/deployment.h"
#include "src/core/check.h"
#include "src/model/architectures.h"

namespace deepinfer::app {

namespace {

double gb(double bytes) { return bytes / 1e9; }

std::string weight_form(const ModelConfig& c) {
  if (!c.quantization.fp8) return "bf16";
  return fmt::format("FP8 e4m3 with an fp32 scale per {} x {} block", c.quantization.block_rows,
                     c.quantization.block_cols);
}

}  // namespace

int run_memory(const MemoryOptions& options, const World& world) {
  ModelConfig config;
  std::optional<Deployment> deployment;
  auto prepare = [&] {
    require_single_rank(world, "memory");
    DI_INPUT_CHECK(options.gpu_memory_gb > 0, "--gpu-memory-gb {} must be positive", options.gpu_memory_gb);
    DI_INPUT_CHECK(options.engram_tables == "device" || options.engram_tables == "host",
                   "--engram-tables '{}': device or host", options.engram_tables);
    DI_INPUT_CHECK(options.engram_split == "group" || options.engram_split == "none",
                   "--engram-split '{}': group or none", options.engram_split);
    config = load_model_config(options.model_path);
    if (options.no_engram) config.v41.engram_layer_ids.clear();
    DI_INPUT_CHECK(config.n_routed_experts > 0, "{} has no routed experts: every rank holds the whole model",
                   options.model_path);
    deployment = Deployment::from_toml_file(options.deploy_path);
  };
  auto execute = [&] {
    const bool v41 = is_v41(config);
    const bool drafts = options.with_mtp && config.num_nextn_predict_layers > 0;
    // V2/V3's latent KV (bf16); V4.1's caches (window, compressed entries, indexer keys) are not counted in tokens.
    const double kv_per_token = v41 ? 0.0 : static_cast<double>(config.num_hidden_layers) * config.kv_entry_dim() * 2.0;
    const bool dequantised_column = !v41 && config.quantization.fp8;
    fmt::print("{} ({}) on deployment '{}', a rank of each role on a GPU of {:.0f} GB:\n", options.model_path,
               v41 ? fmt::format("DeepSeek-V4.1: FP8 projections, {} experts; {}",
                                 config.quantization.fp4_experts ? "FP4" : "FP8/bf16",
                                 config.v41.engram_layer_ids.empty() ? "no engram layers"
                                 : options.engram_tables == "host"   ? "engram tables in host memory"
                                 : options.engram_split == "group"   ? "engram tables split across each EP group"
                                                                     : "engram tables whole on every rank")
                   : fmt::format("{:.1f}B parameters{}, weights {}", deepseek_parameter_count(config) / 1e9,
                                 drafts ? fmt::format(", {:.1f}B with the MTP layers",
                                                      deepseek_parameter_count(config, true) / 1e9) : "",
                                 weight_form(config)),
               deployment->name, options.gpu_memory_gb);
    constexpr std::string_view kRow = "{:<8} {:>5} {:>4} {:>10} {:>10} {:>9} {:>9}  {:<30} {}\n";
    fmt::print(fmt::runtime(kRow), "role", "ranks", "ep", "slots/rank", "non-expert", "experts", "total",
               "left for KV and activations", dequantised_column ? "dequantised to bf16: total, left" : "");
    for (const RoleSpec& spec : deployment->roles) {
      const int64_t slots = (config.n_routed_experts + spec.redundant_experts + spec.ep_size - 1) / spec.ep_size;
      auto rank_bytes = [&](WeightForm form) {
        if (!v41) return deepseek_rank_weight_bytes(config, slots, form, drafts);
        const double engram_share = options.engram_tables == "host" ? 0.0
                                    : options.engram_split == "group" ? 1.0 / spec.ep_size : 1.0;
        return v41_rank_weight_bytes(config, slots, engram_share, drafts);
      };
      auto left = [&](const RankWeightBytes& w) {
        const double bytes = options.gpu_memory_gb * 1e9 - w.total();
        if (bytes <= 0) return fmt::format("does not fit ({:.1f} GB over)", gb(-bytes));
        if (kv_per_token == 0) return fmt::format("{:.1f} GB", gb(bytes));
        return fmt::format("{:.1f} GB ({:.2f}M tokens of KV)", gb(bytes), bytes / kv_per_token / 1e6);
      };
      const RankWeightBytes stored = rank_bytes(WeightForm::kAsStored);
      fmt::print(fmt::runtime(kRow), role_name(spec.role), spec.num_ranks, spec.ep_size, slots,
                 fmt::format("{:.1f} GB", gb(stored.non_expert)), fmt::format("{:.1f} GB", gb(stored.experts)),
                 fmt::format("{:.1f} GB", gb(stored.total())), left(stored),
                 dequantised_column ? fmt::format("{:.1f} GB, {}", gb(rank_bytes(WeightForm::kBf16).total()),
                                                  left(rank_bytes(WeightForm::kBf16)))
                                    : "");
    }
    if (kv_per_token > 0)
      fmt::print("KV: {:.1f} KB a token (the bf16 latent of {} layers). ", kv_per_token / 1e3, config.num_hidden_layers);
    fmt::print("Weights only: 'left' is before the KV cache, activations and workspace.\n");
    std::fflush(stdout);
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
