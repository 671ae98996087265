// The DSML tool-call block in a model's content, parsed as the text arrives, as deepseek-recipe 0.2.0's stream
// processor does (checked against it: tests/fixtures/chat/streams_tools.jsonl.xz). Content before the block
// passes through (text that may begin "<｜DSML｜tool_calls>", line breaks before it included, waits whole tokens at
// a time; the line breaks right before the block are not sent); in the block each invoke becomes a call — its
// name as soon as it is read, then its arguments as a JSON object written piece by piece (`{`, each key as a
// JSON string, `: `, a string parameter's value JSON-escaped between quotes or another value as it stands, `, `
// between parameters, `}`); text after the block is dropped. Both tag spellings, V4's (`<｜DSML｜tool_calls>`,
// `invoke`, `parameter`) and V4.1's (`<｜DSML｜ calls>`, ` invoke`, ` parameter`), whatever the model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::text {

struct DsmlPiece {
  enum class Kind { kContent, kCallStart, kArguments };
  Kind kind = Kind::kContent;
  std::string text;  // content, the call's name (kCallStart) or a piece of its arguments
  int64_t index = 0;  // the call's
};

class DsmlParser {
 public:
  // `in_block`: the prompt opened the block (tool_choice required): the text starts inside it.
  explicit DsmlParser(bool in_block = false) : mode_(in_block ? Mode::kBlock : Mode::kText) {}
  // What to feed for the DSML special token (its text typed out in ordinary tokens is no markup).
  static constexpr std::string_view kDsmlToken = "\x01DSML\x01";

  // One token's text (the pieces it completes; content comes whole tokens at a time).
  std::vector<DsmlPiece> feed(const std::string& text);
  // The end of the output: held content goes out.
  std::vector<DsmlPiece> finish();
  // A token of no text (a stray </think>) came between: what waited as the possible start of a block is content.
  std::vector<DsmlPiece> separate();
  int64_t calls_started() const { return started_; }
  // Inside a tool-call block (its text is markup and values, not content).
  bool in_block() const { return mode_ != Mode::kText && mode_ != Mode::kDone; }
  bool in_text() const { return mode_ == Mode::kText; }  // no block begun yet: text is content
  bool holds_text() const { return mode_ == Mode::kText && !held_.empty(); }  // a possible block start waits
  // A tag has begun: the block (or another tag) opened, or the held text holds the start of one.
  bool tag_begun() const;

 private:
  enum class Mode { kText, kBlock, kInvokeName, kInvokeOpen, kInvokeBody, kParamQuote, kParamName, kParamAttrs,
                    kValue, kAfterParam, kAfterInvoke, kDone };
  void text_mode(std::vector<DsmlPiece>& out);
  void parse(std::vector<DsmlPiece>& out);  // the block, from buf_
  void arguments(std::vector<DsmlPiece>& out, std::string text) const;
  // A parameter's value, token by token: tokens that may begin its closing tag wait whole.
  void value(std::vector<DsmlPiece>& out, std::string text);

  Mode mode_;
  std::vector<std::string> held_;  // token texts that may begin the block (text mode) or a value's closing tag
  std::string buf_;                // block: text not parsed yet
  std::string attrs_;              // a parameter's attributes, up to its '>'
  bool string_value_ = false, has_params_ = false, key_separator_sent_ = false;
  int64_t calls_ = 0;    // invokes closed
  int64_t started_ = 0;  // invokes whose name was read
};

}  // namespace deepinfer::text
