// Structured output (src/engine/structured_output.h) over a small vocabulary of known token strings: the masks a
// regex, a JSON Schema and an EBNF grammar give token by token (multi-character tokens, the EOS only at a sentence's
// end, special tokens and the model's padding ids never), speculative drafts cut at the first one the grammar
// refuses (and at a drafted EOS) with the matcher left as it was, the compile cache, the errors, the compile time
// limit, a finished sequence's verdict; and the CPU mask op (kernels/cpu/sampling.h).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "kernels/cpu/sampling.h"
#include "src/core/error.h"
#include "src/engine/structured_output.h"

namespace deepinfer {
namespace {

// Token ids: 0 <bos> and 1 <eos> (special: no bytes), then the strings below; the model's vocabulary is 40.
const std::vector<std::string> kTokens = {"",  "",  "0", "1", "2", "12", "a", "b", "ab", "{", "}", "\"",
                                          ":", ",", " ", "x", "\":", "true", "-"};
constexpr int64_t kVocab = 40;
constexpr int32_t kEos = 1;

int32_t id(const std::string& token) {
  return static_cast<int32_t>(std::find(kTokens.begin() + 2, kTokens.end(), token) - kTokens.begin());
}

std::vector<std::string> admitted(const StructuredOutput& so, const uint32_t* mask) {
  std::vector<std::string> out;
  for (int64_t v = 0; v < so.vocab_size(); ++v)
    if ((mask[v / 32] >> (v % 32)) & 1u)
      out.push_back(v == kEos ? std::string("<eos>") : v < 19 ? kTokens[v] : fmt::format("#{}", v));
  return out;
}

struct Fixture {
  StructuredOutput so;
  Request request;
  Sequence seq;
  explicit Fixture(OutputConstraint c, GrammarLimits limits = {}) : so(kTokens, kVocab, {kEos}, limits) {
    request.id = "t";
    request.prompt_token_ids = {5, 6};
    request.constraint = std::move(c);
    seq.request = &request;
    seq.tokens = request.prompt_token_ids;
    seq.num_prompt_tokens = 2;
    seq.status = SequenceStatus::kRunning;
    so.start(seq);
  }
  std::vector<std::string> next() {
    std::vector<uint32_t> mask(so.mask_words());
    so.fill_masks(seq, {}, mask.data());
    return admitted(so, mask.data());
  }
  void emit(const std::string& token) {
    seq.tokens.push_back(token == "<eos>" ? kEos : id(token));
    const StructuredOutput::Progress progress = so.advance(seq);
    EXPECT_EQ(progress.satisfied, std::nullopt);
    EXPECT_EQ(progress.dead_end, std::nullopt);
  }
};

using Tokens = std::vector<std::string>;

TEST(StructuredOutput, RegexMasksByTokenStrings) {
  Fixture f({OutputConstraint::Kind::kRegex, "-?[0-9]+"});
  ASSERT_TRUE(f.so.constrains(f.seq));
  EXPECT_EQ(f.next(), (Tokens{"0", "1", "2", "12", "-"})) << "no EOS before a digit, no letters, no padding ids";
  f.emit("-");
  EXPECT_EQ(f.next(), (Tokens{"0", "1", "2", "12"}));
  f.emit("12");
  EXPECT_EQ(f.next(), (Tokens{"<eos>", "0", "1", "2", "12"}));
  f.emit("<eos>");
  f.seq.status = SequenceStatus::kFinished;
  EXPECT_EQ(f.so.advance(f.seq).satisfied, std::optional<bool>(true));
  EXPECT_FALSE(f.so.constrains(f.seq)) << "a finished sequence's matcher is dropped";
}

// A thinking-mode answer: free text up to the reasoning's end (here the token "x"), the grammar after it; drafts stop
// before that token, so that it ends its step and the grammar masks the next.
TEST(StructuredOutput, ConstraintAfterTheReasoningsEnd) {
  OutputConstraint c{OutputConstraint::Kind::kRegex, "-?[0-9]+"};
  c.after_token = id("x");
  Fixture f(c);
  EXPECT_FALSE(f.so.constrains(f.seq)) << "the reasoning is free";
  const std::vector<int32_t> drafts = {id("a"), id("b"), id("x"), id("1")};
  EXPECT_EQ(f.so.drafts_before_start(f.seq, drafts), 2);
  f.emit("a");
  f.emit("b");
  EXPECT_FALSE(f.so.constrains(f.seq));
  f.emit("x");
  ASSERT_TRUE(f.so.constrains(f.seq)) << "after the reasoning's end the answer is masked";
  EXPECT_EQ(f.so.drafts_before_start(f.seq, drafts), 4);
  EXPECT_EQ(f.next(), (Tokens{"0", "1", "2", "12", "-"}));
  f.emit("12");
  f.emit("<eos>");
  f.seq.status = SequenceStatus::kFinished;
  EXPECT_EQ(f.so.advance(f.seq).satisfied, std::optional<bool>(true));

  Fixture unfinished(c);  // the reasoning never ended: the answer is not whole
  unfinished.emit("a");
  unfinished.seq.status = SequenceStatus::kFinished;
  EXPECT_EQ(unfinished.so.advance(unfinished.seq).satisfied, std::optional<bool>(false));
}

// Forced decoding: each row admits the next forced token, then the EOS; drafts are admitted while they are the forced
// tokens; ids outside the vocabulary are refused.
TEST(StructuredOutput, ForcedTokensThenTheEos) {
  Fixture f({OutputConstraint::Kind::kTokens, "[8, 6, 7]"});
  ASSERT_TRUE(f.so.constrains(f.seq));
  EXPECT_EQ(f.next(), (Tokens{"ab"}));
  std::vector<uint32_t> masks(4 * f.so.mask_words());
  const std::vector<int32_t> drafts = {id("ab"), id("a"), id("x")};
  EXPECT_EQ(f.so.fill_masks(f.seq, drafts, masks.data()), 2) << "the third draft is not the forced token";
  EXPECT_EQ(admitted(f.so, masks.data() + 2 * f.so.mask_words()), (Tokens{"b"}));
  f.emit("ab");
  f.emit("a");
  f.emit("b");
  EXPECT_EQ(f.next(), (Tokens{"<eos>"}));
  f.emit("<eos>");
  f.seq.status = SequenceStatus::kFinished;
  EXPECT_EQ(f.so.advance(f.seq).satisfied, std::optional<bool>(true));
  EXPECT_THROW(f.so.compile({OutputConstraint::Kind::kTokens, "[1, 40]"}, "r"), InputError) << "40 is past the vocabulary";
}

TEST(StructuredOutput, CutShortIsNotWhole) {
  Fixture f({OutputConstraint::Kind::kRegex, "ab+"});
  f.emit("a");
  f.seq.status = SequenceStatus::kFinished;  // max_new_tokens reached
  EXPECT_EQ(f.so.advance(f.seq).satisfied, std::optional<bool>(false));
}

// A grammar that can start but reaches a state no token continues ("a" then a tab, with no tab token): the mask
// there admits nothing, so whatever is sampled under it is refused, and advance says where, once, dropping the
// matcher (the engine then ends that request alone on an error). Whether the sequence has finished (a stop token
// drawn) or not makes no difference.
TEST(StructuredOutput, DeadEndAfterTheFirstTokenIsReported) {
  for (const bool finished : {false, true}) {
    Fixture f({OutputConstraint::Kind::kRegex, "a\\t"});
    EXPECT_EQ(f.next(), (Tokens{"a"}));
    f.emit("a");
    EXPECT_EQ(f.next(), Tokens{}) << "no token spells a tab";
    f.seq.tokens.push_back(finished ? kEos : id("0"));  // what sampling under an empty mask gives
    if (finished) f.seq.status = SequenceStatus::kFinished;
    const StructuredOutput::Progress progress = f.so.advance(f.seq);
    EXPECT_EQ(progress.dead_end, std::optional<int64_t>(1));
    EXPECT_EQ(progress.satisfied, std::nullopt);
    EXPECT_FALSE(f.so.constrains(f.seq));
  }
}

TEST(StructuredOutput, JsonSchemaAndEbnf) {
  const std::string schema = R"({"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"],
                                 "additionalProperties": false})";
  Fixture j({OutputConstraint::Kind::kJsonSchema, schema});
  EXPECT_EQ(j.next(), (Tokens{"{"}));
  j.emit("{");
  EXPECT_EQ(j.next(), (Tokens{"\""}));
  for (const char* t : {"\"", "x", "\":", " "}) j.emit(t);
  EXPECT_EQ(j.next(), (Tokens{"true"})) << "a boolean, and the only boolean token is true";
  Fixture e({OutputConstraint::Kind::kEbnf, R"(root ::= "a" ("," "b")*)"});
  EXPECT_EQ(e.next(), (Tokens{"a"})) << "'ab' would leave the grammar";
  e.emit("a");
  EXPECT_EQ(e.next(), (Tokens{"<eos>", ","}));
}

// Drafts: masks of rows 0..admitted, the first refused draft and those after it cut, a drafted EOS cut too, and
// the matcher back where it was.
TEST(StructuredOutput, DraftsCutAtTheGrammar) {
  Fixture f({OutputConstraint::Kind::kRegex, "[0-9]+"});
  const int64_t w = f.so.mask_words();
  std::vector<uint32_t> masks(4 * w, 0);
  const std::vector<int32_t> drafts = {id("1"), id("12"), id("a"), id("2")};
  EXPECT_EQ(f.so.fill_masks(f.seq, drafts, masks.data()), 2);
  EXPECT_EQ(admitted(f.so, masks.data()), (Tokens{"0", "1", "2", "12"}));
  EXPECT_EQ(admitted(f.so, masks.data() + w), (Tokens{"<eos>", "0", "1", "2", "12"}));
  EXPECT_EQ(admitted(f.so, masks.data() + 2 * w), (Tokens{"<eos>", "0", "1", "2", "12"}));
  EXPECT_EQ(f.next(), (Tokens{"0", "1", "2", "12"})) << "the walk rolled the matcher back";
  const std::vector<int32_t> with_eos = {id("1"), kEos, id("2")};
  EXPECT_EQ(f.so.fill_masks(f.seq, with_eos, masks.data()), 1) << "a drafted EOS is left to the target's row";
  EXPECT_EQ(f.next(), (Tokens{"0", "1", "2", "12"}));
}

TEST(StructuredOutput, CompilesOncePerConstraintAndRefusesBadOnes) {
  StructuredOutput so(kTokens, kVocab, {kEos}, GrammarLimits{});
  so.compile({OutputConstraint::Kind::kRegex, "[ab]+"}, "request 1");
  so.compile({OutputConstraint::Kind::kRegex, "[ab]+"}, "request 2");
  EXPECT_EQ(so.num_compiled(), 1);
  so.compile({OutputConstraint::Kind::kJsonObject, ""}, "request 3");
  EXPECT_EQ(so.num_compiled(), 2);
  const auto refused = [&](OutputConstraint c, const std::string& expected) {
    try {
      so.compile(c, "request 9");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find(".cc:"), std::string::npos) << "xgrammar's source position left in";
    }
  };
  refused({OutputConstraint::Kind::kRegex, "(a"}, "request 9: invalid regex constraint");
  refused({OutputConstraint::Kind::kEbnf, "root ::= nothing"}, "request 9: invalid ebnf constraint");
  refused({OutputConstraint::Kind::kJsonSchema, R"({"type": 7})"}, "request 9: invalid json_schema constraint");
  EXPECT_EQ(so.num_compiled(), 2);
}

TEST(StructuredOutput, CompileTimeLimit) {
  // A schema of many properties against a limit of a microsecond.
  std::string schema = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 200; ++i) schema += fmt::format("{}\"p{}\": {{\"type\": \"string\"}}", i ? "," : "", i);
  schema += "}}";
  StructuredOutput so(kTokens, kVocab, {kEos}, GrammarLimits{.compile_timeout_s = 1e-6});
  try {
    so.compile({OutputConstraint::Kind::kJsonSchema, schema}, "request 5");
    ADD_FAILURE() << "compiled within a microsecond";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("request 5: its json_schema constraint did not compile within"),
              std::string::npos) << e.what();
  }
}

// The cache holds what its limit allows, the least recently used evicted first (and compiled again when asked for
// again); a grammar larger than the whole cache is refused naming the request; the input's compiles together are
// bounded. A matcher keeps its own grammar: evicting it under a running sequence changes nothing for that sequence.
TEST(StructuredOutput, CacheEvictsAndLimitsBound) {
  const OutputConstraint a{OutputConstraint::Kind::kRegex, "[ab]+"}, b{OutputConstraint::Kind::kRegex, "[0-9]+"},
      c{OutputConstraint::Kind::kRegex, "x+"};
  StructuredOutput probe(kTokens, kVocab, {kEos}, GrammarLimits{});
  probe.compile(a, "probe");
  const int64_t one = probe.cached_bytes();
  ASSERT_GT(one, 0);
  {
    StructuredOutput so(kTokens, kVocab, {kEos}, GrammarLimits{.cache_bytes = 2 * one + one / 2});
    so.compile(a, "r1");
    so.compile(b, "r2");
    so.compile(a, "r3");  // a is now the most recent
    EXPECT_EQ(so.num_compiled(), 2);
    so.compile(c, "r4");  // evicts b
    EXPECT_LE(so.cached_bytes(), 2 * one + one / 2);
    so.compile(a, "r5");
    EXPECT_EQ(so.num_compiled(), 3) << "a stayed";
    const double checked = so.checked_seconds();
    so.compile(b, "r6");
    EXPECT_EQ(so.num_compiled(), 4) << "b was evicted and compiled again";
    EXPECT_EQ(so.checked_seconds(), checked) << "a recompile is not the input's check: it does not count";
  }
  {
    StructuredOutput so(kTokens, kVocab, {kEos}, GrammarLimits{.cache_bytes = one / 2});
    try {
      so.compile(a, "request 7");
      ADD_FAILURE() << "a grammar larger than the cache was kept";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("request 7: its regex constraint compiles to"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("--grammar-cache-mb"), std::string::npos) << e.what();
    }
  }
  {
    StructuredOutput so(kTokens, kVocab, {kEos}, GrammarLimits{.total_compile_s = 1e-9});
    try {
      so.compile(a, "request 8");
      ADD_FAILURE() << "the total compile time was not bounded";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("request 8: compiling the input's constraints has taken"),
                std::string::npos) << e.what();
    }
  }
  {  // eviction under a running sequence (a cache of about one grammar)
    const OutputConstraint running{OutputConstraint::Kind::kRegex, "-?[0-9]+"};
    StructuredOutput sized(kTokens, kVocab, {kEos}, GrammarLimits{});
    sized.compile(running, "probe");
    Fixture f(running, GrammarLimits{.cache_bytes = sized.cached_bytes() + 2 * one});
    EXPECT_EQ(f.next(), (Tokens{"0", "1", "2", "12", "-"}));
    for (const char* other : {"a", "b", "x", "ab", "[ab]", "[12]", "0", "1", "12", "2"})
      f.so.compile({OutputConstraint::Kind::kRegex, other}, "other");
    EXPECT_GT(f.so.num_compiled(), 10);
    f.emit("-");
    EXPECT_EQ(f.next(), (Tokens{"0", "1", "2", "12"}));
  }
}

TEST(TokenBitmask, MasksOnlyTheMarkedRows) {
  const int64_t vocab = 70, words = 3;
  std::vector<float> logits(2 * vocab, 1.0f);
  std::vector<uint32_t> masks(2 * words, 0);
  masks[0] = 1u << 4;
  masks[2] = 1u << 1;  // token 65
  const std::vector<uint8_t> masked = {1, 0};
  cpu::apply_token_bitmask(logits.data(), 2, vocab, masks.data(), words, masked.data());
  for (int64_t v = 0; v < vocab; ++v) {
    EXPECT_EQ(std::isinf(logits[v]), v != 4 && v != 65) << v;
    EXPECT_EQ(logits[vocab + v], 1.0f) << "row 1 is not masked";
  }
}

}  // namespace
}  // namespace deepinfer
