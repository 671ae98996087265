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
//   - Tools (unless tool_choice is none): the tool-use instructions with one JSON line per tool's schema (as Python's
//     json.dumps writes it) follow the system text (V4.1: inside the opening system block); earlier assistant
//     turns then keep their reasoning (<think> + reasoning + </think>; V4.1 in thinking mode only); an assistant's
//     tool calls follow its content as a DSML block (each argument a parameter: strings as they are, other values
//     as JSON); tool results are user text, <tool_result> + content + </tool_result> (V4: results after a user
//     message open a new user turn, and a blank line parts the results from the user texts after them);
//     tool_choice required opens the answer's DSML block.
//   - A response format (json_object, or json_schema with its schema) adds its instructions after the tools'; a
//     latest_reminder message is <｜latest_reminder｜> + its text, a turn of its own (V4.1: of consecutive ones the first).
// The effort and tool-use instructions are DeepSeek's prose, not carried here: launch/chat_prose.py writes them
// (chat_prose.json) from the installed deepseek-recipe.
// Not built yet (refused with an error naming them): system messages carrying tools. Floats in tool schemas print in nlohmann's shortest form, which can differ from Python's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/text/bpe_tokenizer.h"

namespace deepinfer::text {

enum class ChatFormat { kV4, kV41 };

struct ChatToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object: each member one DSML parameter, in order
};

struct ChatMessage {
  enum class Role { kSystem, kUser, kAssistant, kTool, kReminder };  // kReminder: a latest_reminder message
  Role role = Role::kUser;
  std::string content;
  std::optional<std::string> reasoning;  // assistant: its reasoning_content
  std::vector<ChatToolCall> tool_calls;  // assistant
  bool prefix = false;                   // assistant, last: continued instead of closed
};

struct ChatTool {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters;  // its JSON Schema (an empty object where none was given)
  bool has_parameters = false;        // given (and so checked)
  bool strict = false;                // its schema is held to the API's strict subset
};

struct ChatConversation {
  std::vector<ChatMessage> messages;
  bool thinking = true;
  std::string reasoning_effort;  // low | high | xhigh | max; empty: the encoding's default
  std::vector<ChatTool> tools;
  std::string tool_choice = "auto";  // auto | none | required
  std::string response_format = "text";  // text | json_object | json_schema | regex (the last: no instructions)
  nlohmann::ordered_json response_schema;  // json_schema's
};

// DeepSeek's instructions, per format: effort -> the text put before the conversation in thinking mode; the
// tool-use instructions before and after the tools' schemas, as text and the special tokens it names.
struct ChatProse {
  struct Segment {
    std::string text;
    bool special = false;
  };
  struct Format {
    std::map<std::string, std::string> effort;  // keys low, high, xhigh, max, default
    std::vector<Segment> tools_before, tools_after;
    std::string response_schema_before, response_json_object;
  };
  Format v4, v41;

  static ChatProse load(const std::filesystem::path& chat_prose_json);  // InputError naming the file and key
};

// A rendered prompt: its text and the byte ranges [start, end) of the special tokens in it, ascending.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> special_ranges;
  bool reasoning_open = false;  // the prompt ends inside the reasoning: the output starts with it
};

// `what` names the conversation in errors (e.g. "request line 3").
RenderedChat render_chat(ChatFormat format, const ChatProse& prose, const ChatConversation& conversation,
                         const std::string& what);

// The prompt's ids: each special range as its token, the text between them as plain text.
std::vector<int32_t> encode_chat(const BpeTokenizer& tokenizer, const RenderedChat& prompt);

// Before any request: every special token a `format` prompt can hold (the template's own, and the prose's
// {"special"} segments) is a token of `tokenizer`. InputError naming the prose file's key or the tokenizer file
// and the token, so that a wrong or damaged file is blamed, not the first request that meets it.
void check_chat_tokens(ChatFormat format, const ChatProse& prose, const std::string& prose_source,
                       const BpeTokenizer& tokenizer, const std::string& tokenizer_source);

}  // namespace deepinfer::text
