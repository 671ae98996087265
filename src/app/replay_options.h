// DeepSeek-V4.1's bounded decoder replay as the command line gives it (--yoco-truncation off | mask | compact,
// --yoco-keep-tokens), checked against the model: `generate` and `bench prefill` read it the same way.
#pragma once

#include <cstdint>
#include <string>

#include "src/engine/engine.h"
#include "src/model/model_config.h"

namespace deepinfer::app {

// Off, or the mode with its keep count: a V4.1 mechanism that keeps at least the window and the backtracking
// margin (kV41BacktrackingTokens). Bad input: an InputError naming the option.
ReplayOptions replay_options(const ModelConfig& config, const std::string& mode, int64_t keep_tokens);

}  // namespace deepinfer::app
