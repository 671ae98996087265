#include "src/bench/sweep.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <tuple>
#include <cstdlib>
#include <set>

#include "src/bench/run_metadata.h"
#include "src/bench/step_bench.h"
#include "src/core/hdf5_table.h"
#include "src/comm/mpi_communicator.h"
#include "src/comm/mpi_util.h"
#include "git_commit.h"  // generated at build time: DEEPINFER_GIT_COMMIT

namespace deepinfer {

namespace {

bool takes_part(Role role, const std::string& phase) {
  return role == Role::kColocated || (phase == "prefill" ? role == Role::kPrefill : role == Role::kDecode);
}


// World rank 0's file: root attributes, the points table, the per-rank table and the pairs each rank's experts
// served.
struct SweepFile {
  H5IncrementalFile file;
  H5Table points;
  H5Table ranks;
  H5Table served;

  SweepFile(const SweepOptions& o, const Topology& topo, const std::string& hosts)
      : file(o.output_path),
        points(file.id(), o.phase + "/points", point_columns(o.phase, o.spec_measured)),
        ranks(file.id(), o.phase + "/ranks",
              {{"point", true}, {"world_rank", true}, {"role", true}, {"step_time_ms", false},
               {"step_time_p90_ms", false}, {"routed_tokens_received", true}}),
        served(file.id(), o.phase + "/served",
               {{"point", true}, {"world_rank", true}, {"moe_layer", true}, {"expert", true}, {"pairs", true}}) {
    file.set_attribute("complete", int64_t{0});  // set to 1 when every point is in
    file.set_attribute("phase", o.phase);
    file.set_attribute("configuration", o.attributes_json);
    file.set_attribute("git_commit", DEEPINFER_GIT_COMMIT);
    file.set_attribute("deployment", topo.deployment().name);
    file.set_attribute("world_size", static_cast<int64_t>(topo.world_size()));
    file.set_attribute("versions", library_versions());
    file.set_attribute("accelerator", accelerator_name());
    file.set_attribute("hosts", hosts);
    const char* job = std::getenv("SLURM_JOB_ID");
    file.set_attribute("slurm_job_id", job ? job : "");
    file.set_attribute("date", utc_now());
    file.flush();
  }

  static std::vector<H5Column> point_columns(const std::string& phase, bool spec_measured) {
    if (phase == "prefill")
      return {{"point", true}, {"chunk_tokens", true}, {"prompt_len", true}, {"step_time_ms", false},
              {"step_time_p90_ms", false}, {"tokens_per_s_per_gpu", false}, {"expert_load_imbalance", false},
              {"num_ranks", true}};
    std::vector<H5Column> columns = {
        {"point", true}, {"requests_per_rank", true}, {"context", true}, {"step_time_ms", false},
        {"step_time_p90_ms", false}, {"tokens_per_s_per_gpu", false}, {"tokens_per_s_per_user", false},
        {"tokens_per_step", false}, {"tokens_per_s_per_gpu_converted", false},
        {"tokens_per_s_per_user_converted", false}, {"expert_load_imbalance", false}, {"num_ranks", true}};
    // Measured under speculation: the slowest rank's median verify step, the tokens a request got per step (mean over
    // the ranks) and the throughput they give.
    if (spec_measured)
      columns.insert(columns.end(), {{"spec_step_time_ms", false}, {"tokens_per_step_measured", false},
                                     {"tokens_per_s_per_gpu_measured", false},
                                     {"tokens_per_s_per_user_measured", false}});
    return columns;
  }
};

}  // namespace

void run_sweep(CausalLm& model, const Topology& topo, ExpertParallelDispatcher& experts, const SweepOptions& o) {
  const bool mine = takes_part(topo.role(), o.phase);
  const bool is_root = topo.world_rank() == 0;
  const std::vector<std::string> hosts = gather_strings(topo.world(), topo.host());
  std::unique_ptr<SweepFile> out;
  if (is_root) {
    std::set<std::string> unique(hosts.begin(), hosts.end());
    std::string host_list;
    for (const std::string& h : unique) host_list += (host_list.empty() ? "" : ",") + h;
    out = std::make_unique<SweepFile>(o, topo, host_list);
  }
  const double tokens_per_step = 1.0 + static_cast<double>(o.num_drafts) * o.acceptance;
  const auto start = std::chrono::steady_clock::now();
  for (size_t idx = 0; idx < o.points.size(); ++idx) {
    const int64_t point = o.points[idx];
    // [takes part, median ms, p90 ms, routed tokens received, role, speculative median ms, tokens per request step]
    std::array<double, 7> mine_stats = {0, 0, 0, 0, static_cast<double>(topo.role()), 0, 0};
    const std::vector<int64_t> served_before = experts.served_counts();
    if (mine) {
      const int64_t before = experts.stats().tokens_received;
      // An EP group of one rank needs no exchange: its experts run on the model's own (device) path.
      ExpertDispatcher* dispatcher = experts.placement().ep_size() > 1 ? &experts : nullptr;
      const StepBenchResult r =
          o.phase == "prefill"
              ? bench_prefill(model, point, std::min(o.prompt_len, point), o.warmup, o.steps, dispatcher)
              : bench_decode(model, point, o.context, o.warmup, o.steps, dispatcher);
      mine_stats = {1, r.median_ms, r.p90_ms, static_cast<double>(experts.stats().tokens_received - before),
                    static_cast<double>(topo.role()), 0, 0};
      if (o.spec_measured) {  // every rank of the group runs the same number of steps, so the exchanges match
        const DecodeSpeculation spec{o.num_drafts, false, {o.acceptance, o.draft_spread, static_cast<uint64_t>(topo.world_rank())}};
        const StepBenchResult s = bench_decode(model, point, o.context, o.warmup, o.steps, dispatcher, spec);
        mine_stats[5] = s.median_ms;
        mine_stats[6] = s.spec.tokens_per_step / static_cast<double>(point);
      }
    }
    constexpr int kStats = static_cast<int>(std::tuple_size_v<decltype(mine_stats)>);
    const std::vector<double> all = gather_f64_to_root(topo.world(), mine_stats.data(), kStats, 0,
                                                       default_comm_timeout_s(),
                                                       fmt::format("sweep point {} results", point).c_str());
    // The (token, expert) pairs each rank's slots served during the point, per MoE layer and expert.
    const std::vector<int64_t>& served_after = experts.served_counts();
    std::vector<double> served(served_after.size());
    for (size_t i = 0; i < served.size(); ++i) served[i] = static_cast<double>(served_after[i] - served_before[i]);
    const std::vector<double> all_served =
        gather_f64_to_root(topo.world(), served.data(), static_cast<int64_t>(served.size()), 0,
                           default_comm_timeout_s(), fmt::format("sweep point {} served pairs", point).c_str());
    if (!is_root) continue;
    const int64_t num_experts = experts.placement().num_experts();
    for (int r = 0; r < topo.world_size(); ++r)
      for (size_t i = 0; i < served.size(); ++i)
        if (const double pairs = all_served[r * served.size() + i]; pairs > 0)
          out->served.append({static_cast<double>(idx), static_cast<double>(r),
                              static_cast<double>(static_cast<int64_t>(i) / num_experts),
                              static_cast<double>(static_cast<int64_t>(i) % num_experts), pairs});

    double step_ms = 0, p90_ms = 0, max_tokens = 0, sum_tokens = 0, spec_ms = 0, spec_tokens = 0;
    int64_t ranks = 0;
    for (int r = 0; r < topo.world_size(); ++r) {
      const double* s = all.data() + kStats * r;
      if (s[0] == 0) continue;
      ++ranks;
      spec_ms = std::max(spec_ms, s[5]);
      spec_tokens += s[6];
      step_ms = std::max(step_ms, s[1]);
      p90_ms = std::max(p90_ms, s[2]);
      max_tokens = std::max(max_tokens, s[3]);
      sum_tokens += s[3];
      out->ranks.append({static_cast<double>(idx), static_cast<double>(r), s[4], s[1], s[2], s[3]});
    }
    const double imbalance = sum_tokens > 0 ? max_tokens / (sum_tokens / static_cast<double>(ranks)) : 1.0;
    std::string figures;
    if (o.phase == "prefill") {
      const double per_gpu = point / (step_ms / 1e3);
      out->points.append({static_cast<double>(idx), static_cast<double>(point),
                          static_cast<double>(std::min(o.prompt_len, point)), step_ms, p90_ms, per_gpu, imbalance,
                          static_cast<double>(ranks)});
      figures = fmt::format("chunk {} tokens: {:.2f} ms/step, {:.0f} tok/s/GPU", point, step_ms, per_gpu);
    } else {
      const double per_gpu = point / (step_ms / 1e3), per_user = 1e3 / step_ms;
      std::vector<double> row = {static_cast<double>(idx), static_cast<double>(point), static_cast<double>(o.context),
                                 step_ms, p90_ms, per_gpu, per_user, tokens_per_step, per_gpu * tokens_per_step,
                                 per_user * tokens_per_step, imbalance, static_cast<double>(ranks)};
      figures = fmt::format("{} requests/rank: {:.2f} ms/step, {:.0f} tok/s/GPU, {:.1f} tok/s/user (x{:.2f} converted: "
                            "{:.0f}, {:.1f})", point, step_ms, per_gpu, per_user, tokens_per_step,
                            per_gpu * tokens_per_step, per_user * tokens_per_step);
      if (o.spec_measured) {
        const double measured = spec_tokens / static_cast<double>(ranks), user = measured / (spec_ms / 1e3);
        row.insert(row.end(), {spec_ms, measured, user * static_cast<double>(point), user});
        figures += fmt::format("; measured with {} drafts: {:.2f} ms/step, x{:.2f}: {:.0f} tok/s/GPU, {:.1f} tok/s/user",
                               o.num_drafts, spec_ms, measured, user * static_cast<double>(point), user);
      }
      out->points.append(row);
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = elapsed / static_cast<double>(idx + 1) * static_cast<double>(o.points.size() - idx - 1);
    spdlog::info("sweep {} point {}/{}: {}; expert load max/mean {:.2f} over {} ranks; elapsed {:.0f} s, ETA {:.0f} s",
                 o.phase, idx + 1, o.points.size(), figures, imbalance, ranks, elapsed, eta);
    // Fault injection for the tests: DEEPINFER_FAULT_EXIT_AFTER_POINTS=N ends the job after N points, the way a
    // killed job ends, to check that the file keeps the finished rows.
    if (const char* after = std::getenv("DEEPINFER_FAULT_EXIT_AFTER_POINTS"); after && std::atoll(after) == int64_t(idx) + 1) {
      spdlog::error("fault injection: the sweep stops after {} points (DEEPINFER_FAULT_EXIT_AFTER_POINTS)", idx + 1);
      spdlog::default_logger()->flush();
      std::_Exit(3);
    }
  }
  if (is_root) {
    out->file.set_attribute("complete", int64_t{1});
    out->file.close();
    spdlog::info("wrote {} ({} points)", o.output_path, o.points.size());
  }
}

}  // namespace deepinfer
