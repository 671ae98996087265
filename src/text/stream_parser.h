// Output tokens to chat events, one token at a time, as deepseek-recipe 0.2.0's stream processor gives them for a
// request without tools (checked against it: tests/fixtures/chat/streams.jsonl.xz): text goes to the reasoning
// until </think> where the prompt opened the reasoning, to the content after, each losing its leading line breaks; decoded text that ends in U+FFFD
// waits for the next token's bytes (which may complete a character; where the reasoning ends it goes out as it is,
// at the finish it is dropped); reasoning tokens that end a line wait for the next token, and the line breaks
// that end the reasoning are not sent; in the content, tokens whose text may begin a stop sequence wait, whole, until it
// is known whether one does (then each goes out as its own event), and a stop sequence met ends the stream there
// (finish reason "stop", the text before it sent). The reasoning is not searched for stop sequences, nor is an added
// token's text, nor tool-call markup. Tool calls: with `tool_calls` (a request with tools), the content that passes
// the stop sequences goes through dsml_parser.h; a block that opens inside the reasoning ends it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "src/text/bpe_tokenizer.h"
#include "src/text/dsml_parser.h"

namespace deepinfer::text {

struct StreamEvent {
  enum class Channel { kContent, kReasoning, kToolCall };
  Channel channel = Channel::kContent;
  std::string text;           // kToolCall: the call's name where `call_start`, else a piece of its arguments
  std::string finish_reason;  // set on the last event: "stop" (a stop sequence), "tool_calls" or the engine's reason
  int64_t call_index = 0;
  bool call_start = false;
};

class ChatStreamParser {
 public:
  // `tokenizer` outlives the parser.
  // With `tool_calls`, the content's DSML tool-call block becomes kToolCall events (dsml_parser.h).
  // `in_tool_calls`: the prompt opened the tool-call block (tool_choice required).
  ChatStreamParser(const BpeTokenizer& tokenizer, bool reasoning_first, std::vector<std::string> stop_sequences,
                   bool tool_calls = false, bool in_tool_calls = false);

  // The events of one more output token (none while it completes nothing).
  std::vector<StreamEvent> push(int32_t token);
  // The events of an engine's output tokens: the EOS that ended it left out, none after the end.
  std::vector<StreamEvent> push_output(std::span<const int32_t> tokens);
  // The last event where the stream ended without a stop sequence (e.g. "length").
  std::vector<StreamEvent> finish(const std::string& reason);
  bool finished() const { return finished_; }

 private:
  void emit(std::vector<StreamEvent>& out, std::string text);
  // Decoded text into the current channel: the reasoning (a line end waits a token) or the content (stops).
  void deliver(std::vector<StreamEvent>& out, std::string text);
  // Content text meets the stop sequences first, as deepseek-recipe reads it: the raw text, line breaks before a
  // tool-call block included, but not an added token's text (no stop spans one either) nor anything once a DSML
  // tag has begun (markup and values; a stray closing tag is content); what passes goes on to the DSML parser (where
  // there are tools) or out. A stop met ends the stream there.
  void content(std::vector<StreamEvent>& out, std::string text, bool added_token);
  // The text of held tokens that may begin a stop sequence, and the new text: the pieces that may go on now
  // (stop_met_ where one was met: the text before it).
  std::vector<std::string> before_stops(std::string text);
  void forward(std::vector<StreamEvent>& out, std::string text, bool added_token);
  void take(std::vector<StreamEvent>& out, std::vector<DsmlPiece> pieces);
  // Reasoning text: through the DSML parser where there are tools (a block may begin in the reasoning), then
  // reasoning_line (a line end waits a token).
  void reasoning(std::vector<StreamEvent>& out, std::string text, bool added_token);
  void reasoning_line(std::vector<StreamEvent>& out, std::string text);
  void flush_reasoning_dsml(std::vector<StreamEvent>& out);
  // The reasoning ends (</think>, or a tool-call block begins): its held last line goes out without its line breaks.
  void end_reasoning(std::vector<StreamEvent>& out);  // the reasoning ends: what its parser holds goes out
  void enter_block_from_reasoning(std::vector<StreamEvent>& out);  // a block opened in the reasoning
  static std::string dsml_text(std::string text, bool added_token);  // the DSML token as the parser reads it

  const BpeTokenizer& tokenizer_;
  int32_t think_end_ = -1;
  int32_t eos_ = -1;  // DeepSeek's <｜end▁of▁sentence｜>
  bool reasoning_;
  std::vector<std::string> stops_;
  std::string bytes_;              // decoded bytes not yet a whole UTF-8 character
  std::vector<std::string> held_;  // token texts that may begin a stop sequence
  std::vector<std::string> line_ends_;  // reasoning token texts that end a line, waiting for what follows
  bool at_channel_start_ = true;        // nothing sent in the current channel yet
  bool tool_calls_ = false;
  DsmlParser dsml_;            // the content's
  DsmlParser reasoning_dsml_;  // the reasoning's, where there are tools
  bool stop_met_ = false;
  bool finished_ = false;
};

}  // namespace deepinfer::text
