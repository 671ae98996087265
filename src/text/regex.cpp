#define PCRE2_CODE_UNIT_WIDTH 8
#include "src/text/regex.h"

#include <pcre2.h>

#include <utility>

#include "src/core/check.h"

namespace deepinfer::text {

Regex::Regex(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                        &offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw InputError(fmt::format("regular expression '{}' at offset {}: {}", pattern, offset,
                                 reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE);  // interpreted where JIT is missing
}

Regex::Regex(Regex&& other) noexcept : code_(std::exchange(other.code_, nullptr)) {}

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
      DI_CHECK(false, "PCRE2 match error {}", rc);
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
