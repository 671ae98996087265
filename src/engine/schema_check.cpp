#include "src/engine/schema_check.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <vector>

#include "src/core/check.h"

namespace deepinfer {

namespace {

using Json = nlohmann::json;

// Keywords the grammar engine never enforces (xgrammar's json_schema_converter warns and drops them, or has no
// code for them).
const std::vector<std::string> kNeverEnforced = {
    "not",          "if",          "then",        "else",          "dependentRequired", "dependentSchemas",
    "dependencies", "uniqueItems", "contains",    "minContains",   "maxContains",       "multipleOf",
    "additionalItems", "$dynamicRef", "$recursiveRef"};

// Keywords that constrain a value (validation and applicators); everything else is an annotation.
const std::vector<std::string> kAsserting = {
    "type",       "enum",          "const",         "maximum",         "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength",   "pattern",         "maxItems",         "minItems",
    "maxProperties", "minProperties", "required",   "allOf",           "anyOf",            "oneOf",
    "prefixItems", "items",        "properties",    "patternProperties", "additionalProperties", "propertyNames",
    "unevaluatedItems", "unevaluatedProperties", "$ref"};

// The keywords xgrammar reads alone when present, in the order it looks for them: the others beside it are dropped.
const std::vector<std::string> kShadowing = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"};

const std::vector<std::string> kObjectKeys = {"properties", "additionalProperties", "unevaluatedProperties"};
const std::vector<std::string> kArrayKeys = {"items", "prefixItems", "unevaluatedItems"};

bool has(const Json& s, const std::string& key) { return s.contains(key); }

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (const char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

class Checker {
 public:
  explicit Checker(std::string who) : who_(std::move(who)) {}

  void check(const Json& schema, const std::string& at, const std::optional<std::string>& default_type) {
    if (!schema.is_object()) return;  // true / false, or not a schema: xgrammar reports the latter itself
    for (const std::string& key : kNeverEnforced)
      if (has(schema, key)) refuse(key, at, "is not enforced by the grammar engine");
    check_shadowing(schema, at);
    check_ref(schema, at);
    for (const char* key : {"oneOf", "allOf"})
      if (has(schema, key) && !(schema[key].is_array() && schema[key].size() == 1))
        refuse(key, at, std::string(key) == "oneOf"
                            ? "with several branches is enforced as anyOf where the grammar engine cannot prove the "
                              "branches disjoint: use anyOf (the same where they are disjoint)"
                            : "of several schemas is not enforced (the grammar engine admits any value): merge them "
                              "into one schema");
    check_type_keywords(schema, at, default_type);
    recurse(schema, at);
  }

 private:
  [[noreturn]] void refuse(const std::string& key, const std::string& at, const std::string& what) const {
    throw InputError(fmt::format("{}: json_schema keyword '{}' at {} {}; constraint_satisfied could not mean the "
                                 "output validates, so the schema is refused", who_, key, "#" + at, what));
  }

  // $ref, const, enum, anyOf, oneOf and allOf: the first present is all xgrammar reads of this schema.
  void check_shadowing(const Json& schema, const std::string& at) const {
    const auto present = [&](const std::string& key) { return has(schema, key); };
    const auto first = std::find_if(kShadowing.begin(), kShadowing.end(), present);
    if (first == kShadowing.end()) return;
    for (const std::string& key : kAsserting) {
      if (key == *first || !has(schema, key)) continue;
      if (key == "type" && (*first == "const" || *first == "enum") && values_have_type(schema, *first)) continue;
      refuse(key, at, fmt::format("beside '{}' is not enforced (the grammar engine reads only '{}' there): move it "
                                  "into the {}", *first, *first, *first == "$ref" ? "referenced schema" : "values"));
    }
  }

  static bool value_has_type(const Json& value, const std::string& type) {
    if (type == "string") return value.is_string();
    if (type == "integer") return value.is_number_integer() || (value.is_number_float() &&
                                                                 value.get<double>() == static_cast<double>(
                                                                     static_cast<int64_t>(value.get<double>())));
    if (type == "number") return value.is_number();
    if (type == "boolean") return value.is_boolean();
    if (type == "null") return value.is_null();
    if (type == "array") return value.is_array();
    if (type == "object") return value.is_object();
    return false;
  }

  // Every const/enum value is of (one of) the sibling "type": the type adds nothing the values do not enforce.
  static bool values_have_type(const Json& schema, const std::string& key) {
    const Json& type = schema["type"];
    std::vector<std::string> types;
    if (type.is_string()) types.push_back(type.get<std::string>());
    for (const Json& t : type.is_array() ? type : Json::array())
      if (t.is_string()) types.push_back(t.get<std::string>());
    const Json values = key == "const" ? Json::array({schema["const"]}) : schema["enum"];
    if (!values.is_array()) return false;
    return std::all_of(values.begin(), values.end(), [&](const Json& v) {
      return std::any_of(types.begin(), types.end(), [&](const std::string& t) { return value_has_type(v, t); });
    });
  }

  // Only references into this schema ("#", "#/...") are resolved; another document or an anchor is read as any value.
  void check_ref(const Json& schema, const std::string& at) const {
    if (!has(schema, "$ref") || !schema["$ref"].is_string()) return;
    const std::string ref = schema["$ref"].get<std::string>();
    if (ref != "#" && !ref.starts_with("#/"))
      refuse("$ref", at, fmt::format("= \"{}\" is not a reference into this schema (\"#/...\"): the grammar engine "
                                     "reads it as any value; inline the schema it names", ref));
  }

  // Keywords of one type where the grammar engine reads another first, or no type at all.
  void check_type_keywords(const Json& schema, const std::string& at,
                           const std::optional<std::string>& default_type) const {
    const auto present = [&](const std::string& key) { return has(schema, key); };
    if (std::any_of(kShadowing.begin(), kShadowing.end(), present)) return;
    const bool typed = has(schema, "type") || default_type.has_value();
    const bool object = std::any_of(kObjectKeys.begin(), kObjectKeys.end(), present);
    const bool array = std::any_of(kArrayKeys.begin(), kArrayKeys.end(), present);
    if (!typed && !object && !array) {
      for (const std::string& key : kAsserting)
        if (has(schema, key))
          refuse(key, at, "without a 'type' is not enforced (the grammar engine admits any value there): add the "
                          "type it is meant for");
    }
    // A string: a known format is read before the pattern, the pattern before the lengths.
    if (has(schema, "format"))
      for (const char* key : {"pattern", "minLength", "maxLength"})
        if (has(schema, key))
          refuse(key, at, "beside 'format' is not enforced (the grammar engine reads the format first)");
    if (has(schema, "pattern"))
      for (const char* key : {"minLength", "maxLength"})
        if (has(schema, key))
          refuse(key, at, "beside 'pattern' is not enforced (the grammar engine reads the pattern alone): put the "
                          "length into the pattern");
  }

  void recurse(const Json& schema, const std::string& at) {
    for (const char* key : {"properties", "patternProperties", "$defs", "definitions"})
      if (has(schema, key) && schema[key].is_object())
        for (const auto& [name, sub] : schema[key].items())
          check(sub, fmt::format("{}/{}/{}", at, key, escape_pointer(name)), std::nullopt);
    for (const char* key : {"additionalProperties", "unevaluatedProperties", "items", "unevaluatedItems"})
      if (has(schema, key)) check(schema[key], fmt::format("{}/{}", at, key), std::nullopt);
    if (has(schema, "propertyNames")) check(schema["propertyNames"], at + "/propertyNames", "string");
    for (const char* key : {"prefixItems", "anyOf", "oneOf", "allOf"})
      if (has(schema, key) && schema[key].is_array())
        for (size_t i = 0; i < schema[key].size(); ++i)
          check(schema[key][i], fmt::format("{}/{}/{}", at, key, i), std::nullopt);
  }

  std::string who_;
};

}  // namespace

void check_schema_enforceable(const Json& schema, const std::string& who) {
  Checker(who).check(schema, "", std::nullopt);
}

nlohmann::ordered_json with_whole_integer_bounds(const nlohmann::ordered_json& schema) {
  if (schema.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& item : schema) out.push_back(with_whole_integer_bounds(item));
    return out;
  }
  if (!schema.is_object()) return schema;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const bool integer = schema.value("type", nlohmann::ordered_json()) == "integer";
  for (const auto& [key, value] : schema.items()) {
    if (!integer || !value.is_number_float()) {
      out[key] = with_whole_integer_bounds(value);
      continue;
    }
    const double x = value.get<double>();
    if (key == "minimum" || key == "exclusiveMinimum") {
      // > x for a fractional x is >= ceil(x); a whole x keeps its keyword.
      const bool whole = x == std::floor(x);
      out[whole ? key : "minimum"] = static_cast<int64_t>(std::ceil(x));
    } else if (key == "maximum" || key == "exclusiveMaximum") {
      const bool whole = x == std::floor(x);
      out[whole ? key : "maximum"] = static_cast<int64_t>(std::floor(x));
    } else {
      out[key] = value;
    }
  }
  return out;
}

}  // namespace deepinfer
