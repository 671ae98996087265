// UTF-8 helpers for the tokenizer: encoding a code point, walking code points, validation, and the lossy decoding
// Hugging Face's tokenizers applies to decoded bytes (Rust's String::from_utf8_lossy: each maximal invalid subpart
// becomes one U+FFFD, as the Unicode standard recommends).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::text {

void append_utf8(std::string& out, char32_t c);
// The code point at `at` (valid UTF-8 assumed) and its length in bytes.
char32_t next_code_point(std::string_view s, size_t at, size_t* length);
bool is_valid_utf8(std::string_view s);
std::string utf8_lossy(std::string_view bytes);

}  // namespace deepinfer::text
