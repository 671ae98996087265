// Structured output (issue #30): a request's OutputConstraint (JSON Schema, any JSON object, regex, EBNF) compiled
// once per distinct constraint into xgrammar's grammar state machine over the model's vocabulary, a matcher per
// constrained sequence advanced with every token it emits, and per logits row the vocabulary bitmask of the tokens
// the grammar admits next, which the engine applies before sampling (on the device where the backend samples).
//  - Speculative decoding: a sequence's drafts are walked through its matcher; the first draft the grammar refuses
//    and those after it are not verified, and the rows of the others get the masks of the state after the drafts
//    before them (the matcher is rolled back after the walk).
//  - The vocabulary: each token id's bytes as the tokenizer decodes them; special and added tokens are never admitted
//    (xgrammar treats tokens of no bytes as special), except the model's EOS tokens, which end a sentence; ids past
//    the tokenizer's (the model's padding of its vocabulary) are never admitted.
//  - A constrained request ends at its grammar's end (its EOS is admitted only there and always stops it), or is cut
//    short by its max_new_tokens; its result says which (RequestResult::constraint_satisfied).
//  - Forced tokens (OutputConstraint::Kind::kTokens) need no grammar: each row's mask admits the next forced token,
//    then the model's EOS tokens; drafts are admitted while they are the forced tokens.
//  - A constraint that starts after a token (OutputConstraint::after_token: a thinking-mode answer after </think>)
//    leaves the output free until that token is emitted: the sequence is not constrained (no masks) until then, and
//    drafts stop before that token, so that it is always the last token of its step and the grammar masks the next.
// xgrammar is held behind this class (its headers stay in structured_output.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/engine/request.h"
#include "src/engine/sequence.h"

namespace deepinfer {

// What compiling constraints may cost. A grammar compiled over a large vocabulary can take seconds and hundreds
// of MB (its token-mask cache), so one compile, all the compiles a job's input asks for before the work, and the
// compiled grammars kept for reuse are each bounded.
struct GrammarLimits {
  double compile_timeout_s = 30.0;      // one compile (longer: the constraint is refused)
  double total_compile_s = 600.0;       // the compiles of compile() together (the input's check before the work)
  int64_t cache_bytes = int64_t{1} << 30;  // compiled grammars kept; least recently used evicted past it
};

class StructuredOutput {
 public:
  // token_bytes: the tokenizer's tokens as bytes, by id (empty for special and added tokens); vocab_size: the
  // model's (the logits' width, at least the tokenizer's); stop_ids: the model's EOS tokens.
  StructuredOutput(std::vector<std::string> token_bytes, int64_t vocab_size, std::vector<int32_t> stop_ids,
                   GrammarLimits limits);
  ~StructuredOutput();
  StructuredOutput(const StructuredOutput&) = delete;
  StructuredOutput& operator=(const StructuredOutput&) = delete;

  // Compiles the constraint (once per distinct one while it stays cached): the input's check before the work.
  // InputError naming `who` for an invalid or unsupported schema, regex or grammar, one that does not compile
  // within the time limit, one whose compiled grammar alone is larger than the cache, or once these compiles
  // together have taken longer than the total limit.
  void compile(const OutputConstraint& constraint, const std::string& who);
  int64_t num_compiled() const;  // distinct constraints compiled so far (evicted or not)
  int64_t cached_bytes() const;  // compiled grammars held by the cache now
  // compile()'s first compiles of each distinct constraint, together (what --grammar-total-timeout bounds; a
  // recompile after an eviction does not count).
  double checked_seconds() const;

  // 32-bit words of one row's bitmask (bit v % 32 of word v / 32: token v admitted).
  int64_t mask_words() const { return (vocab_size_ + 31) / 32; }
  int64_t vocab_size() const { return vocab_size_; }

  // A constrained sequence's matcher (its request's constraint compiled), advanced over the tokens it has generated
  // so far (a sequence handed off after its first token, or resumed). No-op for an unconstrained one.
  void start(const Sequence& seq);
  // Whether the sequence's next tokens are masked (a constraint that waits for its start token masks nothing yet).
  bool constrains(const Sequence& seq) const;
  // Of a sequence whose constraint waits for its start token: how many of the drafts may be verified (those before
  // that token); all of them otherwise.
  int64_t drafts_before_start(const Sequence& seq, std::span<const int32_t> drafts) const;
  // Drops a sequence's matcher before its end (a request dropped unstarted).
  void forget(const Sequence& seq);
  // What advance found.
  struct Progress {
    std::optional<bool> satisfied;  // the sequence has finished: whether its output is a whole sentence
    // The grammar refused the token at this output position: it was sampled under a mask that admitted nothing,
    // the grammar having reached a state no token of the vocabulary continues (a regex `a\t` over a vocabulary
    // without a tab, past its `a`). The sequence cannot go on; its matcher is dropped.
    std::optional<int64_t> dead_end;
  };
  // Advances the sequence's matcher over the tokens it generated since the last call; when the sequence has
  // finished (or dead-ends), records it and drops the matcher. Nothing to record while the sequence runs, or for
  // an unconstrained one.
  Progress advance(const Sequence& seq);
  // The masks of a sampling step's rows for the sequence (which must be constrained): row 0 after its tokens, row j
  // after drafts[0, j) too. Returns how many drafts the grammar admits (a prefix); masks of rows 0..that are written
  // to masks[row * mask_words()].
  int64_t fill_masks(const Sequence& seq, std::span<const int32_t> drafts, uint32_t* masks);
  // Row 0's mask of each sequence (all constrained) into masks[i * mask_words()], the sequences spread over the
  // host's threads (their matchers are independent; the compiled grammars are shared read-only).
  void fill_masks(std::span<const Sequence* const> seqs, uint32_t* masks);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t vocab_size_;
};

}  // namespace deepinfer
