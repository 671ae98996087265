// Stop sequences watched where a sequence decodes. Each output token the scheduler appends goes through the request's
// chat stream parser (text/stream_parser.h, the reading the writers give the result, so its content and finish
// reason are theirs), and the token that completes a stop sequence ends the sequence there with finish reason stop:
// no more steps for it, and its output (and a user's token counts) end at that token. One parser per running
// sequence whose request has stop sequences, made at its first output token (a decode rank's sequence prefilled
// elsewhere catches up on the token the prefill rank sampled) and dropped when it finishes or leaves the rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "src/engine/sequence.h"
#include "src/text/bpe_tokenizer.h"
#include "src/text/stream_parser.h"

namespace deepinfer {

class StopSequences {
 public:
  // The tokenizer is asked for at the first request with stop sequences (a chat request: its rank loaded it to
  // render the prompt).
  using TokenizerSource = std::function<const text::BpeTokenizer&()>;
  explicit StopSequences(TokenizerSource tokenizer) : tokenizer_(std::move(tokenizer)) {}

  // Whether seq's output tokens [0, count) complete one of its request's stop sequences, at the last of them. Calls
  // for a sequence come with `count` growing (each token read once); a request without stop sequences never stops.
  bool stops_at(const Sequence& seq, int64_t count);
  // The sequence finished or left this rank: its parser goes.
  void forget(const Sequence& seq) { watches_.erase(&seq); }
  int64_t watched() const { return static_cast<int64_t>(watches_.size()); }

 private:
  struct Watch {
    text::ChatStreamParser parser;
    int64_t read = 0;  // output tokens through the parser
    bool stopped = false;
  };
  TokenizerSource tokenizer_;
  std::unordered_map<const Sequence*, std::unique_ptr<Watch>> watches_;
};

}  // namespace deepinfer
