// JSON text as DeepSeek's chat side writes it: strings escaped as JSON (non-ASCII kept), and whole values as
// Python's json.dumps(value, ensure_ascii=False) prints them (", " and ": " between items; integers as they are, floats
// as deepseek-recipe writes them: 1e-7, 0.00001, 3.0, 1e+16), which the chat templates use for tool schemas and DSML
// values.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepinfer::text {

std::string json_escaped(std::string_view s);  // without the quotes
std::string python_json(const nlohmann::ordered_json& value);

}  // namespace deepinfer::text
