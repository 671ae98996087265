// Logging: spdlog with the rank in every line. Rank 0 logs to the console at info (or SPDLOG_LEVEL);
// other ranks log to the console at warn and above, or everything to per-rank files under a log dir.
#pragma once

#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>

namespace deepinfer {

struct LogOptions {
  std::optional<std::filesystem::path> log_dir;  // per-rank files rank-<N>.log when set
};

// Installs the default logger for this process; call once after MPI_Init.
void init_logging(int world_rank, const LogOptions& options);

}  // namespace deepinfer
