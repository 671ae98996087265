#include "src/text/stream_parser.h"

#include <algorithm>
#include <utility>

#include "src/core/check.h"
#include "src/text/held_tokens.h"
#include "src/text/utf8.h"

namespace deepinfer::text {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

ChatStreamParser::ChatStreamParser(const BpeTokenizer& tokenizer, bool reasoning_first,
                                   std::vector<std::string> stop_sequences, bool tool_calls, bool in_tool_calls)
    : tokenizer_(tokenizer),
      think_end_(tokenizer.token_to_id("</think>")),
      eos_(tokenizer.token_to_id("<｜end▁of▁sentence｜>")),
      reasoning_(reasoning_first),
      stops_(std::move(stop_sequences)),
      tool_calls_(tool_calls),
      dsml_(in_tool_calls) {
  std::erase(stops_, std::string());
}

void ChatStreamParser::emit(std::vector<StreamEvent>& out, std::string text) {
  if (at_channel_start_) {  // a channel's first text loses its leading line breaks
    text.erase(0, text.find_first_not_of('\n'));
    at_channel_start_ = text.empty();
  }
  if (text.empty()) return;
  out.push_back({reasoning_ ? StreamEvent::Channel::kReasoning : StreamEvent::Channel::kContent, std::move(text), {}});
}

std::vector<std::string> ChatStreamParser::before_stops(std::string text) {
  std::vector<std::string> out;
  if (at_channel_start_ && held_.empty()) {
    // The content's leading line breaks are dropped before the stop sequences are looked for in it, except by a
    // stop of one character, which meets the text as it came (deepseek-recipe 0.2.0 does both).
    const bool single_char_stop_met = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& stop) {
      return stop.size() == 1 && text.find(stop) != std::string::npos;
    });
    if (!single_char_stop_met) {
      text.erase(0, text.find_first_not_of('\n'));
      if (text.empty()) return out;
      at_channel_start_ = false;
    }
  }
  held_.push_back(std::move(text));
  std::string joined;
  for (const std::string& t : held_) joined += t;
  size_t first_stop = std::string::npos;
  for (const std::string& stop : stops_) first_stop = std::min(first_stop, joined.find(stop));
  if (first_stop != std::string::npos) {  // each held token's text up to the stop, then the end
    size_t at = 0;
    for (const std::string& t : held_) {
      if (at >= first_stop) break;
      out.push_back(t.substr(0, first_stop - at));
      at += t.size();
    }
    held_.clear();
    stop_met_ = true;
    return out;
  }
  // The earliest place a stop sequence may begin; the tokens wholly before it go on.
  size_t may_begin = joined.size();
  for (size_t at = 0; at < joined.size() && may_begin == joined.size(); ++at)
    for (const std::string& stop : stops_)
      if (stop.compare(0, joined.size() - at, joined, at) == 0) {
        may_begin = at;
        break;
      }
  release_held_before(held_, may_begin, [&](std::string t) { out.push_back(std::move(t)); });  // a piece a token
  return out;
}

void ChatStreamParser::deliver(std::vector<StreamEvent>& out, std::string text) {
  if (reasoning_) return reasoning(out, std::move(text), false);
  content(out, std::move(text), false);
}

void ChatStreamParser::reasoning_line(std::vector<StreamEvent>& out, std::string text) {
  // The reasoning's last line break waits for what follows it: a token that ends a line is held, and line
  // breaks alone after it join it; anything else lets the held tokens go.
  if (!line_ends_.empty() && text.find_first_not_of('\n') == std::string::npos)
    return line_ends_.push_back(std::move(text));
  for (std::string& held : std::exchange(line_ends_, {})) emit(out, std::move(held));
  if (text.ends_with('\n')) line_ends_.push_back(std::move(text));
  else emit(out, std::move(text));
}

void ChatStreamParser::reasoning(std::vector<StreamEvent>& out, std::string text, bool added_token) {
  if (!tool_calls_) return reasoning_line(out, std::move(text));
  // With tools, a DSML tool-call block may begin inside the reasoning (no </think> before it): the reasoning ends
  // there (its last line breaks not sent) and the calls follow, as deepseek-recipe reads it.
  std::vector<DsmlPiece> pieces = reasoning_dsml_.feed(dsml_text(std::move(text), added_token));
  // Text the parser gives back while it holds later text (a possible tag start) has had its next token: its line
  // ends wait no more.
  const bool followed = reasoning_dsml_.holds_text();
  for (DsmlPiece& p : pieces) {
    if (p.kind == DsmlPiece::Kind::kContent && reasoning_) {
      if (!followed) {
        reasoning_line(out, std::move(p.text));
        continue;
      }
      for (std::string& held : std::exchange(line_ends_, {})) emit(out, std::move(held));
      emit(out, std::move(p.text));
      continue;
    }
    if (reasoning_) enter_block_from_reasoning(out);
    take(out, {std::move(p)});
  }
  // The block's opening tag alone ends the reasoning: what follows it (a </think> too) is the block's.
  if (reasoning_ && reasoning_dsml_.in_block()) enter_block_from_reasoning(out);
}

void ChatStreamParser::enter_block_from_reasoning(std::vector<StreamEvent>& out) {
  end_reasoning(out);
  dsml_ = std::exchange(reasoning_dsml_, DsmlParser());  // in the block now: the content's parser from here on
}

void ChatStreamParser::end_reasoning(std::vector<StreamEvent>& out) {
  std::string last;
  for (const std::string& held : std::exchange(line_ends_, {})) last += held;
  while (last.ends_with('\n')) last.pop_back();
  emit(out, std::move(last));
  reasoning_ = false;
  at_channel_start_ = true;
}

std::string ChatStreamParser::dsml_text(std::string text, bool added_token) {
  return added_token && text == "｜DSML｜" ? std::string(DsmlParser::kDsmlToken) : std::move(text);
}

void ChatStreamParser::flush_reasoning_dsml(std::vector<StreamEvent>& out) {
  if (!tool_calls_ || !reasoning_) return;
  for (DsmlPiece& p : reasoning_dsml_.finish())
    if (p.kind == DsmlPiece::Kind::kContent) reasoning_line(out, std::move(p.text));
  reasoning_dsml_ = DsmlParser();
}

void ChatStreamParser::content(std::vector<StreamEvent>& out, std::string text, bool added_token) {
  if (added_token) {  // an added token's text is not searched for stop sequences, and no stop spans it
    for (std::string& held : std::exchange(held_, {})) forward(out, std::move(held), false);
    return forward(out, std::move(text), true);
  }
  if (stops_.empty() || (tool_calls_ && dsml_.tag_begun()))  // nothing to look for, or markup (not searched)
    return forward(out, std::move(text), false);
  for (std::string& piece : before_stops(std::move(text))) forward(out, std::move(piece), false);
  if (!stop_met_) return;
  if (tool_calls_) take(out, dsml_.finish());  // the text before the stop is all there is
  out.push_back({StreamEvent::Channel::kContent, {}, "stop"});
  finished_ = true;
}

void ChatStreamParser::forward(std::vector<StreamEvent>& out, std::string text, bool added_token) {
  if (tool_calls_) return take(out, dsml_.feed(dsml_text(std::move(text), added_token)));
  emit(out, std::move(text));
}

void ChatStreamParser::take(std::vector<StreamEvent>& out, std::vector<DsmlPiece> pieces) {
  for (DsmlPiece& p : pieces) {
    if (p.kind == DsmlPiece::Kind::kContent) {
      emit(out, std::move(p.text));
      continue;
    }
    out.push_back({StreamEvent::Channel::kToolCall, std::move(p.text), {}, p.index,
                   p.kind == DsmlPiece::Kind::kCallStart});
  }
}

std::vector<StreamEvent> ChatStreamParser::push(int32_t token) {
  DI_CHECK(!finished_, "the stream has finished");
  std::vector<StreamEvent> out;
  // A stray </think> outside the reasoning: no text, as recipe; but the content has begun (its line breaks after it
  // are sent). Inside a tool-call block it is the text it spells.
  if (!reasoning_ && token == think_end_ && !(tool_calls_ && dsml_.in_block())) {
    at_channel_start_ = false;
    if (tool_calls_) take(out, dsml_.separate());  // line breaks no longer precede a block
    return out;
  }
  if (reasoning_ && token == think_end_) {  // the reasoning ends: its last line breaks are not sent
    flush_reasoning_dsml(out);
    if (!bytes_.empty()) {  // what is incomplete is invalid now, and the reasoning's last text
      for (std::string& held : std::exchange(line_ends_, {})) emit(out, std::move(held));
      emit(out, utf8_lossy(std::exchange(bytes_, std::string())));
      reasoning_ = false;
      at_channel_start_ = true;
    } else {
      end_reasoning(out);
    }
    return out;
  }
  if (tokenizer_.is_added(token)) {  // its own text: what came before it is complete (or invalid) now
    if (!bytes_.empty()) deliver(out, utf8_lossy(std::exchange(bytes_, std::string())));
    if (finished_) return out;
    std::string text = tokenizer_.token_bytes(token);
    if (reasoning_) reasoning(out, std::move(text), true);
    else content(out, std::move(text), true);
    return out;
  }
  // Text that ends in a replacement character waits: more bytes may complete it.
  bytes_ += tokenizer_.token_bytes(token);
  std::string text = utf8_lossy(bytes_);
  if (text.ends_with(kReplacement)) return out;
  bytes_.clear();
  deliver(out, std::move(text));
  return out;
}

std::vector<StreamEvent> ChatStreamParser::push_output(std::span<const int32_t> tokens) {
  std::vector<StreamEvent> out;
  for (const int32_t id : tokens) {
    if (finished_) break;
    // The EOS that ended it is no text (as an inference server does not pass it on); other special tokens are the
    // text they spell, as recipe shows them. Past the tokenizer: a padding id, no text.
    if (id >= tokenizer_.vocab_size() || id == eos_) continue;
    for (StreamEvent& e : push(id)) out.push_back(std::move(e));
  }
  return out;
}

std::vector<StreamEvent> ChatStreamParser::finish(const std::string& reason) {
  DI_CHECK(!finished_, "the stream has finished");
  std::vector<StreamEvent> out;
  flush_reasoning_dsml(out);
  for (std::string& t : std::exchange(line_ends_, {})) emit(out, std::move(t));
  for (std::string& t : std::exchange(held_, {})) forward(out, std::move(t), false);  // no stop sequence came
  if (tool_calls_) take(out, dsml_.finish());
  if (dsml_.calls_started() > 0 && reason != "length") {  // (cut short by the length: it says so, as recipe does)
    out.push_back({StreamEvent::Channel::kContent, {}, "tool_calls"});
    finished_ = true;
    return out;
  }
  out.push_back({StreamEvent::Channel::kContent, {}, reason});
  finished_ = true;
  return out;
}

}  // namespace deepinfer::text
