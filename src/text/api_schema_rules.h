// What the DeepSeek API (deepseek-recipe 0.2.0, probed) checks of the JSON Schemas a chat request carries: a tool's
// `parameters` and response_format's json_schema. A schema is read against the JSON Schema vocabulary (keywords of
// the wrong kind: a `format` or `pattern` that is not a string, a length that is not a non-negative integer, a
// `multipleOf` of 0, a `type` that names no type, a subschema that is neither an object nor a boolean). A strict
// schema (a tool with "strict": true, a json_schema with "strict": true) is instead read into the API's own types:
// the fields it keeps must be of their kind (others are dropped unread), and it is held to the subset the API
// enforces: every schema says its `type` (or is an `anyOf` of typed schemas, or a `$ref`); a list of types holds
// scalar types; `format` is one of email, hostname, ipv4, ipv6, uuid; an integer's bounds, multipleOf, const and
// default are 64-bit integers; an array has `items`; an object has properties (but a tool's top object), all of
// them required where `required` is given, and additionalProperties not true; the top of a json_schema is an
// object.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::text {

// How a schema is read: the vocabulary alone, or also the strict subset as a tool's parameters (whose top object may
// have no properties: a function without arguments) or as a response format (whose top must be an object schema).
enum class SchemaUse { kSchema, kStrictToolParameters, kStrictResponse };

// InputError "<what>: <why>" naming the keyword and where it sits (a JSON pointer) for the first rule broken.
void check_api_schema(const nlohmann::ordered_json& schema, SchemaUse use, const std::string& what);

// A strict tool's parameters as the API shows them in the prompt (it reads them into its own types and writes them
// back): per type the keywords it keeps, in its order (a string's description, pattern, format, enum; a number's
// description, const, default, bounds, multipleOf; an array's items, description; an object's properties, then
// "additionalProperties": false and every property required, then its description); others are dropped. The
// schema must have passed check_api_schema as strict tool parameters.
nlohmann::ordered_json strict_tool_form(const nlohmann::ordered_json& schema);

}  // namespace deepinfer::text
