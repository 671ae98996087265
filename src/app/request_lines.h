// A request file's non-blank lines in order, each with its line number and its ordinal (the position among the
// requests: the id and seed of a line that gives none), read one at a time.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/core/check.h"

namespace deepinfer::app {

class RequestLines {
 public:
  explicit RequestLines(const std::filesystem::path& path) : path_(path), in_(path) {
    DI_INPUT_CHECK(in_.good(), "cannot open input '{}'", path.string());
  }
  struct Line {
    std::string text;
    int64_t number = 0;   // 1-based line number in the file
    int64_t ordinal = 0;  // 0-based position among the non-blank lines
  };
  bool next(Line& line) {
    while (std::getline(in_, line.text)) {
      ++number_;
      if (line.text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
      line.number = number_;
      line.ordinal = ordinal_++;
      return true;
    }
    return false;
  }
  std::string where(const Line& line) const { return fmt::format("{}:{}", path_.string(), line.number); }

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  int64_t number_ = 0, ordinal_ = 0;
};

}  // namespace deepinfer::app
