// JSON text as DeepSeek's chat side writes it: strings escaped as JSON (non-ASCII kept), and whole values as
// Python's json.dumps(value, ensure_ascii=False) prints them (", " and ": " between items; integers as they are, floats
// as deepseek-recipe's encodings write them: V4's 1e-7, 0.00001, 3.0, 1e+16; V4.1's, Python's repr, 1e-07, 1e-05),
// which the chat templates use for tool schemas and DSML values.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepinfer::text {

std::string json_escaped(std::string_view s);  // without the quotes
enum class JsonFloats { kV4, kV41 };
std::string python_json(const nlohmann::ordered_json& value, JsonFloats floats = JsonFloats::kV4);

}  // namespace deepinfer::text
