#include "src/core/json_depth.h"

#include "src/core/check.h"

namespace deepinfer {

int64_t json_too_deep_at(std::string_view text, int max_depth) {
  int64_t depth = 0, line = 1;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character (a quote or a backslash) does not end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return line;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return 0;
}

void check_json_depth(std::string_view text, std::string_view where, int max_depth) {
  DI_INPUT_CHECK(json_too_deep_at(text, max_depth) == 0,
                 "{}: JSON nested more than {} levels deep (arrays and objects inside one another); no request, "
                 "schema or tool call needs that many: flatten it", where, max_depth);
}

void check_json_file_depth(std::string_view text, const std::string& path, int max_depth) {
  const int64_t line = json_too_deep_at(text, max_depth);
  DI_INPUT_CHECK(line == 0, "{}:{}: JSON nested more than {} levels deep (arrays and objects inside one another); "
                 "the file is damaged or not what it should be", path, line, max_depth);
}

}  // namespace deepinfer
