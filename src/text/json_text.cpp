#include "src/text/json_text.h"

#include <fmt/format.h>

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

void write(const nlohmann::ordered_json& v, std::string& out) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += '"' + json_escaped(key) + "\": ";
        write(value, out);
      }
      out += '}';
      return;
    }
    case nlohmann::ordered_json::value_t::array:
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ", ";
        write(v[i], out);
      }
      out += ']';
      return;
    case nlohmann::ordered_json::value_t::string:
      out += '"' + json_escaped(v.get_ref<const std::string&>()) + '"';
      return;
    default:
      out += v.dump();  // numbers, booleans, null
  }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value) {
  std::string out;
  write(value, out);
  return out;
}

}  // namespace deepinfer::text
