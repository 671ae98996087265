// OpenAI chat-completions request bodies as deepseek-recipe 0.2.0's ChatCompletionRequest.convert reads them,
// for what chat_template.h renders: `messages` (system, user, assistant; content a string or a list of
// {"type": "text", "text"} parts, joined by blank lines; an assistant's reasoning_content; `prefix` on a last
// assistant message), `thinking` ({"type": "enabled" | "adaptive" | "disabled"}, enabled by default) and
// `reasoning_effort` (none turns thinking off; minimal and low are low, medium and high high, ultra is max).
// Tools ({"type": "function", "function": {name, description, parameters}}), tool_choice (auto, none,
// required, or one function: that tool alone, required), assistant tool_calls (arguments a JSON object's text) and tool messages, with the API's checks: tool
// names of letters, digits, _ and -; every tool call answered by a tool message right after it (the answers put
// in the calls' order); no tool message elsewhere; no prefix message with tools; no tool_choice required in
// thinking mode. In thinking mode an assistant's reasoning is "" where not given; outside it, none is kept. Empty
// system messages are left out. latest_reminder messages; response_format text, json_object (the messages must
// say "json"), json_schema and regex (the prompt's instructions only: enforcing them is the structured-output
// work). Sampling fields (temperature, max_tokens, ...) are not read here.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "src/text/chat_template.h"

namespace deepinfer::text {

// `what` names the request in errors (e.g. "requests.jsonl line 3"); an InputError names the field. The body keeps
// its keys' order (tool schemas and arguments are shown in it).
ChatConversation parse_chat_request(const nlohmann::ordered_json& body, const std::string& what);

}  // namespace deepinfer::text
