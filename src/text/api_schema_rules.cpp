#include "src/text/api_schema_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "src/core/check.h"

namespace deepinfer::text {

namespace {

using Json = nlohmann::ordered_json;

bool is_integer(const Json& v) {  // as JSON Schema counts them: 3.0 is an integer
  return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   v.get<double>() == std::floor(v.get<double>()));
}

// A 64-bit signed integer as written (the API reads an integer schema's bounds into one).
bool is_int64(const Json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

struct Checker {
  const std::string& what;

  [[noreturn]] void refuse(const std::string& at, const std::string& why) const {
    throw InputError(fmt::format("{}: {} (at {})", what, why, at.empty() ? "/" : at));
  }

  // The JSON Schema vocabulary's kinds of values for the keywords requests use.
  void vocabulary(const Json& s, const std::string& at) const {
    if (s.is_boolean()) return;
    if (!s.is_object()) refuse(at, fmt::format("a schema is an object or a boolean, not {}", s.dump()));
    static const std::set<std::string> kTypes = {"array", "boolean", "integer", "null", "number", "object", "string"};
    for (const auto& [key, v] : s.items()) {
      const std::string here = at + "/" + key;
      if (key == "type") {
        const auto names_a_type = [&](const Json& t) { return t.is_string() && kTypes.contains(t.get<std::string>()); };
        if (!(names_a_type(v) || (v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), names_a_type))))
          refuse(here, fmt::format("'type' {} names none of the JSON types", v.dump()));
      } else if (key == "format" || key == "pattern" || key == "description" || key == "title" || key == "$ref" ||
                 key == "$comment" || key == "$id") {
        if (!v.is_string()) refuse(here, fmt::format("'{}' is {}, not a string", key, v.dump()));
      } else if (key == "maxLength" || key == "minLength" || key == "maxItems" || key == "minItems" ||
                 key == "maxProperties" || key == "minProperties") {
        if (!is_integer(v) || v.get<double>() < 0)
          refuse(here, fmt::format("'{}' is {}, not a non-negative integer", key, v.dump()));
      } else if (key == "multipleOf") {
        if (!v.is_number() || v.get<double>() <= 0) refuse(here, fmt::format("'multipleOf' is {}, not above 0", v.dump()));
      } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
        if (!v.is_number()) refuse(here, fmt::format("'{}' is {}, not a number", key, v.dump()));
      } else if (key == "required") {
        if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const Json& r) { return r.is_string(); }))
          refuse(here, fmt::format("'required' is {}, not a list of property names", v.dump()));
      } else if (key == "enum") {
        if (!v.is_array()) refuse(here, fmt::format("'enum' is {}, not a list", v.dump()));
      } else if (key == "uniqueItems") {
        if (!v.is_boolean()) refuse(here, fmt::format("'uniqueItems' is {}, not true or false", v.dump()));
      } else if (key == "properties" || key == "$defs" || key == "definitions" || key == "patternProperties") {
        if (!v.is_object()) refuse(here, fmt::format("'{}' is {}, not an object of schemas", key, v.dump()));
        for (const auto& [name, sub] : v.items()) vocabulary(sub, here + "/" + name);
      } else if (key == "items" || key == "additionalProperties" || key == "not" || key == "contains" ||
                 key == "propertyNames" || key == "if" || key == "then" || key == "else") {
        vocabulary(v, here);
      } else if (key == "anyOf" || key == "allOf" || key == "oneOf" || key == "prefixItems") {
        if (!v.is_array() || v.empty()) refuse(here, fmt::format("'{}' is {}, not a non-empty list of schemas", key, v.dump()));
        for (size_t i = 0; i < v.size(); ++i) vocabulary(v[i], fmt::format("{}/{}", here, i));
      }
    }
  }

  // The strict subset, recursively over properties, items, anyOf and $defs.
  // `top_may_be_empty`: a tool's parameters, whose top object may have no properties (a function of no arguments).
  void strict_subset(const Json& s, const std::string& at, bool in_any_of, bool top_may_be_empty = false) const {
    if (!s.is_object()) refuse(at, "a strict schema is an object");
    if (in_any_of && !s.contains("type")) refuse(at, "each 'anyOf' entry of a strict schema needs its 'type'");
    if (!s.contains("type") && !s.contains("anyOf") && !s.contains("$ref"))
      refuse(at, "a strict schema gives 'type', 'anyOf' or '$ref'");
    if (s.contains("type") && s["type"].is_array())
      for (const Json& t : s["type"])
        if (t == "object" || t == "array")
          refuse(at + "/type", "a strict schema's list of types holds scalar types only (string, number, integer, "
                               "boolean, null)");
    const auto type_is = [&](const char* name) {
      const Json& t = s.value("type", Json());
      return t == name || (t.is_array() && std::find(t.begin(), t.end(), Json(name)) != t.end());
    };
    // The fields the API reads into its own types must be of their kind (others are dropped, whatever they hold).
    for (const char* key : {"description", "pattern", "format", "$ref"})
      if (s.contains(key) && !s[key].is_string())
        refuse(at + "/" + key, fmt::format("'{}' is {}, not a string", key, s[key].dump()));
    if (type_is("number"))
      for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
        if (s.contains(key) && !s[key].is_number())
          refuse(at + "/" + key, fmt::format("a number's '{}' is {}, not a number", key, s[key].dump()));
    if (s.contains("properties") && !s["properties"].is_object())
      refuse(at + "/properties", "'properties' is not an object of schemas");
    if (s.contains("required") && !(s["required"].is_array() && std::all_of(s["required"].begin(), s["required"].end(),
                                                                         [](const Json& r) { return r.is_string(); })))
      refuse(at + "/required", "'required' is not a list of property names");
    if (s.contains("anyOf") && !(s["anyOf"].is_array() && !s["anyOf"].empty()))
      refuse(at + "/anyOf", "'anyOf' is not a non-empty list of schemas");
    if (s.contains("format")) {
      static const std::set<std::string> kFormats = {"email", "hostname", "ipv4", "ipv6", "uuid"};
      if (!kFormats.contains(s["format"].get<std::string>()))
        refuse(at + "/format", fmt::format("format '{}' is none of email, hostname, ipv4, ipv6, uuid (what a strict "
                                           "schema may ask)", s["format"].get<std::string>()));
    }
    if (type_is("integer"))
      for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "const",
                              "default"})
        if (s.contains(key) && !is_int64(s[key]))
          refuse(at + "/" + key, fmt::format("an integer's '{}' is {}, not a 64-bit integer", key, s[key].dump()));
    if (type_is("number"))
      for (const char* key : {"const", "default"})
        if (s.contains(key) && !s[key].is_number())
          refuse(at + "/" + key, fmt::format("a number's '{}' is {}, not a number", key, s[key].dump()));
    if (s.value("type", Json()) == "string" && s.contains("enum"))
      for (const Json& e : s["enum"])
        if (!e.is_string()) refuse(at + "/enum", fmt::format("a string's 'enum' holds {}, not a string", e.dump()));
    if (type_is("array")) {
      if (!s.contains("items")) refuse(at, "a strict array schema needs 'items'");
      strict_subset(s["items"], at + "/items", false);
    }
    if (type_is("object")) {
      const bool empty = !s.contains("properties") || s["properties"].empty();
      if (empty && !top_may_be_empty) refuse(at, "an object with no properties is not allowed");
      if (s.contains("required")) {
        std::set<std::string> required, properties;
        for (const Json& r : s["required"]) required.insert(r.get<std::string>());
        if (!empty)
          for (const auto& [name, sub] : s["properties"].items()) properties.insert(name);
        if (required != properties) refuse(at + "/required", "required properties must be all the object's properties");
      }
      if (s.value("additionalProperties", Json(false)) == Json(true))
        refuse(at + "/additionalProperties", "additionalProperties may not be true");
      if (!empty)
        for (const auto& [name, sub] : s["properties"].items()) strict_subset(sub, at + "/properties/" + name, false);
    }
    if (s.contains("anyOf"))
      for (size_t i = 0; i < s["anyOf"].size(); ++i) strict_subset(s["anyOf"][i], fmt::format("{}/anyOf/{}", at, i), true);
    for (const char* defs : {"$defs", "definitions"})
      if (s.contains(defs))
        for (const auto& [name, sub] : s[defs].items()) strict_subset(sub, fmt::format("{}/{}/{}", at, defs, name), false);
  }
};

}  // namespace

Json strict_tool_form(const Json& s) {
  Json out = Json::object();
  const auto copy = [&](const char* key) {
    if (s.contains(key)) out[key] = s[key];
  };
  if (s.contains("type")) {
    const Json& type = s["type"];
    out["type"] = type;
    if (type == "string") {
      for (const char* key : {"description", "pattern", "format", "enum"}) copy(key);
    } else if (type == "integer" || type == "number") {
      for (const char* key : {"description", "const", "default", "minimum", "maximum", "exclusiveMinimum",
                              "exclusiveMaximum", "multipleOf"})
        copy(key);
    } else if (type == "array") {
      out["items"] = strict_tool_form(s["items"]);
      copy("description");
    } else if (type == "object") {
      out["properties"] = Json::object();
      Json required = Json::array();
      if (s.contains("properties"))
        for (const auto& [name, sub] : s["properties"].items()) {
          out["properties"][name] = strict_tool_form(sub);
          required.push_back(name);
        }
      out["additionalProperties"] = false;
      out["required"] = std::move(required);
      copy("description");
    } else {  // boolean, null, a list of types
      copy("description");
    }
  } else if (s.contains("anyOf")) {
    out["anyOf"] = Json::array();
    for (const Json& sub : s["anyOf"]) out["anyOf"].push_back(strict_tool_form(sub));
    copy("description");
  } else {
    copy("$ref");
  }
  return out;
}

void check_api_schema(const Json& schema, SchemaUse use, const std::string& what) {
  const Checker checker{what};
  // A strict schema is read into the API's types (the fields it keeps checked, the rest dropped); another against
  // the JSON Schema vocabulary.
  if (use == SchemaUse::kSchema) checker.vocabulary(schema, "");
  if (use == SchemaUse::kStrictResponse && !(schema.is_object() && schema.value("type", Json()) == "object"))
    throw InputError(fmt::format("{}: the top of a strict response_format json_schema must be an object schema", what));
  if (use != SchemaUse::kSchema) checker.strict_subset(schema, "", false, use == SchemaUse::kStrictToolParameters);
}

}  // namespace deepinfer::text
