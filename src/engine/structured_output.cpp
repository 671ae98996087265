#include "src/engine/structured_output.h"

#include <nlohmann/json.hpp>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "src/core/check.h"
#include "src/engine/schema_check.h"

namespace deepinfer {

namespace {

// The matcher's mask of the next token into `row` (`words` 32-bit words).
void fill_row(xgrammar::GrammarMatcher& matcher, uint32_t* row, int64_t words) {
  int64_t shape = words;
  DLTensor tensor{row, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLInt, 32, 1}, &shape, nullptr, 0};
  matcher.FillNextTokenBitmask(&tensor);
}

}  // namespace

struct StructuredOutput::Impl {
  // A compile runs on a thread of its own so that a slow one can be given up on (the thread is left to finish; the
  // error ends the run).
  struct PendingCompile {
    std::mutex mutex;
    std::condition_variable done;
    std::optional<xgrammar::CompiledGrammar> grammar;
    std::string error;
    bool finished = false;
  };
  struct Matcher {
    xgrammar::GrammarMatcher matcher;
    int64_t accepted = 0;  // generated tokens accepted so far
  };

  std::shared_ptr<xgrammar::GrammarCompiler> compiler;
  std::vector<int32_t> stop_ids;
  double timeout_s;
  int64_t mask_words = 0;
  std::map<std::pair<int, std::string>, xgrammar::CompiledGrammar> compiled;  // by (kind, text)
  std::unordered_map<const Sequence*, Matcher> matchers;

  const xgrammar::CompiledGrammar& get(const OutputConstraint& c, const std::string& who) {
    const auto key = std::pair{static_cast<int>(c.kind), c.text};
    if (auto it = compiled.find(key); it != compiled.end()) return it->second;
    if (c.kind == OutputConstraint::Kind::kJsonSchema) {  // what the grammar would not enforce, refused first
      const nlohmann::json schema = nlohmann::json::parse(c.text, nullptr, false);
      if (!schema.is_discarded()) check_schema_enforceable(schema, who);
    }
    auto pending = std::make_shared<PendingCompile>();
    std::thread([pending, compiler = compiler, c] {
      std::optional<xgrammar::CompiledGrammar> grammar;
      std::string error;
      try {
        switch (c.kind) {
          case OutputConstraint::Kind::kJsonSchema:
            // The compact form (separators ", " and ": ", no other whitespace): a model's whitespace cannot run on.
            grammar = compiler->CompileJSONSchema(c.text, /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                                  /*strict_mode=*/true);
            break;
          case OutputConstraint::Kind::kJsonObject: grammar = compiler->CompileBuiltinJSONGrammar(); break;
          case OutputConstraint::Kind::kRegex: grammar = compiler->CompileRegex(c.text); break;
          case OutputConstraint::Kind::kEbnf: grammar = compiler->CompileGrammar(c.text, "root"); break;
        }
      } catch (const std::exception& e) {
        error = e.what();
        // xgrammar's messages start with a time and its source position ("[hh:mm:ss] .../x.cc:123: "): drop them.
        if (const size_t source = error.find(".cc:"); !error.empty() && error[0] == '[' && source != std::string::npos)
          if (const size_t text = error.find(": ", source); text != std::string::npos) error = error.substr(text + 2);
        while (!error.empty() && std::isspace(static_cast<unsigned char>(error.back()))) error.pop_back();
        if (error.empty()) error = "xgrammar refused it";
      }
      std::lock_guard lock(pending->mutex);
      pending->grammar = std::move(grammar);
      pending->error = std::move(error);
      pending->finished = true;
      pending->done.notify_all();
    }).detach();
    std::unique_lock lock(pending->mutex);
    const bool finished = pending->done.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                                 [&] { return pending->finished; });
    DI_INPUT_CHECK(finished, "{}: its {} constraint did not compile within {} s", who, c.kind_name(), timeout_s);
    DI_INPUT_CHECK(pending->error.empty(), "{}: invalid {} constraint: {}", who, c.kind_name(), pending->error);
    require_a_first_token(*pending->grammar, c, who);
    return compiled.emplace(key, std::move(*pending->grammar)).first->second;
  }

  // A grammar no token of the vocabulary can start (a regex of a character no token spells, an EBNF rule that only
  // refers to itself) would leave its sequence nothing to sample: refused here, naming the request, rather than
  // failing the whole run at its first step.
  void require_a_first_token(const xgrammar::CompiledGrammar& grammar, const OutputConstraint& c,
                             const std::string& who) const {
    xgrammar::GrammarMatcher matcher(grammar, stop_ids);
    std::vector<uint32_t> row(mask_words, 0);
    fill_row(matcher, row.data(), mask_words);
    DI_INPUT_CHECK(std::any_of(row.begin(), row.end(), [](uint32_t word) { return word != 0; }),
                   "{}: its {} constraint admits no token of this vocabulary as its first (no token spells what it "
                   "must start with, or its rules never reach a character): change the constraint", who,
                   c.kind_name());
  }
};

StructuredOutput::StructuredOutput(std::vector<std::string> token_bytes, int64_t vocab_size,
                                   std::vector<int32_t> stop_ids, double compile_timeout_s)
    : impl_(std::make_unique<Impl>()), vocab_size_(vocab_size) {
  DI_CHECK(static_cast<int64_t>(token_bytes.size()) <= vocab_size, "a tokenizer of {} tokens for a vocabulary of {}",
           token_bytes.size(), vocab_size);
  impl_->stop_ids = std::move(stop_ids);
  impl_->timeout_s = compile_timeout_s;
  impl_->mask_words = mask_words();
  // RAW: the strings are the tokens' bytes; ids past the tokenizer's are padding (never admitted).
  const xgrammar::TokenizerInfo info(token_bytes, xgrammar::VocabType::RAW, static_cast<int>(vocab_size),
                                     impl_->stop_ids, /*add_prefix_space=*/false);
  impl_->compiler = std::make_shared<xgrammar::GrammarCompiler>(info, /*max_threads=*/8, /*cache_enabled=*/true);
}

StructuredOutput::~StructuredOutput() = default;

void StructuredOutput::compile(const OutputConstraint& constraint, const std::string& who) {
  impl_->get(constraint, who);
}

int64_t StructuredOutput::num_compiled() const { return static_cast<int64_t>(impl_->compiled.size()); }

bool StructuredOutput::constrains(const Sequence& seq) const { return impl_->matchers.contains(&seq); }

void StructuredOutput::forget(const Sequence& seq) { impl_->matchers.erase(&seq); }

void StructuredOutput::start(const Sequence& seq) {
  if (!seq.request->constraint) return;
  const xgrammar::CompiledGrammar& grammar =
      impl_->get(*seq.request->constraint, fmt::format("request id {}", seq.request->id.dump()));
  impl_->matchers.insert_or_assign(&seq, Impl::Matcher{xgrammar::GrammarMatcher(grammar, impl_->stop_ids), 0});
  advance(seq);
}

std::optional<bool> StructuredOutput::advance(const Sequence& seq) {
  auto it = impl_->matchers.find(&seq);
  if (it == impl_->matchers.end()) return std::nullopt;
  Impl::Matcher& m = it->second;
  for (int64_t i = seq.num_prompt_tokens + m.accepted; i < seq.num_tokens(); ++i, ++m.accepted)
    DI_CHECK(m.matcher.AcceptToken(seq.tokens[i]), "request id {}: its grammar refused token {} at output position {} "
             "(sampled under its mask)", seq.request->id.dump(), seq.tokens[i], m.accepted);
  if (seq.status == SequenceStatus::kHandedOff) impl_->matchers.erase(it);  // its decode rank goes on
  if (seq.status != SequenceStatus::kFinished) return std::nullopt;
  const bool whole = m.matcher.IsTerminated() || m.matcher.IsCompleted();
  impl_->matchers.erase(it);
  return whole;
}

int64_t StructuredOutput::fill_masks(const Sequence& seq, std::span<const int32_t> drafts, uint32_t* masks) {
  Impl::Matcher& m = impl_->matchers.at(&seq);
  const int64_t words = mask_words();
  const auto stops = [&](int32_t token) {
    return std::find(impl_->stop_ids.begin(), impl_->stop_ids.end(), token) != impl_->stop_ids.end();
  };
  int64_t admitted = 0;
  for (;; ++admitted) {
    fill_row(m.matcher, masks + admitted * words, words);
    // A drafted stop token is left to the target's own row to sample (the verify ends before it).
    if (admitted == static_cast<int64_t>(drafts.size()) || stops(drafts[admitted]) ||
        !m.matcher.AcceptToken(drafts[admitted]))
      break;
  }
  if (admitted > 0) m.matcher.Rollback(static_cast<int>(admitted));
  return admitted;
}

void StructuredOutput::fill_masks(std::span<const Sequence* const> seqs, uint32_t* masks) {
  const auto n = static_cast<int64_t>(seqs.size());
  const int64_t words = mask_words();
  std::vector<Impl::Matcher*> matchers(n);
  for (int64_t i = 0; i < n; ++i) matchers[i] = &impl_->matchers.at(seqs[i]);
#pragma omp parallel for schedule(dynamic) if (n > 8)
  for (int64_t i = 0; i < n; ++i) fill_row(matchers[i]->matcher, masks + i * words, words);
}

}  // namespace deepinfer
