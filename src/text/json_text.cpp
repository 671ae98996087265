#include "src/text/json_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

namespace deepinfer::text {

std::string json_escaped(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else out += c;
    }
  }
  return out;
}

namespace {

// A float as deepseek-recipe 0.2.0 writes it (found by probing it): the shortest digits that read back as the same
// double; plain decimal when the decimal exponent is in the style's range (an integral value keeps ".0"), else one
// digit, the rest after a point, and "e" with the exponent's sign, padded to the style's width. V4's encoding: [-5,
// 16), no padding (1e-7, 0.00001, 1e+16); V4.1's, Python's repr: [-4, 16), two digits (1e-07, 1e-05, 1e+16).
std::string recipe_float(double x, JsonFloats style) {
  char buffer[64];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::scientific);
  const std::string scientific(buffer, r.ptr);  // "-d.ddde+XX"
  const size_t e = scientific.find('e');
  const int exponent = std::stoi(scientific.substr(e + 1));
  const bool negative = scientific[0] == '-';
  std::string digits;
  for (char c : scientific.substr(negative ? 1 : 0, e - (negative ? 1 : 0)))
    if (c != '.') digits += c;
  // (appends, not operator+: GCC 12 warns falsely of overlapping copies in the latter)
  std::string out = negative ? "-" : "";
  const int lowest_decimal = style == JsonFloats::kV4 ? -5 : -4;
  if (exponent >= lowest_decimal && exponent < 16) {
    const int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out.append("0.").append(static_cast<size_t>(-point), '0').append(digits);
    } else if (point >= static_cast<int>(digits.size())) {
      out.append(digits).append(static_cast<size_t>(point) - digits.size(), '0').append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(point)).append(1, '.').append(digits, static_cast<size_t>(point));
    }
    return out;
  }
  out.append(digits, 0, 1);
  if (digits.size() > 1) out.append(1, '.').append(digits, 1);
  const int magnitude = std::abs(exponent);
  out.append(style == JsonFloats::kV4 ? fmt::format("e{}{}", exponent < 0 ? '-' : '+', magnitude)
                                      : fmt::format("e{}{:02}", exponent < 0 ? '-' : '+', magnitude));
  return out;
}

void write(const nlohmann::ordered_json& v, JsonFloats style, std::string& out) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += '"' + json_escaped(key) + "\": ";
        write(value, style, out);
      }
      out += '}';
      return;
    }
    case nlohmann::ordered_json::value_t::array:
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ", ";
        write(v[i], style, out);
      }
      out += ']';
      return;
    case nlohmann::ordered_json::value_t::string:
      out += '"' + json_escaped(v.get_ref<const std::string&>()) + '"';
      return;
    case nlohmann::ordered_json::value_t::number_float:
      out += recipe_float(v.get<double>(), style);
      return;
    default:
      out += v.dump();  // integers, booleans, null
  }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value, JsonFloats floats) {
  std::string out;
  write(value, floats, out);
  return out;
}

}  // namespace deepinfer::text
