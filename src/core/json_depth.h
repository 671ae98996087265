// A bound on how deeply a JSON input nests, checked on its text before it is parsed: code that walks or re-serialises
// a parsed value recurses once per level, so a line of 100,000 nested brackets (in a request's id, a schema, a tool's
// arguments) would overflow the stack wherever it is printed. Servers' JSON parsers bound the depth the same way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer {

// Far deeper than requests, schemas, tokenizers and configs nest.
constexpr int kMaxJsonDepth = 256;

// The line (1-based) of `text` at which its arrays and objects first nest deeper than `max_depth`, brackets inside
// strings not counted; 0 when they never do. Malformed text is scanned all the same (the parser reports it after).
int64_t json_too_deep_at(std::string_view text, int max_depth = kMaxJsonDepth);

// InputError "<where>: ..." when `text` (one JSON value: a line of a JSON lines file, or a string field holding JSON)
// nests deeper than `max_depth`.
void check_json_depth(std::string_view text, std::string_view where, int max_depth = kMaxJsonDepth);

// The same for a whole JSON file: the message names `path` and the line where the depth is passed.
void check_json_file_depth(std::string_view text, const std::string& path, int max_depth = kMaxJsonDepth);

}  // namespace deepinfer
