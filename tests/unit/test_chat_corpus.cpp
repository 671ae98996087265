// The chat corpus against deepseek-recipe 0.2.0 (issue #53): tests/fixtures/make_chat_corpus.py generated 3,200
// OpenAI chat-completion request bodies (random ones of every kind, and one class per way of breaking one) and 2,400
// output streams (V4-Pro and V4.1-Flash, tools on and off, thinking on and off, stop sequences, V4 and V4.1 tool-call
// spellings, special tokens strewn through text), with what recipe makes of each. Each body goes in as users send
// it, an OpenAI batch line read by the request reader that `generate` and `render` use (app/jsonl.h), for the V4 and
// the V4.1 chat format: recipe's refusals must be refused, its renderings equal in ids (image parts, which recipe
// renders for a vision encoder, are refused here by design and counted apart). Each stream goes through the
// stream parser with the options that reader gives its request: the events must be recipe's, token by token.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <variant>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "src/app/jsonl.h"
#include "src/core/error.h"
#include "src/text/chat_template.h"
#include "src/text/stream_parser.h"
#include "tests/unit/chat_fixtures.h"

namespace deepinfer {
namespace {

const std::filesystem::path kChat = DEEPINFER_CHAT_FIXTURE;
const std::filesystem::path kTokenizer = std::filesystem::path(DEEPINFER_TOKENIZER_FIXTURE) / "tokenizer.json";
const std::filesystem::path kProse = std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests/fixtures/chat/chat_prose.json";

std::vector<std::string> lines_of(const char* name) {
  std::ifstream in(kChat / name);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The body as an OpenAI batch line, as users send it.
std::string batch_line(const nlohmann::json& fixture_line) {
  return R"({"custom_id": "r", "method": "POST", "url": "/v1/chat/completions", "body": )" +
         fixture_line.at("body_text").get<std::string>() + "}";
}

struct Reader {
  text::BpeTokenizer tokenizer;
  text::ChatProse prose;
  text::ChatFormat format;
  // The request reader's verdict on a batch line: the prompt's ids, or its error; `reading` gets the output's options.
  std::variant<std::vector<int32_t>, std::string> read(const std::string& line, app::OutputReading& reading) const {
    const app::TokenizerSource tokenizer_source = [this]() -> const text::BpeTokenizer& { return tokenizer; };
    const app::ChatSource chat{format, [this]() -> const text::ChatProse& { return prose; }, "served-model"};
    try {
      return app::parse_request_line(line, "corpus", 0, tokenizer_source, chat, reading).prompt_token_ids;
    } catch (const InputError& e) {
      return std::string(e.what());
    }
  }
};

TEST(ChatCorpus, RequestsRenderedOrRefusedAsDeepseekRecipe) {
  const std::vector<std::string> lines = lines_of("corpus_requests.jsonl");
  ASSERT_GE(lines.size(), 3001u);
  const auto system_id = nlohmann::json::parse(lines[0]).at("v41_system_token_id").get<int32_t>();
  const text::ChatProse prose = text::ChatProse::load(kProse);
  const Reader readers[] = {{text::BpeTokenizer::load(kTokenizer), prose, text::ChatFormat::kV4},
                            {text::BpeTokenizer::load(testing::write_v41_tokenizer(kTokenizer, system_id, "deepinfer-corpus-v41-tokenizer.json")), prose, text::ChatFormat::kV41}};
  // class -> (requests, refused by recipe, differing)
  std::map<std::string, std::tuple<int64_t, int64_t, int64_t>> by_class;
  int64_t reported = 0, images = 0;
  // Every difference, for whoever regenerates the corpus: DEEPINFER_CORPUS_DIFFS=FILE writes one JSON line each.
  const char* diffs_path = std::getenv("DEEPINFER_CORPUS_DIFFS");
  std::ofstream diffs;
  if (diffs_path != nullptr) diffs.open(diffs_path);
  for (size_t i = 1; i < lines.size(); ++i) {
    const nlohmann::json want = nlohmann::json::parse(lines[i]);
    const std::string line = batch_line(want);
    auto& [requests, refused, differing] = by_class[want.at("class").get<std::string>()];
    ++requests;
    refused += want.contains("error");
    bool same = true;
    std::string got_what;
    for (const Reader& reader : readers) {
      app::OutputReading reading;
      const auto got = reader.read(line, reading);
      const char* name = reader.format == text::ChatFormat::kV4 ? "v4" : "v41";
      if (want.contains("error")) {
        if (std::holds_alternative<std::string>(got)) continue;
        same = false;
        got_what = fmt::format("{}: rendered, recipe refused: {}", name, want["error"].get<std::string>());
      } else if (std::holds_alternative<std::string>(got) &&
                 std::get<std::string>(got).find("content parts of type \"image_url\" are not supported") !=
                     std::string::npos) {
        images += reader.format == text::ChatFormat::kV4;  // by design: recipe shows <｜image｜> for a vision encoder
      } else if (std::holds_alternative<std::string>(got)) {
        same = false;
        got_what = fmt::format("{}: refused ({}), recipe rendered", name, std::get<std::string>(got));
      } else if (std::get<std::vector<int32_t>>(got) != want[name]["ids"].get<std::vector<int32_t>>()) {
        same = false;  // where the two prompts part, as text
        const std::string mine = reader.tokenizer.decode(std::get<std::vector<int32_t>>(got), false);
        const std::string theirs = want[name]["prompt"].get<std::string>();
        size_t at = 0;
        while (at < mine.size() && at < theirs.size() && mine[at] == theirs[at]) ++at;
        const size_t from = at > 80 ? at - 80 : 0;
        const auto dump = [](const std::string& t) {
          return nlohmann::json(t).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        };
        got_what = fmt::format("{}: ids differ at byte {}: here {} recipe {}", name, at, dump(mine.substr(from, 200)),
                               dump(theirs.substr(from, 200)));
        if (at == mine.size() && at == theirs.size()) {  // the same text, split into other tokens: where
          const auto& a = std::get<std::vector<int32_t>>(got);
          const auto b = want[name]["ids"].get<std::vector<int32_t>>();
          size_t k = 0;
          while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
          const auto pieces = [&](const std::vector<int32_t>& ids) {
            std::string out;
            for (size_t j = k > 3 ? k - 3 : 0; j < std::min(ids.size(), k + 4); ++j)
              out += fmt::format("{}:{} ", ids[j], dump(reader.tokenizer.decode({ids[j]}, false)));
            return out;
          };
          got_what = fmt::format("{}: the same text, other tokens from token {}: here {}| recipe {}", name, k,
                                 pieces(a), pieces(b));
        }
      }
      if (!same) break;
    }
    if (same) continue;
    ++differing;
    if (diffs.is_open()) diffs << nlohmann::json{{"line", i + 1}, {"class", want["class"]}, {"got", got_what}}.dump() << '\n';
    if (++reported <= 12) ADD_FAILURE() << "line " << i + 1 << " " << want["class"] << ": " << got_what << "\n" << line;
  }
  int64_t total = 0, total_refused = 0, total_differing = 0;
  for (const auto& [kind, counts] : by_class) {
    const auto [requests, refused, differing] = counts;
    std::printf("[ corpus ] %-20s %5lld requests (%lld refused by recipe): %lld differ\n", kind.c_str(),
                static_cast<long long>(requests), static_cast<long long>(refused), static_cast<long long>(differing));
    total += requests;
    total_refused += refused;
    total_differing += differing;
  }
  std::printf("[ corpus ] all: %lld requests, V4 and V4.1 (%lld refused by recipe): %lld differ\n",
              static_cast<long long>(total), static_cast<long long>(total_refused),
              static_cast<long long>(total_differing));
  // Image parts: recipe renders its image token for a vision encoder; this engine serves text models and refuses them,
  // naming the part (the one difference by design).
  std::printf("[ corpus ] %lld requests with image parts recipe renders, refused here by design\n",
              static_cast<long long>(images));
  EXPECT_EQ(total_differing, 0);
}

TEST(ChatCorpus, StreamsParsedAsDeepseekRecipe) {
  const std::vector<std::string> lines = lines_of("corpus_streams.jsonl");
  ASSERT_GE(lines.size(), 2000u);
  const Reader reader{text::BpeTokenizer::load(kTokenizer), text::ChatProse::load(kProse), text::ChatFormat::kV4};
  std::map<std::string, std::pair<int64_t, int64_t>> by_class;  // class -> (streams, differing)
  int64_t reported = 0, events = 0;
  const char* diffs_path = std::getenv("DEEPINFER_CORPUS_STREAM_DIFFS");  // every difference, a JSON line each
  std::ofstream diffs;
  if (diffs_path != nullptr) diffs.open(diffs_path);
  for (const std::string& text : lines) {
    const nlohmann::json line = nlohmann::json::parse(text);
    nlohmann::json body = line["body"];
    body["max_tokens"] = 1;
    body.erase("stream");
    app::OutputReading reading;
    const auto read = reader.read(nlohmann::json{{"custom_id", "s"}, {"url", "/v1/chat/completions"}, {"body", body}}.dump(),
                                  reading);
    ASSERT_TRUE(std::holds_alternative<std::vector<int32_t>>(read)) << std::get<std::string>(read);
    text::ChatStreamParser parser(reader.tokenizer, reading.reasoning_first, reading.stop, reading.tool_calls,
                                  reading.in_tool_calls);
    nlohmann::json got = nlohmann::json::array();
    const std::vector<int32_t> tokens = line["tokens"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < tokens.size() && !parser.finished(); ++i)
      for (const text::StreamEvent& e : parser.push(tokens[i])) got.push_back(testing::tool_event_fixture(static_cast<int64_t>(i), e));
    if (!parser.finished())
      for (const text::StreamEvent& e : parser.finish(line["finish"].get<std::string>())) got.push_back(testing::tool_event_fixture(-1, e));
    events += static_cast<int64_t>(line["events"].size());
    auto& [streams, differing] = by_class[line["class"].get<std::string>()];
    ++streams;
    if (got == line["events"]) continue;
    ++differing;
    if (diffs.is_open())
      diffs << nlohmann::json{{"class", line["class"]}, {"body", line["body"]}, {"tokens", line["tokens"]},
                              {"finish", line["finish"]}, {"got", got}, {"want", line["events"]}}.dump() << '\n';
    if (++reported <= 8)
      ADD_FAILURE() << line["class"] << " " << line["body"].dump() << " tokens " << line["tokens"].dump()
                    << " finish " << line["finish"] << "\n got: " << got.dump() << "\nwant: " << line["events"].dump();
  }
  int64_t total = 0, total_differing = 0;
  for (const auto& [kind, counts] : by_class) {
    std::printf("[ corpus ] %-20s %5lld streams: %lld differ\n", kind.c_str(), static_cast<long long>(counts.first),
                static_cast<long long>(counts.second));
    total += counts.first;
    total_differing += counts.second;
  }
  std::printf("[ corpus ] all: %lld streams, %lld events: %lld streams differ\n", static_cast<long long>(total),
              static_cast<long long>(events), static_cast<long long>(total_differing));
  EXPECT_EQ(total_differing, 0);
}

}  // namespace
}  // namespace deepinfer
