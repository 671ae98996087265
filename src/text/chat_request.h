// OpenAI chat-completions request bodies as deepseek-recipe 0.2.0's ChatCompletionRequest.convert reads them,
// for what chat_template.h renders: `messages` (system, user, assistant; content a string or a list of
// {"type": "text", "text"} parts, joined by blank lines; an assistant's reasoning_content; `prefix` on a last
// assistant message), `thinking` ({"type": "enabled" | "adaptive" | "disabled"}, enabled by default) and
// `reasoning_effort` (none turns thinking off; minimal and low are low, medium and high high, ultra is max).
// Sampling fields (temperature, max_tokens, ...) are not read here. Tools, tool messages, latest-reminder
// messages and response formats are refused as not built yet.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "src/text/chat_template.h"

namespace deepinfer::text {

// `what` names the request in errors (e.g. "requests.jsonl line 3"); an InputError names the field.
ChatConversation parse_chat_request(const nlohmann::json& body, const std::string& what);

}  // namespace deepinfer::text
