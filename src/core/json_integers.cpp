#include "src/core/json_integers.h"

#include <cctype>

namespace deepinfer {

namespace {

// Whether the digits (no sign, no leading zeros but a lone "0") exceed `limit`, both decimal strings.
bool exceeds(std::string_view digits, std::string_view limit) {
  if (digits.size() != limit.size()) return digits.size() > limit.size();
  return digits > limit;
}

}  // namespace

std::string json_integer_beyond_64_bits(std::string_view text) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && !std::isdigit(static_cast<unsigned char>(c))) continue;
    // A number: its sign, digits, and whether a fraction or an exponent follows.
    const size_t start = i;
    const bool negative = c == '-';
    size_t digits_start = negative ? i + 1 : i;
    size_t end = digits_start;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    const bool fraction = end < text.size() && (text[end] == '.' || text[end] == 'e' || text[end] == 'E');
    size_t rest = end;
    while (rest < text.size() && (std::isdigit(static_cast<unsigned char>(text[rest])) || text[rest] == '.' ||
                                  text[rest] == 'e' || text[rest] == 'E' || text[rest] == '+' || text[rest] == '-'))
      ++rest;
    i = rest > start ? rest - 1 : start;
    if (fraction || end == digits_start) continue;
    while (digits_start + 1 < end && text[digits_start] == '0') ++digits_start;
    const std::string_view digits = text.substr(digits_start, end - digits_start);
    if (negative ? exceeds(digits, "9223372036854775808") : exceeds(digits, "18446744073709551615"))
      return std::string(text.substr(start, end - start));
  }
  return {};
}

}  // namespace deepinfer
