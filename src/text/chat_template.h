// DeepSeek-V4 and V4.1 chat prompts, rendered as deepseek-recipe 0.2.0 renders them (checked against its output:
// tests/fixtures/chat), and encoded with special tokens kept apart from text: a user who types "<｜User｜>" gets
// those characters as text, not the token.
//
// A conversation is system, user and assistant messages, thinking on or off, and a reasoning effort. Rendering:
//   - the prompt opens with BOS; a run of user messages is one turn, <｜User｜> + their texts joined by blank
//     lines (V4: the non-empty ones; V4.1: all); every assistant message is <｜Assistant｜> + </think> + its
//     content + EOS (earlier turns' reasoning is dropped). A prefix assistant message last is continued instead:
//     no EOS, and in thinking mode, where it has reasoning (V4.1: and is not the first message), <think> + the
//     reasoning + </think> before its content (no </think> where the content is empty: the reasoning goes on).
//     Otherwise the prompt ends with the next turn: <｜Assistant｜> + <think> (thinking) or </think>.
//   - V4: every system text moves to the top (after BOS), the non-empty ones joined by blank lines, preceded in
//     thinking mode by the reasoning-effort instruction.
//   - V4.1: a system message stays where it is, as <｜System｜> + its text; in thinking mode a conversation with
//     messages opens with <｜System｜> + the effort instruction, which a first system message's text continues. A
//     prefix assistant message that is not last is left open as well (V4 closes it).
// The effort instructions are DeepSeek's prose, not carried here: launch/chat_prose.py writes them (chat_prose.json)
// from the installed deepseek-recipe.
// Not built yet (refused with an error naming them): tools and tool calls, tool results, latest-reminder messages,
// response formats.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/text/bpe_tokenizer.h"

namespace deepinfer::text {

enum class ChatFormat { kV4, kV41 };

struct ChatMessage {
  enum class Role { kSystem, kUser, kAssistant };
  Role role = Role::kUser;
  std::string content;
  std::optional<std::string> reasoning;  // assistant: its reasoning_content
  bool prefix = false;                   // assistant, last: continued instead of closed
};

struct ChatConversation {
  std::vector<ChatMessage> messages;
  bool thinking = true;
  std::string reasoning_effort;  // low | high | xhigh | max; empty: the encoding's default
};

// The effort instructions of each format: effort -> the text put before the conversation in thinking mode.
struct ChatProse {
  std::map<std::string, std::string> v4_effort, v41_effort;  // keys low, high, xhigh, max, default

  static ChatProse load(const std::filesystem::path& chat_prose_json);  // InputError naming the file and key
};

// A rendered prompt: its text and the byte ranges [start, end) of the special tokens in it, ascending.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> special_ranges;
};

// `what` names the conversation in errors (e.g. "request line 3").
RenderedChat render_chat(ChatFormat format, const ChatProse& prose, const ChatConversation& conversation,
                         const std::string& what);

// The prompt's ids: each special range as its token, the text between them as plain text.
std::vector<int32_t> encode_chat(const BpeTokenizer& tokenizer, const RenderedChat& prompt);

}  // namespace deepinfer::text
