#include "src/core/log.h"

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace deepinfer {

void init_logging(int world_rank, const LogOptions& options) {
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  // Only rank 0 speaks on the console below warn, so a 68-rank job prints one story, not 68.
  console->set_level(world_rank == 0 ? spdlog::level::trace : spdlog::level::warn);
  sinks.push_back(console);
  if (options.log_dir) {
    std::filesystem::create_directories(*options.log_dir);
    auto file = fmt::format("{}/rank-{}.log", options.log_dir->string(), world_rank);
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/true));
  }
  auto logger = std::make_shared<spdlog::logger>("deepinfer", sinks.begin(), sinks.end());
  logger->set_pattern(fmt::format("[%H:%M:%S.%e] [r{}] [%^%l%$] %v", world_rank));
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug etc.
}

}  // namespace deepinfer
