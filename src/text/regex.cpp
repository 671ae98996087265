#define PCRE2_CODE_UNIT_WIDTH 8
#include "src/text/regex.h"

#include <pcre2.h>

#include <utility>

#include "src/core/check.h"

namespace deepinfer::text {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof(message));
  return reinterpret_cast<const char*>(message);
}

// A pattern in a message: long ones cut, so that the message stays one readable line.
std::string excerpt(const std::string& pattern) {
  return pattern.size() <= 120 ? pattern : pattern.substr(0, 120) + "...";
}

}  // namespace

Regex::Regex(const std::string& pattern, std::string origin) : pattern_(pattern), origin_(std::move(origin)) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                        &offset, nullptr);
  if (code_ == nullptr)
    throw InputError(fmt::format("{} '{}' at offset {}: {}", origin_, excerpt(pattern), offset, pcre2_message(error)));
  pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE);  // interpreted where JIT is missing
}

Regex::Regex(Regex&& other) noexcept
    : code_(std::exchange(other.code_, nullptr)),
      pattern_(std::move(other.pattern_)),
      origin_(std::move(other.origin_)) {}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Regex::for_each_match(std::string_view subject, const std::function<void(size_t, size_t)>& on_match) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  DI_CHECK(data != nullptr, "out of memory for PCRE2 match data");
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t at = 0;
  while (at <= subject.size()) {
    const int rc = pcre2_match(code, s, subject.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      throw InputError(fmt::format("{} '{}' failed on a piece of {} bytes of text: PCRE2 error {} ({}); simplify the "
                                   "pattern or split the text", origin_, excerpt(pattern_), subject.size(), rc,
                                   pcre2_message(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      on_match(begin, end);
      at = end;
    } else {  // an empty match: step over one code point
      at = begin + 1;
      while (at < subject.size() && (static_cast<uint8_t>(subject[at]) & 0xC0) == 0x80) ++at;
    }
  }
  pcre2_match_data_free(data);
}

}  // namespace deepinfer::text
