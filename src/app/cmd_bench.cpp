// `deepinfer bench decode|prefill`: median step times on one rank against their floors; with --rank-slice, the
// step of one rank of a deployment run alone (its own requests' attention, its own experts over the pairs every
// rank of its EP group would send it under a drawn routing: moe/rank_slice_dispatcher.h), the exchange it would
// make counted beside the compute, not timed.
// `deepinfer bench dispatch`: the expert-parallel exchange against ncclAlltoAll, nccl-tests style.
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>

#include "src/app/model_loading.h"
#include "src/app/replay_options.h"
#include "src/app/spmd_command.h"
#include "src/app/spmd_setup.h"
#include "src/bench/run_metadata.h"
#include "src/bench/step_bench.h"
#include "src/core/device.h"
#include "src/core/files.h"
#include "src/core/hdf5_table.h"
#include "src/moe/rank_slice_dispatcher.h"
#ifdef DEEPINFER_HAVE_CUDA
#include "src/bench/dispatch_bench.h"
#include "src/moe/device_rank_slice.h"
#endif

#include "git_commit.h"  // generated at build time: DEEPINFER_GIT_COMMIT

namespace deepinfer::app {

namespace {

// What --rank-slice stands for: the rank's place in the deployment, its EP group's placement and the routing.
struct SliceTarget {
  RankPlacement where;
  int64_t ep_size = 1;
  std::optional<ExpertPlacement> placement;
  std::optional<SyntheticRouting> routing;
};

SliceTarget slice_target(const BenchOptions& options, const ModelConfig& config) {
  DI_INPUT_CHECK(!options.routing.empty(), "--rank-slice needs --routing: the peers' pairs are drawn from it");
  const Deployment deployment = Deployment::from_toml_file(options.rank_slice_deploy);
  DI_INPUT_CHECK(options.slice_rank >= 0 && options.slice_rank < deployment.world_size(),
                 "--slice-rank {}: the deployment '{}' has world ranks 0..{}", options.slice_rank,
                 options.rank_slice_deploy, deployment.world_size() - 1);
  SliceTarget target;
  target.where = place_rank(deployment, options.slice_rank);
  const Role role = target.where.role;
  DI_INPUT_CHECK(role == Role::kColocated || (options.phase == "decode") == (role == Role::kDecode),
                 "--slice-rank {} is a {} rank of '{}'; bench {} stands for {} or colocated ranks", options.slice_rank,
                 role_name(role), options.rank_slice_deploy, options.phase, options.phase);
  const RoleSpec& spec = deployment.roles[target.where.role_spec_idx];
  target.ep_size = spec.ep_size;
  target.placement = group_placement(config, spec, -1, options.expert_plan_path);
  // A bad spec fails here, before the weights load.
  target.routing.emplace(options.routing, options.routing_seed, target.placement->num_layers(),
                         config.n_routed_experts, config.num_experts_per_tok);
  return target;
}


}  // namespace

int run_bench(const BenchOptions& options, const World& world) {
  LoadedModel loaded;
  std::optional<SliceTarget> slice;
  ReplayOptions replay;  // prefill under V4.1's bounded decoder replay (off unless asked)
  auto prepare = [&] {
    require_single_rank(world, "bench");
    DI_INPUT_CHECK(options.steps > 0 && options.warmup >= 0, "--steps must be positive and --warmup not negative");
    const bool slice_rank_given = options.slice_rank != BenchOptions::kNoSliceRank;
    DI_INPUT_CHECK(!slice_rank_given || options.slice_rank >= 0,
                   "--slice-rank {}: a world rank of --rank-slice's deployment is 0 or more", options.slice_rank);
    DI_INPUT_CHECK(options.rank_slice_deploy.empty() != slice_rank_given, "--rank-slice and --slice-rank go together");
    DI_INPUT_CHECK(!options.rank_slice_deploy.empty() || (options.routing.empty() && options.expert_plan_path.empty()),
                   "--routing and --expert-plan are for --rank-slice (sweep takes --routing too)");
    DI_INPUT_CHECK(options.rank_slice_deploy.empty() || !options.model.batch_invariant,
                   "--batch-invariant does not apply to --rank-slice: a slice's routing is drawn, so there is no "
                   "other run of the same rows to be invariant to");
    if (!options.output_path.empty())
      check_output_path(options.output_path, "--output",
                        input_files(options.model.model_path, {options.rank_slice_deploy, options.expert_plan_path}),
                        /*allow_special=*/!options.output_path.ends_with(".h5"));
    if (!options.rank_slice_deploy.empty()) {
      const ModelConfig config = load_model_config(options.model.model_path);
      slice = slice_target(options, config);
      loaded = load_model(options.model, weights_held_by(*slice->placement, slice->where.rank_in_ep_group, config));
      loaded.config.expert_slots_per_rank = slice->placement->slots_per_rank();
    } else {
      loaded = load_model(options.model);
    }
    replay = replay_options(loaded.config, options.yoco_truncation, options.yoco_keep_tokens);
    const int64_t max_positions = loaded.config.max_position_embeddings;
    if (options.phase == "decode") {
      const SpeculationCliOptions& spec = options.speculation;
      spec.check(options.model.batch_invariant);
      // Each step may emit 1 + --nextn tokens; --spec-varlen first measures its cost curve (3 steps per length).
      const int64_t steps = (spec.variable_length ? 3 * (spec.num_drafts + 1) : 0) + options.warmup + options.steps + 2;
      for (int64_t context : options.contexts)
        DI_INPUT_CHECK(context + steps * (1 + spec.num_drafts) <= max_positions,
                       "--context {} plus {} steps of up to {} tokens exceeds the model's {} positions", context,
                       steps, 1 + spec.num_drafts, max_positions);
    } else {
      DI_INPUT_CHECK(options.prompt_len <= max_positions, "--prompt-len {} exceeds the model's {} positions",
                     options.prompt_len, max_positions);
      for (int64_t chunk : options.chunks)
        DI_INPUT_CHECK(chunk % options.prompt_len == 0, "--chunk-tokens {} is not a multiple of --prompt-len {}", chunk,
                       options.prompt_len);
    }
  };
  auto execute = [&] {
    const std::unique_ptr<CausalLm> model = build_model(std::move(loaded), 0);
    std::unique_ptr<RankSliceDispatcher> slicer;
    if (slice) {
      slicer = std::make_unique<RankSliceDispatcher>(*slice->placement, slice->where.rank_in_ep_group,
                                                     model->config().hidden_size, std::move(*slice->routing));
#ifdef DEEPINFER_HAVE_CUDA
      if (options.model.device == "cuda")
        // Speculative points' steps come in many sizes: one draw per 64 tokens, its prefixes for the sizes below.
        use_device_rank_slice(*slicer, model->config().n_routed_experts, model->config().hidden_size,
                              options.speculation.num_drafts > 0 ? 64 : 0);
#endif
    }
    // Where the slice's received rows come from (the device form replays one draw per MoE layer and batch).
    auto slice_rows_kind = [&] {
      return std::string(slicer->device() != nullptr ? "device: one draw per MoE layer and batch, replayed" : "host");
    };
    if (slicer)
      spdlog::info("rank slice: world rank {} of {} ({} rank {} of an EP group of {}), routing {} (seed {}), received "
                   "rows: {}", options.slice_rank, options.rank_slice_deploy, role_name(slice->where.role),
                   slice->where.rank_in_ep_group, slice->ep_size, options.routing, options.routing_seed,
                   slice_rows_kind());
    // --output X.h5: an HDF5 table <phase>/points (one row per point, flushed as it finishes) with the run's
    // attributes; any other name: JSON lines appended.
    const bool hdf5 = options.output_path.ends_with(".h5");
    const bool speculating = options.phase == "decode" && options.speculation.num_drafts > 0;
    const DecodeSpeculation speculation = speculating ? options.speculation.decode_bench() : DecodeSpeculation{};
    std::optional<H5IncrementalFile> file;
    std::optional<H5Table> table;
    if (hdf5) {
      file.emplace(options.output_path);
      std::vector<H5Column> columns = {{"batch", true},        {"context", true},  {"tokens_per_step", true},
                                       {"median_ms", false},   {"p90_ms", false},  {"min_ms", false},
                                       {"tokens_per_s", false}, {"floor_ms", false}, {"floor_over_measured", false},
                                       {"steps", true},        {"device_idle_ms", false}};
      if (speculating)
        columns.insert(columns.end(), {{"spec_num_drafts", true}, {"spec_varlen", true}, {"spec_mean_drafted", false},
                                       {"spec_mean_verified", false}, {"spec_mean_accepted", false},
                                       {"spec_rows_per_step", false}, {"spec_tokens_per_step", false},
                                       {"spec_calibration_error", false}});
      if (slicer)  // the exchange the real rank makes during the point (warm-up and timed steps), counted
        columns.insert(columns.end(), {{"slice_rows_received", true}, {"slice_rows_sent", true},
                                       {"slice_dispatch_bytes", true}, {"slice_combine_bytes", true}});
      table.emplace(file->id(), options.phase + "/points", columns);
      if (slicer)
        file->set_attribute("rank_slice", nlohmann::json{{"deploy", options.rank_slice_deploy},
                                                         {"world_rank", options.slice_rank},
                                                         {"role", std::string(role_name(slice->where.role))},
                                                         {"ep_size", slice->ep_size},
                                                         {"rank_in_ep_group", slice->where.rank_in_ep_group},
                                                         {"routing", options.routing},
                                                         {"routing_seed", options.routing_seed},
                                                         {"exchange", "counted, not timed"},
                                                         {"received_rows", slice_rows_kind()}}
                                              .dump());
      file->set_attribute("complete", int64_t{0});
      file->set_attribute("phase", options.phase);
      if (speculating)
        file->set_attribute("speculation", nlohmann::json{{"drafter", "controlled (drawn acceptance)"},
                                                          {"mean_acceptance", options.speculation.mean_acceptance},
                                                          {"spread", options.speculation.spread},
                                                          {"seed", options.speculation.seed}}
                                               .dump());
      file->set_attribute("yoco_truncation", options.yoco_truncation);
      file->set_attribute("yoco_keep_tokens", replay.keep_tokens);
      file->set_attribute("model", options.model.model_path);
      file->set_attribute("device", options.model.device);
      file->set_attribute("git_commit", DEEPINFER_GIT_COMMIT);
      file->set_attribute("versions", library_versions());
      file->set_attribute("accelerator", accelerator_name());
      file->set_attribute("date", utc_now());
      file->flush();
    }
    // The slice's exchange and the pairs its experts served during one point (counted from `before`).
    ExchangeStats stats_before;
    SliceExpertWork work_before;
    std::vector<int64_t> served_before;
    auto point_exchange = [&] { return slicer->stats() - stats_before; };
    // A slice's floor from what its experts served (per MoE layer and step, averaged over the point).
    auto slice_floor = [&](StepBenchResult& r) {
      const ModelConfig& c = model->config();
      const SliceExpertWork& w = slicer->expert_work();
      const double exchanges = static_cast<double>(w.num_exchanges - work_before.num_exchanges);
      if (exchanges <= 0) return;
      const ExpertWork served{(w.slots_touched - work_before.slots_touched) / exchanges,
                              (w.pairs - work_before.pairs) / exchanges};
      // A speculative point's rows: its sequences and their verified drafts.
      const int64_t rows = r.spec.num_drafts > 0 ? std::llround(r.spec.rows_per_step) : r.batch;
      set_floor(r, r.phase == "decode" ? decode_floor_work(c, rows, r.context, served)
                                       : prefill_floor_work(c, r.batch, r.context, served, r.replay));
    };
    auto slice_fields = [&]() -> nlohmann::json {
      if (!slicer) return nullptr;
      const ExchangeStats s = point_exchange();
      std::vector<int64_t> served = slicer->served_counts();
      for (size_t i = 0; i < served.size(); ++i) served[i] -= served_before[i];
      return {{"deploy", options.rank_slice_deploy}, {"world_rank", options.slice_rank},
              {"role", std::string(role_name(slice->where.role))}, {"ep_size", slice->ep_size},
              {"rank_in_ep_group", slice->where.rank_in_ep_group}, {"routing", options.routing},
              {"routing_seed", options.routing_seed},
              {"tokens_received", s.tokens_received}, {"tokens_sent", s.tokens_sent},
              {"dispatch_bytes", s.dispatch_bytes}, {"combine_bytes", s.combine_bytes},
              {"num_experts", slicer->placement().num_experts()},
              {"moe_layers", slicer->placement().num_layers()}, {"served_pairs", served},
              {"received_rows", slice_rows_kind()},
              {"slots_touched", slicer->expert_work().slots_touched - work_before.slots_touched},
              {"pairs", slicer->expert_work().pairs - work_before.pairs},
              {"exchanges", slicer->expert_work().num_exchanges - work_before.num_exchanges}};
    };
    auto spec_fields = [](const SpeculationPoint& p) -> nlohmann::json {
      if (p.num_drafts == 0) return nullptr;
      return {{"num_drafts", p.num_drafts}, {"variable_length", p.variable_length}, {"row_quantum", p.row_quantum},
              {"drafter", "controlled (drawn acceptance)"}, {"mean_acceptance", p.mean_acceptance},
              {"spread", p.spread}, {"mean_drafted", p.mean_drafted}, {"mean_verified", p.mean_verified},
              {"mean_accepted", p.mean_accepted}, {"rows_per_step", p.rows_per_step},
              {"tokens_per_step", p.tokens_per_step}, {"calibration_error", p.calibration_error}};
    };
    auto report = [&](StepBenchResult r) {
      if (slicer) {
        slice_floor(r);
        const ExchangeStats s = point_exchange();
        spdlog::info("rank slice exchange (not timed; the real rank's, counted): {} token rows received, {} sent, "
                     "{:.3f} MB dispatched and {:.3f} MB combined to peers, warm-up and timed steps",
                     s.tokens_received, s.tokens_sent, s.dispatch_bytes / 1e6, s.combine_bytes / 1e6);
      }
      spdlog::info("{} batch {:>4} x {:>5}{}: {:>9.3f} ms/step (p90 {:.3f}), {:>10.1f} tok/s; floor {:.3f} ms, "
                   "floor/measured {:.3f}{}{}", r.phase, r.batch, r.context,
                   replay.mode == ReplayOptions::Mode::kOff
                       ? std::string()
                       : fmt::format(" (bounded replay {}, keep {})", options.yoco_truncation, replay.keep_tokens),
                   r.median_ms, r.p90_ms, r.tokens_per_s, r.floor_ms, r.floor_over_measured,
                   r.device_idle_ms >= 0 ? fmt::format("; device idle between steps {:.3f} ms", r.device_idle_ms)
                                         : std::string(),
                   r.graph_steps > 0 ? fmt::format("; {} of {} steps from CUDA graphs", r.graph_steps, r.steps)
                                     : std::string());
      if (r.spec.num_drafts > 0)
        spdlog::info("  speculative ({} drafts, {}; controlled drafter: acceptance {}, spread {}): per sequence and "
                     "step {:.3f} drafted, {:.3f} verified, {:.3f} accepted; {:.1f} rows and {:.1f} tokens a step; "
                     "calibration error {:.4f}", r.spec.num_drafts,
                     !r.spec.variable_length     ? std::string("fixed")
                     : r.spec.row_quantum > 1    ? fmt::format("variable, rows a multiple of {}", r.spec.row_quantum)
                                                 : std::string("variable"),
                     r.spec.mean_acceptance, r.spec.spread, r.spec.mean_drafted, r.spec.mean_verified,
                     r.spec.mean_accepted, r.spec.rows_per_step, r.spec.tokens_per_step, r.spec.calibration_error);
      if (hdf5) {
        std::vector<double> row = {static_cast<double>(r.batch), static_cast<double>(r.context),
                                   static_cast<double>(r.tokens_per_step), r.median_ms, r.p90_ms, r.min_ms,
                                   r.tokens_per_s, r.floor_ms, r.floor_over_measured, static_cast<double>(r.steps),
                                   r.device_idle_ms};
        if (speculating)
          row.insert(row.end(), {static_cast<double>(r.spec.num_drafts), r.spec.variable_length ? 1.0 : 0.0,
                                 r.spec.mean_drafted, r.spec.mean_verified, r.spec.mean_accepted, r.spec.rows_per_step,
                                 r.spec.tokens_per_step, r.spec.calibration_error});
        if (slicer) {
          const ExchangeStats s = point_exchange();
          row.insert(row.end(), {static_cast<double>(s.tokens_received), static_cast<double>(s.tokens_sent),
                                 static_cast<double>(s.dispatch_bytes), static_cast<double>(s.combine_bytes)});
        }
        table->append(row);
        file->flush();
      } else if (!options.output_path.empty()) {
        append_to_file(options.output_path, nlohmann::json{{"phase", r.phase}, {"batch", r.batch}, {"context", r.context},
                              {"tokens_per_step", r.tokens_per_step}, {"median_ms", r.median_ms}, {"p90_ms", r.p90_ms},
                              {"min_ms", r.min_ms}, {"tokens_per_s", r.tokens_per_s}, {"floor_ms", r.floor_ms},
                              {"floor_over_measured", r.floor_over_measured}, {"steps", r.steps},
                              {"device_idle_ms", r.device_idle_ms}, {"graph_steps", r.graph_steps},
                              {"floor_bytes_ms", r.floor_bytes_ms}, {"floor_flops_ms", r.floor_flops_ms},
                              {"yoco_truncation", options.yoco_truncation}, {"yoco_keep_tokens", replay.keep_tokens},
                              {"model", options.model.model_path}, {"device", options.model.device},
                              {"rank_slice", slice_fields()}, {"speculation", spec_fields(r.spec)}}
                                                .dump() + "\n");
      }
    };
    auto point = [&](auto run) {
      if (slicer)
        stats_before = slicer->stats(), served_before = slicer->served_counts(), work_before = slicer->expert_work();
      report(run());
    };
    if (options.phase == "decode") {
      for (int64_t context : options.contexts)
        for (int64_t batch : options.batches)
          point([&] {
            return bench_decode(*model, batch, context, options.warmup, options.steps, slicer.get(), speculation);
          });
    } else {
      for (int64_t chunk : options.chunks)
        point([&] {
          return bench_prefill(*model, chunk, options.prompt_len, options.warmup, options.steps, slicer.get(), replay);
        });
    }
    if (hdf5) {
      file->set_attribute("complete", int64_t{1});
      file->close();
    }
  };
  return run_spmd_command(world, prepare, execute);
}

int run_bench_dispatch(const DispatchBenchCliOptions& options, const World& world) {
  int gpu = -1;
  auto prepare = [&] {
    // Every rank reaches this split (nothing before it can fail), so the collective is safe in prepare().
    const World::HostRanks host = world.host_ranks();
    const int local_size = host.size, local_rank = host.rank;
#ifndef DEEPINFER_HAVE_CUDA
    throw InputError("bench dispatch needs a build with CUDA and NCCL");
#endif
    DI_INPUT_CHECK(cuda_device_count() >= local_size,
                   "bench dispatch needs one GPU per rank: {} ranks on this host, {} GPUs (NCCL refuses two ranks "
                   "on one GPU)", local_size, cuda_device_count());
    DI_INPUT_CHECK(options.warmup >= 0 && options.iters > 0, "--iters must be positive and --warmup not negative");
    for (int64_t h : options.hiddens)
      DI_INPUT_CHECK(h > 0 && h % 8 == 0, "--hidden {}: must be a positive multiple of 8", h);
    for (int64_t k : options.top_ks) DI_INPUT_CHECK(k > 0 && k <= 16, "--top-k {}: must be in 1..16", k);
    for (int64_t t : options.tokens) DI_INPUT_CHECK(t > 0, "--tokens {}: must be positive", t);
    gpu = local_rank;
  };
  auto execute = [&] {
#ifdef DEEPINFER_HAVE_CUDA
    const DispatchBenchOptions o{options.tokens, options.hiddens, options.top_ks, options.warmup, options.iters};
    const std::vector<DispatchBenchRow> rows = run_dispatch_bench(world, gpu, o);
    if (world.rank() != 0) return;
    spdlog::info("{:>5} {:>6} {:>6} {:>5} {:>8} {:<13} {:>12} {:>10} {:>8} {:>8}", "ranks", "tokens", "hidden", "top-k",
                 "experts", "op", "size (B)", "time (us)", "algbw", "busbw");
    std::ofstream out;
    if (!options.output_path.empty()) out.open(options.output_path, std::ios::app);
    for (const DispatchBenchRow& r : rows) {
      spdlog::info("{:>5} {:>6} {:>6} {:>5} {:>8} {:<13} {:>12.0f} {:>10.1f} {:>8.2f} {:>8.2f}", r.ranks, r.tokens,
                   r.hidden, r.top_k, r.experts, r.op, r.bytes, r.median_us, r.algbw_gbs, r.busbw_gbs);
      if (out.is_open())
        out << nlohmann::json{{"ranks", r.ranks}, {"tokens_per_rank", r.tokens}, {"hidden", r.hidden},
                              {"top_k", r.top_k}, {"experts", r.experts}, {"op", r.op}, {"bytes", r.bytes},
                              {"median_us", r.median_us}, {"algbw_GBps", r.algbw_gbs}, {"busbw_GBps", r.busbw_gbs}}
                   .dump()
            << '\n';
    }
#endif
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
