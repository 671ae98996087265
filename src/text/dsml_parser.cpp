#include "src/text/dsml_parser.h"

#include <array>
#include <utility>

#include "src/text/held_tokens.h"
#include "src/text/json_text.h"

namespace deepinfer::text {

namespace {

// The DSML token stands in the parser's text as kDsmlToken (a spelling no decoded text has), so that the token's
// text typed out in pieces is no markup.
// Both spellings of the tags are read, V4's and V4.1's (a space, and "calls" for "tool_calls": what the V4.1
// template renders in prompts), as deepseek-recipe reads both.
#define DSML "\x01DSML\x01"
using Spellings = std::array<std::string_view, 2>;
constexpr Spellings kOpen = {"<" DSML "tool_calls>", "<" DSML " calls>"};
constexpr std::string_view kTagStart = "<" DSML;
constexpr Spellings kInvoke = {"<" DSML "invoke name=\"", "<" DSML " invoke name=\""};
constexpr Spellings kParameter = {"<" DSML "parameter name=", "<" DSML " parameter name="};  // then the key's quote
constexpr std::string_view kClose = "</" DSML;
constexpr Spellings kBlockClose = {"</" DSML "tool_calls>", "</" DSML " calls>"};  // only this ends the block
#undef DSML

// `s` is a (proper or whole) beginning of `pattern`.
bool begins(std::string_view pattern, std::string_view s) { return pattern.substr(0, s.size()) == s; }
// ... of one of the spellings.
bool begins(const Spellings& patterns, std::string_view s) {
  return begins(patterns[0], s) || begins(patterns[1], s);
}
// The length of the spelling `s` starts with (0: none).
size_t starts_with(std::string_view s, const Spellings& patterns) {
  for (std::string_view p : patterns)
    if (s.starts_with(p)) return p.size();
  return 0;
}
// `s` is a proper beginning of one of the spellings: what completes it is still to come.
bool unfinished(const Spellings& patterns, std::string_view s) {
  for (std::string_view p : patterns)
    if (s.size() < p.size() && begins(p, s)) return true;
  return false;
}

// Content (or a value) as the model wrote it: the DSML token's own spelling back.
std::string as_content(std::string s) {
  for (size_t at = 0; (at = s.find(DsmlParser::kDsmlToken, at)) != std::string::npos;)
    s.replace(at, DsmlParser::kDsmlToken.size(), "｜DSML｜");
  return s;
}

std::string without_trailing_line_breaks(std::string s) {
  while (s.ends_with('\n')) s.pop_back();
  return s;
}

}  // namespace

void DsmlParser::arguments(std::vector<DsmlPiece>& out, std::string text) const {
  if (!text.empty()) out.push_back({DsmlPiece::Kind::kArguments, std::move(text), calls_});
}

std::vector<DsmlPiece> DsmlParser::feed(const std::string& text) {
  std::vector<DsmlPiece> out;
  if (mode_ == Mode::kText) {
    held_.push_back(text);
    text_mode(out);
  } else if (mode_ == Mode::kValue) {
    value(out, text);
  } else {
    buf_ += text;
  }
  if (mode_ != Mode::kText) parse(out);
  return out;
}

void DsmlParser::value(std::vector<DsmlPiece>& out, std::string text) {
  held_.push_back(std::move(text));
  std::string joined;
  for (const std::string& t : held_) joined += t;
  const size_t close = joined.find(kClose);
  // Where the closing tag may begin; the tokens wholly before it go out, each a piece.
  size_t until = close;
  if (close == std::string::npos) {
    until = joined.size();
    for (size_t at = 0; at < joined.size(); ++at)
      if (begins(kClose, std::string_view(joined).substr(at))) {
        until = at;
        break;
      }
  }
  size_t end = 0, taken = 0;
  for (const std::string& t : held_) {
    const bool whole = end + t.size() <= until;
    if (!whole && close == std::string::npos) break;
    const std::string part = as_content(whole ? t : t.substr(0, until - end));  // (the DSML token typed in a value)
    arguments(out, string_value_ ? json_escaped(part) : part);
    end += t.size();
    ++taken;
    if (!whole) break;
  }
  if (close == std::string::npos) {
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(taken));
    return;
  }
  if (string_value_) arguments(out, "\"");
  buf_ = joined.substr(close + kClose.size());
  held_.clear();
  mode_ = Mode::kAfterParam;
}

void DsmlParser::text_mode(std::vector<DsmlPiece>& out) {
  std::string joined;
  for (const std::string& t : held_) joined += t;
  const size_t tag = joined.find(kTagStart);
  if (tag != std::string::npos) {  // a DSML tag begins: the content before it (its last line breaks not) goes out
    std::string before = without_trailing_line_breaks(joined.substr(0, tag));
    if (!before.empty()) out.push_back({DsmlPiece::Kind::kContent, as_content(std::move(before)), 0});
    const std::string rest = joined.substr(tag);
    const size_t open = starts_with(rest, kOpen);
    if (open == 0 && unfinished(kOpen, rest)) {  // the block's name still to come
      held_ = {rest};
    } else {  // the block, or another DSML tag: what follows it is not content either way
      held_.clear();
      buf_ = open > 0 ? rest.substr(open) : std::string();
      mode_ = open > 0 ? Mode::kBlock : Mode::kDone;
    }
    return;
  }
  // A '<' in the new token that cannot begin the tag: every held token goes out (as deepseek-recipe has it: a
  // token such as "<\n" goes out whole, though it ends in a line break).
  const size_t lt = joined.rfind('<');
  if (lt != std::string::npos && lt + held_.back().size() >= joined.size() &&
      !begins(kOpen, std::string_view(joined).substr(lt))) {
    for (std::string& t : std::exchange(held_, {}))
      if (!t.empty()) out.push_back({DsmlPiece::Kind::kContent, as_content(std::move(t)), 0});
    return;
  }
  // The earliest place the block may begin (line breaks, then a beginning of its tag); the tokens wholly before
  // it go out, each as its own piece.
  size_t may_begin = joined.size();
  for (size_t at = 0; at < joined.size(); ++at) {
    const size_t tag_at = joined.find_first_not_of('\n', at);
    if (tag_at == std::string::npos || begins(kOpen, std::string_view(joined).substr(tag_at))) {
      may_begin = at;
      break;
    }
  }
  release_held_before(held_, may_begin, [&](std::string t) {
    if (!t.empty()) out.push_back({DsmlPiece::Kind::kContent, as_content(std::move(t)), 0});
  });
}

bool DsmlParser::tag_begun() const {
  if (mode_ != Mode::kText) return true;
  std::string joined;
  for (const std::string& t : held_) joined += t;
  return joined.find(kTagStart) != std::string::npos;
}

std::vector<DsmlPiece> DsmlParser::separate() {
  std::vector<DsmlPiece> out;
  if (mode_ != Mode::kText) return out;
  for (std::string& t : std::exchange(held_, {}))
    if (!t.empty()) out.push_back({DsmlPiece::Kind::kContent, as_content(std::move(t)), 0});
  return out;
}

void DsmlParser::parse(std::vector<DsmlPiece>& out) {
  for (;;) {
    switch (mode_) {
      case Mode::kText:
        return;
      case Mode::kDone:
        buf_.clear();
        return;
      case Mode::kBlock: {  // between invokes
        buf_.erase(0, std::min(buf_.size(), buf_.find_first_not_of(" \n")));
        if (const size_t invoke = starts_with(buf_, kInvoke)) {
          buf_.erase(0, invoke);
          attrs_.clear();
          mode_ = Mode::kInvokeName;
        } else if (const size_t end = starts_with(buf_, kBlockClose)) {
          buf_.erase(0, end);
          mode_ = Mode::kDone;
        } else if (buf_.empty() || begins(kInvoke, buf_) || begins(kBlockClose, buf_)) {
          return;
        } else {
          buf_.erase(0, 1);  // not markup (another closing tag too): passed over
        }
        break;
      }
      case Mode::kInvokeName: {
        const size_t quote = buf_.find('"');
        if (quote == std::string::npos) {
          attrs_ += std::exchange(buf_, std::string());
          return;
        }
        attrs_ += buf_.substr(0, quote);
        buf_.erase(0, quote + 1);
        out.push_back({DsmlPiece::Kind::kCallStart, attrs_, calls_});
        ++started_;
        has_params_ = false;
        mode_ = Mode::kInvokeOpen;
        break;
      }
      case Mode::kInvokeOpen:
      case Mode::kAfterParam:
      case Mode::kAfterInvoke: {  // up to the tag's '>'
        const size_t close = buf_.find('>');
        if (close == std::string::npos) {
          buf_.clear();
          return;
        }
        buf_.erase(0, close + 1);
        if (mode_ == Mode::kAfterParam) has_params_ = true;
        mode_ = mode_ == Mode::kAfterInvoke ? Mode::kBlock : Mode::kInvokeBody;
        break;
      }
      case Mode::kInvokeBody: {  // between parameters
        buf_.erase(0, std::min(buf_.size(), buf_.find_first_not_of(" \n")));
        if (const size_t parameter = starts_with(buf_, kParameter)) {
          buf_.erase(0, parameter);
          arguments(out, has_params_ ? ", " : "{");
          key_separator_sent_ = false;
          mode_ = Mode::kParamQuote;
        } else if (buf_.starts_with(kClose)) {
          buf_.erase(0, kClose.size());
          arguments(out, has_params_ ? "}" : "{}");
          ++calls_;
          mode_ = Mode::kAfterInvoke;
        } else if (buf_.empty() || begins(kParameter, buf_) || begins(kClose, buf_)) {
          return;
        } else {
          buf_.erase(0, 1);
        }
        break;
      }
      case Mode::kParamQuote: {  // the key's opening quote
        if (buf_.empty()) return;
        if (buf_[0] == '"') {
          arguments(out, "\"");
          buf_.erase(0, 1);
        }
        mode_ = Mode::kParamName;
        break;
      }
      case Mode::kParamName: {  // the key as it stands, its closing quote and anything else up to a space (the
                                // attributes), as deepseek-recipe reads it
        const size_t end = buf_.find(' ');
        arguments(out, buf_.substr(0, end));
        if (end == std::string::npos) {
          buf_.clear();
          return;
        }
        buf_.erase(0, end);
        attrs_.clear();
        mode_ = Mode::kParamAttrs;
        break;
      }
      case Mode::kParamAttrs: {
        if (buf_.empty()) return;
        if (!key_separator_sent_) {
          arguments(out, ": ");
          key_separator_sent_ = true;
        }
        const size_t close = buf_.find('>');
        attrs_ += buf_.substr(0, close);
        if (close == std::string::npos) {
          buf_.clear();
          return;
        }
        buf_.erase(0, close + 1);
        string_value_ = attrs_.find("string=\"true\"") != std::string::npos;
        if (string_value_) arguments(out, "\"");
        held_.clear();
        mode_ = Mode::kValue;
        break;
      }
      case Mode::kValue:  // what the token that opened the value held of it
        if (buf_.empty()) return;
        value(out, std::exchange(buf_, std::string()));
        break;
    }
  }
}

std::vector<DsmlPiece> DsmlParser::finish() {
  std::vector<DsmlPiece> out;
  if (mode_ == Mode::kText && held_.size() == 1 && held_[0].starts_with(kTagStart)) return out;  // a tag cut short
  if (mode_ == Mode::kText)
    for (std::string& t : std::exchange(held_, {}))
      if (!t.empty()) out.push_back({DsmlPiece::Kind::kContent, as_content(std::move(t)), 0});
  if (mode_ == Mode::kValue)  // a value cut short: what waited for its closing tag goes out
    for (std::string& t : std::exchange(held_, {}))
      arguments(out, string_value_ ? json_escaped(as_content(std::move(t))) : as_content(std::move(t)));
  return out;
}

}  // namespace deepinfer::text
