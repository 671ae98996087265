// json_schema constraints the grammar engine would not enforce are refused by keyword and place (issue #52), so that
// constraint_satisfied never claims what was not enforced; the schemas it does enforce pass.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "src/core/error.h"
#include "src/engine/schema_check.h"

namespace deepinfer {
namespace {

std::string error_of(const char* schema) {
  try {
    check_schema_enforceable(nlohmann::json::parse(schema), "request id \"r\"");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SchemaCheck, RefusesWhatTheGrammarDoesNotEnforce) {
  const std::pair<const char*, const char*> refused[] = {
      {R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})", "'uniqueItems' at #"},
      {R"({"type": "array", "contains": {"const": 3}})", "'contains' at #"},
      {R"({"type": "array", "items": {"type": "integer"}, "minContains": 1})", "'minContains' at #"},
      {R"({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 7}}})",
       "'multipleOf' at #/properties/a"},
      {R"({"type": "number", "multipleOf": 0.5})", "'multipleOf' at #"},
      {R"({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}})", "'if' at #"},
      {R"({"type": "object", "else": {}})", "'else' at #"},
      {R"({"not": {"type": "string"}})", "'not' at #"},
      {R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})", "'allOf' at #"},
      {R"({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}})",
       "'$ref' at #/properties/a = \"https://example.com/a.json\""},
      {R"({"$ref": "#node", "$defs": {"n": {"$anchor": "node"}}})", "'$ref' at #"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "'dependentRequired' at #"},
      {R"({"type": "object", "dependencies": {"a": ["b"]}})", "'dependencies' at #"},
      {R"({"type": "array", "items": [{"type": "integer"}], "additionalItems": false})", "'additionalItems' at #"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "'oneOf' at #"},
      {R"({"$ref": "#/$defs/a", "maxLength": 3, "$defs": {"a": {"type": "string"}}})",
       "'maxLength' at # beside '$ref'"},
      {R"({"anyOf": [{"type": "string"}, {"type": "null"}], "type": "string"})", "'type' at # beside 'anyOf'"},
      {R"({"properties": {"a": {"type": "integer"}}, "anyOf": [{"required": ["a"]}]})",
       "'properties' at # beside 'anyOf'"},
      {R"({"enum": ["a", 1], "type": "string"})", "'type' at # beside 'enum'"},
      {R"({"const": 5, "minimum": 9})", "'minimum' at # beside 'const'"},
      {R"({"minLength": 3})", "'minLength' at # without a 'type'"},
      {R"({"required": ["a"]})", "'required' at # without a 'type'"},
      {R"({"type": "string", "format": "email", "maxLength": 5})", "'maxLength' at # beside 'format'"},
      {R"({"type": "string", "pattern": "^a+$", "minLength": 2})", "'minLength' at # beside 'pattern'"},
      {R"({"type": "object", "properties": {"a/b": {"type": "array", "items": {"uniqueItems": true}}}})",
       "'uniqueItems' at #/properties/a~1b/items"},
      {R"({"type": "object", "$defs": {"x": {"type": "array", "contains": {}}}})", "'contains' at #/$defs/x"},
      {R"({"anyOf": [{"type": "string"}, {"type": "array", "uniqueItems": true}]})", "'uniqueItems' at #/anyOf/1"},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}, {"not": {}}]})", "'not' at #/prefixItems/1"},
  };
  for (const auto& [schema, expected] : refused) {
    const std::string error = error_of(schema);
    EXPECT_NE(error.find(std::string("request id \"r\": json_schema keyword ") + expected), std::string::npos)
        << schema << "\n  -> " << error;
  }
}

TEST(SchemaCheck, PassesWhatTheGrammarEnforces) {
  const char* accepted[] = {
      // check_structured_output.py's schemas
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer",
          "minimum": 0, "maximum": 150}, "member": {"type": "boolean"}}, "required": ["name", "age", "member"],
          "additionalProperties": false})",
      R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, "status":
          {"enum": ["open", "closed", "held"]}, "items": {"type": "array", "minItems": 1, "maxItems": 3, "items":
          {"type": "object", "properties": {"sku": {"type": "integer"}, "price": {"type": "number"}}, "required":
          ["sku", "price"], "additionalProperties": false}}}, "required": ["id", "status", "items"]})",
      R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4})",
      // references into the schema, single-branch allOf/oneOf, typed enums, annotations, formats alone
      R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {"next": {"anyOf":
          [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}}, "title": "list", "description": "a linked list"})",
      R"({"allOf": [{"type": "integer", "exclusiveMinimum": 0}]})",
      R"({"oneOf": [{"type": "string", "minLength": 1, "maxLength": 4}]})",
      R"({"type": "string", "enum": ["a", "b"], "description": "a letter"})",
      R"({"type": ["integer", "null"], "const": 3})",
      R"({"type": "string", "format": "date-time"})",
      R"({"type": "object", "propertyNames": {"maxLength": 3}, "minProperties": 1, "maxProperties": 2,
          "patternProperties": {"^x": {"type": "number", "maximum": 1}}})",
      R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})",
      R"({"items": {"type": "integer"}, "minItems": 1})",
      // property names, not keywords
      R"({"type": "object", "properties": {"if": {"type": "string"}, "not": {"type": "integer"}}})",
      R"(true)",
      R"({"$ref": "#"})",
  };
  for (const char* schema : accepted) EXPECT_EQ(error_of(schema), "") << schema;
}

// An integer's fractional bounds become the whole numbers they admit (the grammar engine refuses fractional ones).
TEST(SchemaCheck, IntegerBoundsAsWholeNumbers) {
  const auto whole = [](const char* schema) {
    return with_whole_integer_bounds(nlohmann::ordered_json::parse(schema)).dump();
  };
  EXPECT_EQ(whole(R"({"type": "integer", "minimum": 1.5, "maximum": 7.5})"), R"({"type":"integer","minimum":2,"maximum":7})");
  EXPECT_EQ(whole(R"({"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": -0.5})"),
            R"({"type":"integer","minimum":2,"maximum":-1})");
  EXPECT_EQ(whole(R"({"type": "integer", "exclusiveMinimum": 3.0})"), R"({"type":"integer","exclusiveMinimum":3})");
  EXPECT_EQ(whole(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": -2.5}, "x": {"type": "number", "minimum": 1.5}}})"),
            R"({"type":"object","properties":{"n":{"type":"integer","minimum":-2},"x":{"type":"number","minimum":1.5}}})");
}

}  // namespace
}  // namespace deepinfer
