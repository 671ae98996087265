// A damaged or hostile tokenizer.json (issue #52): ids read exactly and in range, the file's damage named by file and
// part instead of the JSON library's bare message, and a Split regex PCRE2 gives up on named with its file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "src/core/error.h"
#include "src/text/bpe_tokenizer.h"

namespace deepinfer::text {
namespace {

const std::filesystem::path kBytes =
    std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests" / "fixtures" / "tokenizer-bytes" / "tokenizer.json";

nlohmann::json bytes_tokenizer() {
  std::ifstream in(kBytes);
  return nlohmann::json::parse(in);
}

// `json` (or raw `text`) written to a file of its own; the load's error message, "" when it loads.
std::string load_error(const std::string& text, std::string* path_out = nullptr) {
  static int count = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("deepinfer-tok-" + std::to_string(::getpid()) + "-" + std::to_string(count++) + ".json");
  std::ofstream(path) << text;
  if (path_out != nullptr) *path_out = path.string();
  std::string error;
  try {
    BpeTokenizer::load(path);
  } catch (const InputError& e) {
    error = e.what();
  }
  std::filesystem::remove(path);
  return error;
}

std::string load_error(const nlohmann::json& json) { return load_error(json.dump()); }

TEST(TokenizerInput, IdsAreReadExactlyAndInRange) {
  const std::vector<std::pair<nlohmann::json, std::string>> ids = {
      {nlohmann::json(uint64_t{1} << 32 | 5), "the id 4294967301"},
      {nlohmann::json(5.5), "the id 5.5"},
      {nlohmann::json(5.0), "the id 5.0"},
      {nlohmann::json(-1), "the id -1"},
      {nlohmann::json(std::numeric_limits<uint64_t>::max()), "the id 18446744073709551615"},
      {nlohmann::json(int64_t{1} << 24), "the id 16777216"},
      {nlohmann::json("5"), "the id \"5\""},
      {nlohmann::json(true), "the id true"},
      {nlohmann::json(nullptr), "the id null"},
  };
  for (const auto& [id, shown] : ids) {
    nlohmann::json t = bytes_tokenizer();
    t["model"]["vocab"]["!"] = id;
    const std::string error = load_error(t);
    EXPECT_NE(error.find("model.vocab gives token \"!\" " + shown + ": an id must be an integer in [0, 16777215]"),
              std::string::npos) << id << ": " << error;
    EXPECT_NE(error.find(".json: "), std::string::npos) << error;  // the file named first
    t = bytes_tokenizer();
    t["added_tokens"][1]["id"] = id;
    EXPECT_NE(load_error(t).find("added_tokens[1] gives token \"<eos>\" " + shown), std::string::npos)
        << id << ": " << load_error(t);
  }
  nlohmann::json t = bytes_tokenizer();
  t["model"]["vocab"]["!"] = 3;  // the id of "Ġ"
  EXPECT_NE(load_error(t).find("model.vocab gives the id 3 to"), std::string::npos) << load_error(t);
  EXPECT_EQ(load_error(bytes_tokenizer()), "");  // the fixture itself loads
}

TEST(TokenizerInput, DamageIsNamedByFileAndPart) {
  struct Case {
    std::function<void(nlohmann::json&)> damage;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& t) { t["model"]["vocab"] = nlohmann::json::array({"a", "b"}); },
       "model.vocab must be an object of token: id"},
      {[](nlohmann::json& t) { t["model"]["merges"] = nlohmann::json::object(); }, "model.merges must be a list"},
      {[](nlohmann::json& t) { t["model"]["merges"][3] = nlohmann::json::array({1, 2}); },
       "model.merges[3] is damaged: [json.exception.type_error.302] type must be string"},
      {[](nlohmann::json& t) { t["model"]["merges"][0] = 7; },
       "model.merges[0] is neither \"left right\" nor a pair of tokens"},
      {[](nlohmann::json& t) { t["model"] = "BPE"; }, "'model' must be an object"},
      {[](nlohmann::json& t) { t.erase("model"); }, "'model' must be an object"},
      {[](nlohmann::json& t) { t["pre_tokenizer"] = "ByteLevel"; },
       "the normalizer, pre_tokenizer, model type, decoder or post_processor is damaged"},
      {[](nlohmann::json& t) { t["pre_tokenizer"]["pretokenizers"] = 3; }, "is damaged"},
      {[](nlohmann::json& t) { t["added_tokens"][2] = "<pad>"; }, "added_tokens[2] is damaged"},
      {[](nlohmann::json& t) { t["added_tokens"][0].erase("content"); }, "added_tokens[0] is damaged"},
      {[](nlohmann::json& t) { t["added_tokens"][0]["content"] = 17; }, "added_tokens[0] is damaged"},
      {[](nlohmann::json& t) { t["added_tokens"] = "none"; }, "added_tokens must be a list"},
  };
  for (const Case& c : cases) {
    nlohmann::json t = bytes_tokenizer();
    c.damage(t);
    std::string path;
    const std::string error = load_error(t.dump(), &path);
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.expected << ": " << error;
    EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
  }
  EXPECT_NE(load_error(std::string("{\"model\": ")).find("not a JSON object"), std::string::npos);
}

TEST(TokenizerInput, SplitRegexFailureNamesTheFile) {
  nlohmann::json t = bytes_tokenizer();
  // A pattern of catastrophic backtracking: PCRE2 stops at its match limit on a run of a's that does not end the text.
  t["pre_tokenizer"]["pretokenizers"].insert(
      t["pre_tokenizer"]["pretokenizers"].begin(),
      nlohmann::json::parse(R"({"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated",
                                "invert": false})"));
  const auto path = std::filesystem::temp_directory_path() / ("deepinfer-tok-regex-" + std::to_string(::getpid()));
  std::ofstream(path) << t.dump();
  const BpeTokenizer tokenizer = BpeTokenizer::load(path);
  std::filesystem::remove(path);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("xaa!aa")), "xaa!aa");  // short runs match or miss as usual
  for (const size_t run : {40, 64, 1000}) {
    try {
      tokenizer.encode(std::string(run, 'a') + "!");
      ADD_FAILURE() << "a run of " << run << " a's matched";
    } catch (const InputError& e) {
      const std::string error = e.what();
      EXPECT_NE(error.find(path.string() + ": the pre-tokenizer's Split regex 0 '(a+)+$' failed on a piece of " +
                           std::to_string(run + 1) + " bytes"),
                std::string::npos) << error;
      EXPECT_NE(error.find("PCRE2 error"), std::string::npos) << error;
    }
  }
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a+";
  EXPECT_NE(load_error(t).find(": the pre-tokenizer's Split regex 0 '(a+' at offset 3: missing closing parenthesis"),
            std::string::npos) << load_error(t);
}

}  // namespace
}  // namespace deepinfer::text
