// Which JSON Schemas structured output can honour. The grammar engine (xgrammar) turns a schema into a grammar, but
// some keywords it drops (uniqueItems, contains, if/then/else, not, multipleOf, dependencies, a remote $ref, allOf of
// several schemas, oneOf whose branches it cannot prove disjoint) and some it reads one of where the schema has
// several ($ref, const, enum, anyOf, oneOf, allOf each shadow their siblings; a string's format shadows its pattern,
// its pattern the lengths; a type-specific keyword without a type is read as "any value"). A request whose schema
// relies on any of these is refused up front, naming the keyword and where it sits, so that a result's
// "constraint_satisfied": true always means the output validates against the whole schema.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace deepinfer {

// InputError "<who>: json_schema keyword '<k>' at <JSON pointer> ..." for the first keyword the grammar would not
// enforce.
void check_schema_enforceable(const nlohmann::json& schema, const std::string& who);

// The same schema with each integer's fractional bounds as the whole numbers they admit (the grammar engine takes
// whole bounds only): minimum 1.5 -> 2, maximum 2.5 -> 2, exclusiveMinimum 1.5 -> minimum 2, exclusiveMaximum 2.5 ->
// maximum 2; a bound written 3.0 -> 3. Key order kept.
nlohmann::ordered_json with_whole_integer_bounds(const nlohmann::ordered_json& schema);

}  // namespace deepinfer
