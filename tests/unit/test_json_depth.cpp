// The JSON depth bound checked on text before parsing (issue #52).
#include <gtest/gtest.h>

#include <string>

#include "src/core/error.h"
#include "src/core/json_depth.h"

namespace deepinfer {
namespace {

std::string nested(int depth, const std::string& inner = "0") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(JsonDepth, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(json_too_deep_at(nested(256)), 0);
  EXPECT_EQ(json_too_deep_at(nested(257)), 1);
  EXPECT_EQ(json_too_deep_at(nested(100000)), 1);
  EXPECT_EQ(json_too_deep_at(std::string(300, '{')), 1);  // malformed: counted all the same
  EXPECT_EQ(json_too_deep_at("{\"a\": [1, {\"b\": []}], \"c\": {}}", 4), 0);  // {, [, {, [: 4 deep
  EXPECT_EQ(json_too_deep_at("{\"a\": [1, {\"b\": []}], \"c\": {}}", 3), 1);
  // Brackets inside strings are text, escaped quotes do not end a string, an escaped backslash does not escape.
  EXPECT_EQ(json_too_deep_at("[\"" + std::string(1000, '[') + "\"]"), 0);
  EXPECT_EQ(json_too_deep_at("[\"\\\"" + std::string(1000, '{') + "\"]"), 0);
  EXPECT_EQ(json_too_deep_at("[\"\\\\\", " + nested(300) + "]"), 1);
  // Siblings do not add up: 1000 arrays side by side are 2 deep.
  std::string siblings = "[";
  for (int i = 0; i < 1000; ++i) siblings += (i ? ",[1]" : "[1]");
  EXPECT_EQ(json_too_deep_at(siblings + "]", 2), 0);
  // The line where the bound is passed.
  EXPECT_EQ(json_too_deep_at("{\n\"a\": 1,\n\"b\":\n" + nested(300) + "}"), 4);
}

TEST(JsonDepth, MessagesNameWhereAndTheBound) {
  try {
    check_json_depth(nested(100000), "requests.jsonl:7");
    FAIL() << "not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("requests.jsonl:7: JSON nested more than 256 levels deep"),
              std::string::npos) << e.what();
  }
  try {
    check_json_file_depth("{\n\n" + nested(300) + "}", "config.json");
    FAIL() << "not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json:3: JSON nested more than 256 levels deep"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_json_depth(nested(255), "x"));
}

}  // namespace
}  // namespace deepinfer
