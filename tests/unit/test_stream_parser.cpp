// The stream parser against deepseek-recipe 0.2.0's stream processor: tests/fixtures/make_stream_fixtures.py fed
// 1,500 output token streams (reasoning then content, or content alone; emoji split across tokens; byte tokens that
// leave UTF-8 incomplete or invalid; stop sequences within a token, across tokens, never met) one token at a time
// and kept every chat-completion delta. The C++ parser must give the same events in the same order.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "src/text/stream_parser.h"
#include "tests/unit/chat_fixtures.h"

namespace deepinfer::text {
namespace {

const std::filesystem::path kChat = DEEPINFER_CHAT_FIXTURE;
const std::filesystem::path kTokenizer = std::filesystem::path(DEEPINFER_TOKENIZER_FIXTURE) / "tokenizer.json";

using testing::event_fixture;
using testing::tool_event_fixture;

TEST(ChatStreamParser, GivesDeepseekRecipesEventsTokenByToken) {
  const BpeTokenizer tokenizer = BpeTokenizer::load(kTokenizer);
  std::ifstream in(kChat / "streams.jsonl");
  int64_t streams = 0, events = 0, mismatches = 0;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text);
    const nlohmann::json& body = line["request"];
    const bool thinking = !(body.contains("thinking") && body["thinking"]["type"] == "disabled");
    std::vector<std::string> stops;
    if (body.contains("stop")) stops = body["stop"].get<std::vector<std::string>>();
    ChatStreamParser parser(tokenizer, thinking, stops);
    nlohmann::json got = nlohmann::json::array();
    const std::vector<int32_t> tokens = line["tokens"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < tokens.size() && !parser.finished(); ++i)
      for (const StreamEvent& e : parser.push(tokens[i])) got.push_back(event_fixture(static_cast<int64_t>(i), e));
    if (!parser.finished())
      for (const StreamEvent& e : parser.finish("length")) got.push_back(event_fixture(-1, e));
    ++streams;
    events += static_cast<int64_t>(line["events"].size());
    if (got != line["events"] && ++mismatches <= 5)
      ADD_FAILURE() << "stream " << streams << " " << body.dump() << " tokens " << line["tokens"].dump()
                    << "\n got: " << got.dump() << "\nwant: " << line["events"].dump();
  }
  std::printf("[ stream ] %lld streams, %lld events: %lld streams differ from deepseek-recipe\n",
              static_cast<long long>(streams), static_cast<long long>(events), static_cast<long long>(mismatches));
  EXPECT_EQ(streams, 1500);
  EXPECT_EQ(mismatches, 0);
}

// 800 outputs of requests with tools: content, then a DSML block of 1-2 invokes with parameters of every JSON kind
// (some cut short), text after it; reasoning first in thinking mode.
TEST(ChatStreamParser, ParsesToolCallsAsDeepseekRecipe) {
  const BpeTokenizer tokenizer = BpeTokenizer::load(kTokenizer);
  std::ifstream in(kChat / "streams_tools.jsonl");
  int64_t streams = 0, events = 0, calls = 0, mismatches = 0;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text);
    const nlohmann::json& body = line["request"];
    const bool thinking = !(body.contains("thinking") && body["thinking"]["type"] == "disabled");
    ChatStreamParser parser(tokenizer, thinking, {}, /*tool_calls=*/true,
                            /*in_tool_calls=*/body.value("tool_choice", "") == "required");
    nlohmann::json got = nlohmann::json::array();
    const std::vector<int32_t> tokens = line["tokens"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < tokens.size() && !parser.finished(); ++i)
      for (const StreamEvent& e : parser.push(tokens[i])) got.push_back(tool_event_fixture(static_cast<int64_t>(i), e));
    if (!parser.finished())
      for (const StreamEvent& e : parser.finish("stop")) got.push_back(tool_event_fixture(-1, e));
    ++streams;
    events += static_cast<int64_t>(line["events"].size());
    for (const auto& e : line["events"]) calls += e[4].is_array() && e[4][1].is_string();
    if (got != line["events"] && ++mismatches <= 5)
      ADD_FAILURE() << "stream " << streams << " tokens " << line["tokens"].dump() << "\n got: " << got.dump()
                    << "\nwant: " << line["events"].dump();
  }
  std::printf("[ stream ] with tools: %lld streams, %lld events, %lld calls: %lld streams differ from deepseek-recipe\n",
              static_cast<long long>(streams), static_cast<long long>(events), static_cast<long long>(calls),
              static_cast<long long>(mismatches));
  EXPECT_EQ(streams, 800);
  EXPECT_EQ(mismatches, 0);
}

// The streams where this parser and deepseek-recipe were found to differ (issue #53;
// tests/fixtures/make_nasty_stream_fixtures.py: 200 of each class: a stray </think>, a tool-call stream cut by the
// length, a stop sequence the content starts with, a DSML block inside unclosed reasoning, V4.1's DSML spelling),
// counted by class: each must agree event for event.
TEST(ChatStreamParser, NastyStreamsByClass) {
  const BpeTokenizer tokenizer = BpeTokenizer::load(kTokenizer);
  std::ifstream in(kChat / "streams_nasty.jsonl");
  std::map<std::string, std::pair<int64_t, int64_t>> by_class;  // class -> (streams, differing)
  int64_t reported = 0;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text);
    const nlohmann::json& body = line["request"];
    const bool thinking = !(body.contains("thinking") && body["thinking"]["type"] == "disabled");
    std::vector<std::string> stops;
    if (body.contains("stop")) stops = body["stop"].get<std::vector<std::string>>();
    ChatStreamParser parser(tokenizer, thinking, stops, /*tool_calls=*/body.contains("tools"));
    nlohmann::json got = nlohmann::json::array();
    const std::vector<int32_t> tokens = line["tokens"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < tokens.size() && !parser.finished(); ++i)
      for (const StreamEvent& e : parser.push(tokens[i])) got.push_back(tool_event_fixture(static_cast<int64_t>(i), e));
    if (!parser.finished())
      for (const StreamEvent& e : parser.finish(line["finish"].get<std::string>()))
        got.push_back(tool_event_fixture(-1, e));
    const std::string kind = line["class"].get<std::string>();
    auto& [streams, differing] = by_class[kind];
    ++streams;
    if (got == line["events"]) continue;
    ++differing;
    if (++reported <= 5)
      ADD_FAILURE() << kind << " " << body.dump() << " tokens " << line["tokens"].dump() << "\n got: " << got.dump()
                    << "\nwant: " << line["events"].dump();
  }
  for (const auto& [kind, counts] : by_class) {
    std::printf("[ stream ] %s: %lld of %lld streams differ from deepseek-recipe\n", kind.c_str(),
                static_cast<long long>(counts.second), static_cast<long long>(counts.first));
    EXPECT_EQ(counts.first, 200) << kind;
    EXPECT_EQ(counts.second, 0) << kind;
  }
}

}  // namespace
}  // namespace deepinfer::text
