#include "src/text/utf8.h"

namespace deepinfer::text {

namespace {

// The length of the well-formed sequence starting at `at`, or 0 with *invalid = the maximal subpart's length
// (at least 1): the bytes that begin a well-formed sequence but do not complete it.
size_t well_formed(std::string_view s, size_t at, size_t* invalid) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(at);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte; later ones are 80..BF
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
  else if (b0 == 0xE0) need = 2, lo = 0xA0;
  else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) need = 2;
  else if (b0 == 0xED) need = 2, hi = 0x9F;
  else if (b0 == 0xF0) need = 3, lo = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) need = 3;
  else if (b0 == 0xF4) need = 3, hi = 0x8F;
  else {
    *invalid = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    const bool ok = at + k < s.size() && byte(at + k) >= (k == 1 ? lo : 0x80) && byte(at + k) <= (k == 1 ? hi : 0xBF);
    if (!ok) {
      *invalid = k;
      return 0;
    }
  }
  return need + 1;
}

}  // namespace

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

char32_t next_code_point(std::string_view s, size_t at, size_t* length) {
  const auto b0 = static_cast<uint8_t>(s[at]);
  size_t n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(s[at + k]) & 0x3F);
  *length = n;
  return c;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t at = 0, invalid = 0; at < s.size();) {
    const size_t n = well_formed(s, at, &invalid);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t at = 0; at < bytes.size();) {
    size_t invalid = 0;
    const size_t n = well_formed(bytes, at, &invalid);
    if (n > 0) {
      out.append(bytes.substr(at, n));
      at += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      at += invalid;
    }
  }
  return out;
}

}  // namespace deepinfer::text
