#include "src/engine/stop_sequences.h"

namespace deepinfer {

bool StopSequences::stops_at(const Sequence& seq, int64_t count) {
  const TextStops& stops = seq.request->stops;
  if (stops.sequences.empty()) return false;
  std::unique_ptr<Watch>& watch = watches_[&seq];
  if (watch == nullptr)
    watch = std::make_unique<Watch>(Watch{text::ChatStreamParser(tokenizer_(), stops.reasoning_first, stops.sequences,
                                                                 stops.tool_calls, stops.in_tool_calls)});
  for (; watch->read < count && !watch->stopped; ++watch->read)
    for (const text::StreamEvent& event : watch->parser.push(seq.tokens[seq.num_prompt_tokens + watch->read]))
      watch->stopped = watch->stopped || event.finish_reason == "stop";
  return watch->stopped;
}

}  // namespace deepinfer
