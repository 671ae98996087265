// A compiled PCRE2 pattern (UTF-8, Unicode properties for \p{..}, \s, \w; JIT where available), RAII.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace deepinfer::text {

class Regex {
 public:
  // InputError for a pattern PCRE2 refuses. `origin` says where the pattern comes from (a tokenizer.json's Split,
  // say), for the messages of its failures.
  explicit Regex(const std::string& pattern, std::string origin = "regular expression");
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&&) = delete;
  Regex(const Regex&) = delete;
  ~Regex();

  // Calls on_match(begin, end) for every non-overlapping match in `subject` (valid UTF-8), left to right. Safe
  // from several threads at once (each call its own match data). A match PCRE2 gives up on (its match or depth
  // limit, on a pathological pattern) is an InputError naming the origin and the pattern.
  void for_each_match(std::string_view subject, const std::function<void(size_t, size_t)>& on_match) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  std::string pattern_, origin_;
};

}  // namespace deepinfer::text
