// The chat templates and request parsing against deepseek-recipe 0.2.0: tests/fixtures/make_chat_fixtures.py
// wrote 1,200 random OpenAI chat requests (system/user/assistant/tool turns, text parts, reasoning, tool calls and
// tools with every tool_choice, prefix messages,
// thinking on/off/adaptive, every reasoning effort; text with special-token spellings, CJK, emoji, whitespace)
// with the prompt text, special-token ranges and ids deepseek-recipe renders and encodes for V4 and V4.1, and
// the requests it refuses. Every one must be equal (and refused).
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "src/core/error.h"
#include "src/text/chat_request.h"
#include "src/text/chat_template.h"
#include "src/text/json_text.h"
#include "tests/unit/chat_fixtures.h"

namespace deepinfer::text {
namespace {

const std::filesystem::path kChat = DEEPINFER_CHAT_FIXTURE;
const std::filesystem::path kTokenizer = std::filesystem::path(DEEPINFER_TOKENIZER_FIXTURE) / "tokenizer.json";
const std::filesystem::path kProse = std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests/fixtures/chat/chat_prose.json";

std::vector<nlohmann::ordered_json> fixture(const char* name = "conversations.jsonl") {  // key order kept: the
  std::ifstream in(kChat / name);                                                      // bodies' schemas show it
  std::vector<nlohmann::ordered_json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::ordered_json::parse(line));
  return lines;
}

// The V4 tokenizer with V4.1's <｜System｜> appended at `id`, as the fixture gave both implementations.
BpeTokenizer v41_tokenizer(int32_t id) {
  return BpeTokenizer::load(testing::write_v41_tokenizer(kTokenizer, id, "deepinfer-v41-tokenizer.json"));
}

// Renders and encodes every request of a fixture written by deepseek-recipe (make_chat_fixtures.py and
// make_grounding_fixtures.py) and compares; returns (renderings, mismatches, refused).
std::tuple<int64_t, int64_t, int64_t> compare_with_recipe(const std::vector<nlohmann::ordered_json>& lines) {
  const ChatProse prose = ChatProse::load(kProse);
  const BpeTokenizer v4 = BpeTokenizer::load(kTokenizer);
  const BpeTokenizer v41 = v41_tokenizer(lines[0].at("v41_system_token_id").get<int32_t>());
  int64_t rendered = 0, refused = 0, mismatches = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const nlohmann::ordered_json& line = lines[i];
    const std::string what = fmt::format("fixture line {}", i + 1);
    if (line.contains("error")) {
      EXPECT_THROW(parse_chat_request(line["body"], what), InputError) << line.dump() << " (recipe: " << line["error"];
      ++refused;
      continue;
    }
    const ChatConversation conversation = parse_chat_request(line["body"], what);
    for (const auto& [name, format, tokenizer] :
         {std::tuple{"v4", ChatFormat::kV4, &v4}, std::tuple{"v41", ChatFormat::kV41, &v41}}) {
      const nlohmann::ordered_json& want = line[name];
      const RenderedChat got = render_chat(format, prose, conversation, what);
      std::vector<std::pair<size_t, size_t>> want_ranges;
      for (const auto& r : want["special_ranges"]) want_ranges.emplace_back(r[0].get<size_t>(), r[1].get<size_t>());
      const bool same = got.text == want["prompt"].get<std::string>() && got.special_ranges == want_ranges &&
                        encode_chat(*tokenizer, got) == want["ids"].get<std::vector<int32_t>>();
      if (!same && ++mismatches <= 5) {  // where the texts part
        const std::string want_text = want["prompt"].get<std::string>();
        size_t at = 0;
        while (at < got.text.size() && at < want_text.size() && got.text[at] == want_text[at]) ++at;
        at = at > 120 ? at - 120 : 0;
        while (at > 0 && (static_cast<unsigned char>(want_text[at]) & 0xC0) == 0x80) --at;  // a character's start
        ADD_FAILURE() << name << ", " << what << ": " << line["body"].dump() << "\n got: ..."
                      << nlohmann::ordered_json(got.text.substr(at, 400)).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\nwant: ..."
                      << nlohmann::ordered_json(want_text.substr(at, 400)).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      }
      ++rendered;
    }
  }
  return {rendered, mismatches, refused};
}

TEST(ChatTemplate, RendersAndEncodesAsDeepseekRecipe) {
  const std::vector<nlohmann::ordered_json> lines = fixture();
  ASSERT_GT(lines.size(), 1200u);
  const auto [rendered, mismatches, refused] = compare_with_recipe(lines);
  std::printf("[ chat ] %lld renderings (V4 and V4.1) equal to deepseek-recipe's: %lld; %lld bad requests refused\n",
              static_cast<long long>(rendered), static_cast<long long>(rendered - mismatches),
              static_cast<long long>(refused));
  EXPECT_EQ(mismatches, 0);
  EXPECT_GE(refused, 100);
}

// The grounding tokens' spellings (<｜ref｜>, <｜box｜>, ...): special tokens in assistant text, text elsewhere (issue #53).
TEST(ChatTemplate, GroundingTokensAsDeepseekRecipe) {
  const std::vector<nlohmann::ordered_json> lines = fixture("conversations_grounding.jsonl");
  ASSERT_EQ(lines.size(), 121u);
  const auto [rendered, mismatches, refused] = compare_with_recipe(lines);
  std::printf("[ chat ] grounding: %lld renderings, %lld differ from deepseek-recipe's\n",
              static_cast<long long>(rendered), static_cast<long long>(mismatches));
  EXPECT_EQ(rendered, 240);
  EXPECT_EQ(mismatches, 0);
}

// Numbers in tool schemas and DSML values as deepseek-recipe 0.2.0 renders them (each expected string read from its
// rendering of a V4 tool schema holding the value; issue #53): floats in the shortest digits, decimal for exponents
// in [-5, 16), else "e" with a sign and no padding; integers as they are; an integer past 64 bits a float.
TEST(ChatTemplate, NumbersAsDeepseekRecipeWritesThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1e-7", "1e-7"}, {"1e23", "1e+23"}, {"0.1", "0.1"}, {"1.5", "1.5"}, {"-0.0", "-0.0"}, {"1e300", "1e+300"},
      {"123456789012345678", "123456789012345678"}, {"2.5e-5", "0.000025"}, {"1e16", "1e+16"},
      {"1e15", "1000000000000000.0"}, {"12345.678", "12345.678"}, {"3.0", "3.0"}, {"1e21", "1e+21"},
      {"5e-324", "5e-324"}, {"1e-6", "1e-6"}, {"1.5e-6", "1.5e-6"}, {"9.99e-7", "9.99e-7"}, {"1e-5", "0.00001"},
      {"0.0001", "0.0001"}, {"123456789.123", "123456789.123"}, {"1000000000000000.5", "1000000000000000.5"},
      {"9007199254740993.0", "9007199254740992.0"}, {"0.0", "0.0"}, {"1152921504606846976.0", "1.152921504606847e+18"},
      {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"100000000000000000000000", "1e+23"}, {"-7", "-7"}};
  for (const auto& [json, want] : cases)
    EXPECT_EQ(python_json(nlohmann::ordered_json::parse(json)), want) << json;
  EXPECT_EQ(python_json(nlohmann::ordered_json::parse(R"({"a": [1e-7, 2, "x"], "b": 0.5})")),
            R"({"a": [1e-7, 2, "x"], "b": 0.5})");
}

// What deepseek-recipe 0.2.0 refuses (each probed there), refused here too, naming the field (issue #53).
TEST(ChatTemplate, RefusesWhatDeepseekRecipeRefuses) {
  const auto body = [](const char* extra) {
    return nlohmann::ordered_json::parse(fmt::format(R"({{"messages": [{{"role": "user", "content": "Hi"}}]{}}})", extra));
  };
  const auto tools = [&](const char* parameters) {
    return body(fmt::format(R"(, "tools": [{{"type": "function", "function": {{"name": "f", "parameters": {}}}}}])",
                            parameters).c_str());
  };
  const std::vector<std::pair<nlohmann::ordered_json, std::string>> refused = {
      {body(R"(, "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])"),
       "tools[1].function.name 'f' is an earlier tool's too"},
      {tools(R"({"type": "string"})"), "tools[0].function.parameters must be a JSON Schema of type \"object\""},
      {tools(R"({"properties": {"a": {"type": "string"}}})"), "must be a JSON Schema of type \"object\""},
      {tools("{}"), "must be a JSON Schema of type \"object\""},
      {tools(R"("{}")"), "must be a JSON Schema of type \"object\""},
      {tools("[]"), "must be a JSON Schema of type \"object\""},
      {tools(R"({"type": ["object", "null"]})"), "must be a JSON Schema of type \"object\""},
      {nlohmann::ordered_json::parse(R"({"messages": [{"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "x", "tool_calls": []}, {"role": "user", "content": "Hi"}]})"),
       "messages[1].tool_calls is an empty list"},
      {nlohmann::ordered_json::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}}],
          "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
          {"role": "tool", "content": "r", "tool_call_id": "x"}]})"),
       "messages[1].tool_calls[0]: a tool call needs its 'id'"}};
  for (const auto& [request, message] : refused) {
    try {
      parse_chat_request(request, "request");
      ADD_FAILURE() << "accepted: " << request.dump();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(parse_chat_request(tools(R"({"type": "object"})"), "request"));
  EXPECT_NO_THROW(parse_chat_request(body(R"(, "tools": [{"type": "function", "function": {"name": "f"}}])"), "request"));
}

TEST(ChatTemplate, NamesTheFieldOfABadRequest) {
  const auto error_of = [](const std::string& body) {
    try {
      parse_chat_request(nlohmann::ordered_json::parse(body), "requests.jsonl line 7");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": 5}]})"),
            "requests.jsonl line 7: messages[0].content: content should be a string or a list of text parts");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "robot", "content": "x"}]})"),
            "requests.jsonl line 7: messages[0]: unknown role 'robot' (system, user, assistant, tool or latest_reminder)");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "tool", "content": "x"}]})"),
            "requests.jsonl line 7: messages[0]: a tool message answers the tool calls of the assistant message before "
            "it");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "huge"})"),
            "requests.jsonl line 7: reasoning_effort 'huge' is none of none, minimal, low, medium, high, xhigh, ultra, "
            "max");
}

TEST(ChatTemplate, RefusesProseWithoutAnEffort) {
  const auto path = std::filesystem::temp_directory_path() / "deepinfer-bad-prose.json";
  std::ofstream(path) << R"({"v4": {"effort": {"low": ""}}})";
  EXPECT_THROW(ChatProse::load(path), InputError);
}

}  // namespace
}  // namespace deepinfer::text
