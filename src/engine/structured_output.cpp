#include "src/engine/structured_output.h"

#include <nlohmann/json.hpp>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

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
    std::optional<xgrammar::GrammarMatcher> matcher;  // none: forced tokens
    int64_t accepted = 0;  // generated tokens read so far (fed to the grammar once it has started)
    bool waiting = false;  // for the constraint's start token (OutputConstraint::after_token)
    std::shared_ptr<const std::vector<int32_t>> forced;  // kTokens: the output, then an EOS

    // Forced tokens: the one token admitted `ahead` tokens after those read (-1: any of the EOS tokens).
    int32_t forced_at(int64_t ahead) const {
      const int64_t at = accepted + ahead;
      return at < static_cast<int64_t>(forced->size()) ? (*forced)[at] : -1;
    }
  };

  using Key = std::pair<int, std::string>;  // (kind, text)
  struct Cached {
    Key key;
    xgrammar::CompiledGrammar grammar;
    int64_t bytes;
  };

  std::shared_ptr<xgrammar::GrammarCompiler> compiler;
  std::vector<int32_t> stop_ids;
  GrammarLimits limits;
  int64_t mask_words = 0;
  // Least recently used last. A matcher holds its own reference to its grammar, so evicting one in use frees it
  // only when its sequences end.
  std::list<Cached> lru;
  std::map<Key, std::list<Cached>::iterator> cached;
  int64_t cached_bytes = 0;
  int64_t num_compiled = 0;
  // compile()'s first compiles of each distinct constraint, together: a recompile after an eviction (the window a
  // job reads later, a rank running the request) is work the check already paid for, so it does not count.
  double checked_s = 0;
  std::unordered_set<uint64_t> checked;  // the constraints compile() has seen (hashes of kind and text)
  std::vector<bool> no_text;  // ids xgrammar treats as special (no bytes, padding): never sampled under a mask
  std::unordered_map<const Sequence*, Matcher> matchers;
  // A kTokens constraint's ids, read from its text (InputError naming `who` for ids outside the vocabulary). Not
  // kept beyond the sequence's matcher: a job of a million distinct forced outputs holds only the running ones.
  static std::shared_ptr<const std::vector<int32_t>> forced_tokens(const OutputConstraint& c, const std::string& who,
                                                                   int64_t vocab_size) {
    const nlohmann::json ids = nlohmann::json::parse(c.text, nullptr, false);
    DI_INPUT_CHECK(ids.is_array() && !ids.empty(), "{}: forced_output_token_ids must be a non-empty list", who);
    auto tokens = std::make_shared<std::vector<int32_t>>();
    for (const nlohmann::json& id : ids) {
      DI_INPUT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size,
                     "{}: forced_output_token_ids holds {}, not a token id of the vocabulary [0, {})", who, id.dump(),
                     vocab_size);
      tokens->push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    return tokens;
  }

  // One row's mask of a matcher `ahead` tokens after those it has read (forced tokens), or now (a grammar).
  void fill(Matcher& m, uint32_t* row, int64_t ahead = 0) const {
    if (m.matcher) return fill_row(*m.matcher, row, mask_words);
    std::fill_n(row, mask_words, 0u);
    const auto admit = [&](int32_t token) { row[token / 32] |= 1u << (token % 32); };
    if (const int32_t token = m.forced_at(ahead); token >= 0) return admit(token);
    for (int32_t stop : stop_ids) admit(stop);
  }

  // The constraint's grammar, from the cache or compiled now (then cached, evicting past the limit).
  xgrammar::CompiledGrammar get(const OutputConstraint& c, const std::string& who, double* seconds = nullptr) {
    const auto key = Key{static_cast<int>(c.kind), c.text};
    if (auto it = cached.find(key); it != cached.end()) {
      lru.splice(lru.begin(), lru, it->second);
      return it->second->grammar;
    }
    const auto start = std::chrono::steady_clock::now();
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
          case OutputConstraint::Kind::kTokens: error = "forced tokens have no grammar"; break;  // (never asked)
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
    const bool finished = pending->done.wait_for(lock, std::chrono::duration<double>(limits.compile_timeout_s),
                                                 [&] { return pending->finished; });
    DI_INPUT_CHECK(finished, "{}: its {} constraint did not compile within {} s (--grammar-timeout)", who,
                   c.kind_name(), limits.compile_timeout_s);
    DI_INPUT_CHECK(pending->error.empty(), "{}: invalid {} constraint: {}", who, c.kind_name(), pending->error);
    if (seconds != nullptr) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++num_compiled;
    xgrammar::CompiledGrammar grammar = std::move(*pending->grammar);
    lock.unlock();
    require_a_first_token(grammar, c, who);
    const auto bytes = static_cast<int64_t>(grammar.MemorySizeBytes());
    DI_INPUT_CHECK(bytes <= limits.cache_bytes, "{}: its {} constraint compiles to {:.2f} MiB of grammar, more than "
                   "the {:.2f} MiB all compiled grammars may take (--grammar-cache-mb): simplify it, or raise the "
                   "limit", who, c.kind_name(), bytes / 1048576.0, limits.cache_bytes / 1048576.0);
    lru.push_front({key, grammar, bytes});
    cached[key] = lru.begin();
    cached_bytes += bytes;
    while (cached_bytes > limits.cache_bytes) {  // (the newest fits alone: it stays)
      cached_bytes -= lru.back().bytes;
      cached.erase(lru.back().key);
      lru.pop_back();
    }
    return grammar;
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
                                   std::vector<int32_t> stop_ids, GrammarLimits limits)
    : impl_(std::make_unique<Impl>()), vocab_size_(vocab_size) {
  DI_CHECK(static_cast<int64_t>(token_bytes.size()) <= vocab_size, "a tokenizer of {} tokens for a vocabulary of {}",
           token_bytes.size(), vocab_size);
  impl_->stop_ids = std::move(stop_ids);
  impl_->limits = limits;
  impl_->no_text.assign(vocab_size, true);
  for (size_t id = 0; id < token_bytes.size(); ++id) impl_->no_text[id] = token_bytes[id].empty();
  for (int32_t stop : impl_->stop_ids)
    if (stop >= 0 && stop < vocab_size) impl_->no_text[stop] = false;
  impl_->mask_words = mask_words();
  // RAW: the strings are the tokens' bytes; ids past the tokenizer's are padding (never admitted).
  const xgrammar::TokenizerInfo info(token_bytes, xgrammar::VocabType::RAW, static_cast<int>(vocab_size),
                                     impl_->stop_ids, /*add_prefix_space=*/false);
  // xgrammar's own cache stays off: the one here is bounded and evicts.
  impl_->compiler = std::make_shared<xgrammar::GrammarCompiler>(info, /*max_threads=*/8, /*cache_enabled=*/false);
}

StructuredOutput::~StructuredOutput() = default;

void StructuredOutput::compile(const OutputConstraint& constraint, const std::string& who) {
  if (constraint.kind == OutputConstraint::Kind::kTokens) {  // nothing to compile: the ids are checked
    impl_->forced_tokens(constraint, who, vocab_size_);
    return;
  }
  double seconds = 0;
  impl_->get(constraint, who, &seconds);
  const uint64_t key = std::hash<std::string>()(constraint.text) * 31 + static_cast<uint64_t>(constraint.kind);
  if (!impl_->checked.insert(key).second) return;
  impl_->checked_s += seconds;
  DI_INPUT_CHECK(impl_->checked_s <= impl_->limits.total_compile_s,
                 "{}: compiling the input's constraints has taken {:.3f} s in all ({} distinct ones so far), more "
                 "than the {} s allowed (--grammar-total-timeout): use fewer distinct constraints, or raise the limit",
                 who, impl_->checked_s, impl_->num_compiled, impl_->limits.total_compile_s);
}

int64_t StructuredOutput::num_compiled() const { return impl_->num_compiled; }

int64_t StructuredOutput::cached_bytes() const { return impl_->cached_bytes; }

double StructuredOutput::checked_seconds() const { return impl_->checked_s; }

bool StructuredOutput::constrains(const Sequence& seq) const {
  const auto it = impl_->matchers.find(&seq);
  return it != impl_->matchers.end() && !it->second.waiting;
}

int64_t StructuredOutput::drafts_before_start(const Sequence& seq, std::span<const int32_t> drafts) const {
  const auto it = impl_->matchers.find(&seq);
  if (it == impl_->matchers.end() || !it->second.waiting) return static_cast<int64_t>(drafts.size());
  const int32_t start = seq.request->constraint->after_token;
  return std::find(drafts.begin(), drafts.end(), start) - drafts.begin();
}

void StructuredOutput::forget(const Sequence& seq) { impl_->matchers.erase(&seq); }

void StructuredOutput::start(const Sequence& seq) {
  if (!seq.request->constraint) return;
  if (seq.request->constraint->kind == OutputConstraint::Kind::kTokens) {
    Impl::Matcher m;
    m.forced = impl_->forced_tokens(*seq.request->constraint, fmt::format("request id {}", seq.request->id.dump()),
                                    vocab_size_);
    impl_->matchers.insert_or_assign(&seq, std::move(m));
    advance(seq);
    return;
  }
  const xgrammar::CompiledGrammar grammar =
      impl_->get(*seq.request->constraint, fmt::format("request id {}", seq.request->id.dump()));
  impl_->matchers.insert_or_assign(&seq, Impl::Matcher{xgrammar::GrammarMatcher(grammar, impl_->stop_ids), 0,
                                                       seq.request->constraint->after_token >= 0, nullptr});
  advance(seq);
}

StructuredOutput::Progress StructuredOutput::advance(const Sequence& seq) {
  auto it = impl_->matchers.find(&seq);
  if (it == impl_->matchers.end()) return {};
  Impl::Matcher& m = it->second;
  for (int64_t i = seq.num_prompt_tokens + m.accepted; i < seq.num_tokens(); ++i, ++m.accepted) {
    const int32_t token = seq.tokens[i];
    if (m.waiting) {  // free text up to and including the start token
      m.waiting = token != seq.request->constraint->after_token;
      continue;
    }
    if (m.forced) {  // the forced token, or an EOS after them
      const int32_t expected = m.forced_at(0);
      const bool stop = std::find(impl_->stop_ids.begin(), impl_->stop_ids.end(), token) != impl_->stop_ids.end();
      if (expected >= 0 ? token == expected : stop) continue;
      const int64_t position = m.accepted;
      impl_->matchers.erase(it);
      return {std::nullopt, position};
    }
    // Every token is sampled under its mask, so a refusal means the mask admitted none: a dead end. (A token of
    // no text is refused without asking xgrammar, which would print a warning for each.)
    const bool textless = token < 0 || token >= vocab_size_ || impl_->no_text[token];
    if (textless || !m.matcher->AcceptToken(token)) {
      const int64_t position = m.accepted;
      impl_->matchers.erase(it);
      return {std::nullopt, position};
    }
  }
  if (seq.status == SequenceStatus::kHandedOff) impl_->matchers.erase(it);  // its decode rank goes on
  if (seq.status != SequenceStatus::kFinished) return {};
  const bool whole = m.forced ? m.accepted >= static_cast<int64_t>(m.forced->size())
                              : !m.waiting && (m.matcher->IsTerminated() || m.matcher->IsCompleted());
  impl_->matchers.erase(it);
  return {whole, std::nullopt};
}

int64_t StructuredOutput::fill_masks(const Sequence& seq, std::span<const int32_t> drafts, uint32_t* masks) {
  Impl::Matcher& m = impl_->matchers.at(&seq);
  const int64_t words = mask_words();
  const auto stops = [&](int32_t token) {
    return std::find(impl_->stop_ids.begin(), impl_->stop_ids.end(), token) != impl_->stop_ids.end();
  };
  int64_t admitted = 0;
  if (m.forced) {  // the drafts that are the forced tokens
    for (;; ++admitted) {
      impl_->fill(m, masks + admitted * words, admitted);
      if (admitted == static_cast<int64_t>(drafts.size()) || drafts[admitted] != m.forced_at(admitted)) break;
    }
    return admitted;
  }
  for (;; ++admitted) {
    fill_row(*m.matcher, masks + admitted * words, words);
    // A drafted stop token is left to the target's own row to sample (the verify ends before it).
    if (admitted == static_cast<int64_t>(drafts.size()) || stops(drafts[admitted]) ||
        !m.matcher->AcceptToken(drafts[admitted]))
      break;
  }
  if (admitted > 0) m.matcher->Rollback(static_cast<int>(admitted));
  return admitted;
}

void StructuredOutput::fill_masks(std::span<const Sequence* const> seqs, uint32_t* masks) {
  const auto n = static_cast<int64_t>(seqs.size());
  const int64_t words = mask_words();
  std::vector<Impl::Matcher*> matchers(n);
  for (int64_t i = 0; i < n; ++i) matchers[i] = &impl_->matchers.at(seqs[i]);
#pragma omp parallel for schedule(dynamic) if (n > 8)
  for (int64_t i = 0; i < n; ++i) impl_->fill(*matchers[i], masks + i * words);
}

}  // namespace deepinfer
