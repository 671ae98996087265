#include "src/app/replay_options.h"

#include "src/core/check.h"

namespace deepinfer::app {

ReplayOptions replay_options(const ModelConfig& config, const std::string& mode, int64_t keep_tokens) {
  if (mode == "off") return {};
  DI_INPUT_CHECK(mode == "mask" || mode == "compact", "--yoco-truncation is off, mask or compact, not '{}'", mode);
  DI_INPUT_CHECK(is_v41(config), "--yoco-truncation is DeepSeek-V4.1's (this model is {})", config.model_type);
  const int64_t least = config.v41.sliding_window + kV41BacktrackingTokens;
  DI_INPUT_CHECK(keep_tokens >= least, "--yoco-keep-tokens {} is below the window {} + the backtracking margin {} = {}",
                 keep_tokens, config.v41.sliding_window, kV41BacktrackingTokens, least);
  return {mode == "mask" ? ReplayOptions::Mode::kMask : ReplayOptions::Mode::kCompact, keep_tokens};
}

}  // namespace deepinfer::app
