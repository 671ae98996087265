// `deepinfer order-results --input prompts.jsonl --results out.jsonl --output ordered.jsonl`: a finished durable
// output (results in completion order) rewritten in its input's order, whole or not at all. It holds the results
// file in memory (a tool for after the job, not for the job).
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <unordered_map>

#include "src/app/commands.h"
#include "src/app/model_loading.h"
#include "src/app/request_lines.h"
#include "src/app/result_log.h"
#include "src/app/spmd_command.h"
#include "src/core/check.h"
#include "src/core/files.h"

namespace deepinfer::app {

namespace {

// The results file's lines by key. InputError naming a line that is not a result, or a key given twice.
std::unordered_map<std::string, std::string> results_by_key(const std::filesystem::path& path) {
  require_regular_file(path, "--results");
  std::ifstream in(path, std::ios::binary);
  std::unordered_map<std::string, std::string> lines;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    DI_INPUT_CHECK(!in.eof(), "{}:{}: a torn last line (the job was killed inside a write): resume the job first",
                   path.string(), number);
    const nlohmann::json line = parse_line_quietly(text);
    DI_INPUT_CHECK(line.is_object() && (line.contains("id") || line.contains("custom_id")),
                   "{}:{}: not a result line (a JSON object with an id or custom_id)", path.string(), number);
    DI_INPUT_CHECK(lines.emplace(result_key(line), text).second, "{}:{}: a second result for id {}", path.string(),
                   number, result_key(line).substr(2));
  }
  return lines;
}

}  // namespace

int run_order_results(const OrderResultsOptions& options, const World& world) {
  std::unordered_map<std::string, std::string> results;
  auto prepare = [&] {
    require_single_rank(world, "order-results");
    check_output_path(options.output_path, "--output", {options.input_path, options.results_path});
    results = results_by_key(options.results_path);
  };
  auto execute = [&] {
    RequestLines input(options.input_path);
    OutputFile out(options.output_path);
    RequestLines::Line line;
    int64_t written = 0, missing = 0;
    std::string first_missing;
    while (input.next(line)) {
      const nlohmann::json request = parse_line_quietly(line.text);
      const auto found = results.find(request_key(request.is_discarded() ? nlohmann::json() : request, line.ordinal));
      if (found == results.end()) {
        if (missing++ == 0) first_missing = input.where(line);
        continue;
      }
      out.write(found->second);
      out.write("\n");
      ++written;
    }
    DI_INPUT_CHECK(missing == 0, "{} requests have no result in '{}' (the first: {}): the job is not finished — "
                   "resume it (generate --resume) first", missing, options.results_path, first_missing);
    DI_INPUT_CHECK(written == static_cast<int64_t>(results.size()), "'{}' holds {} results that no request of '{}' "
                   "has", options.results_path, static_cast<int64_t>(results.size()) - written, options.input_path);
    out.commit();
    spdlog::info("wrote {} results in input order to {}", written, options.output_path);
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
