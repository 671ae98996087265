#include "src/text/chat_template.h"

#include <array>
#include <cstring>

#include <nlohmann/json.hpp>

#include "src/core/check.h"
#include "src/core/json_depth.h"
#include "src/core/files.h"
#include "src/text/json_text.h"

namespace deepinfer::text {

namespace {

// The special tokens' spellings in DeepSeek's tokenizers.
constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
constexpr const char* kEos = "<｜end▁of▁sentence｜>";
constexpr const char* kUser = "<｜User｜>";
constexpr const char* kAssistant = "<｜Assistant｜>";
constexpr const char* kSystem = "<｜System｜>";
constexpr const char* kThinkStart = "<think>";
constexpr const char* kThinkEnd = "</think>";
constexpr const char* kReminder = "<｜latest_reminder｜>";

// A prompt being written: text, and special tokens whose byte ranges are recorded.
class PromptWriter {
 public:
  void text(const std::string& s) { out_.text += s; }
  void special(const char* token) {
    const size_t start = out_.text.size();
    out_.text += token;
    out_.special_ranges.emplace_back(start, out_.text.size());
  }
  // An assistant's own text and reasoning: the grounding tokens' spellings in it are the tokens (the model wrote them so), as
  // deepseek-recipe renders them; elsewhere (system, user text) they stay text.
  void assistant_text(const std::string& s) {
    static constexpr std::array<const char*, 8> kGrounding = {"<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>",
                                                              "<｜point｜>", "<｜/point｜>", "<｜polygon｜>",
                                                              "<｜/polygon｜>"};
    size_t at = 0;
    while (at < s.size()) {
      size_t next = std::string::npos;
      const char* token = nullptr;
      for (const char* g : kGrounding)
        if (const size_t found = s.find(g, at); found < next) next = found, token = g;
      if (token == nullptr) break;
      text(s.substr(at, next - at));
      special(token);
      at = next + std::strlen(token);
    }
    text(s.substr(at));
  }
  void prose(const std::vector<ChatProse::Segment>& segments) {
    for (const ChatProse::Segment& s : segments) {
      if (s.special) special(s.text.c_str());
      else text(s.text);
    }
  }
  RenderedChat take() {
    // Where the last special token opens the reasoning (<think>, then perhaps the reasoning continued).
    const auto& last = out_.special_ranges.back();  // BOS at least
    out_.reasoning_open = out_.text.compare(last.first, last.second - last.first, kThinkStart) == 0;
    return std::move(out_);
  }

 private:
  RenderedChat out_;
};

const std::string& effort_text(const std::map<std::string, std::string>& efforts, const std::string& effort,
                               const std::string& what) {
  const auto found = efforts.find(effort.empty() ? "default" : effort);
  DI_INPUT_CHECK(found != efforts.end(), "{}: reasoning_effort '{}' is none of low, high, xhigh, max", what, effort);
  return found->second;
}

std::string join_nonempty(const std::vector<std::string>& parts) {
  std::string joined;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!joined.empty()) joined += "\n\n";
    joined += p;
  }
  return joined;
}

// The DSML markup of each format: the tags after the DSML token.
struct Dsml {
  const char* calls;
  const char* invoke;
  const char* parameter;
  bool newline_per_parameter;  // V4 ends every parameter line with a line break; V4.1 joins them with one
};
Dsml dsml_of(ChatFormat format) {
  return format == ChatFormat::kV4 ? Dsml{"tool_calls", "invoke", "parameter", true}
                                   : Dsml{" calls", " invoke", " parameter", false};
}
constexpr const char* kDsml = "｜DSML｜";

JsonFloats floats_of(ChatFormat format) { return format == ChatFormat::kV4 ? JsonFloats::kV4 : JsonFloats::kV41; }

void write_tool_calls(PromptWriter& w, ChatFormat format, const std::vector<ChatToolCall>& calls) {
  const Dsml d = dsml_of(format);
  const auto tag = [&](const char* open, const char* name, const std::string& rest) {
    w.text(open);
    w.special(kDsml);
    w.text(std::string(name) + rest);
  };
  tag("\n\n<", d.calls, ">\n");
  for (size_t c = 0; c < calls.size(); ++c) {
    if (c > 0) w.text("\n");
    tag("<", d.invoke, fmt::format(" name=\"{}\">\n", calls[c].name));
    size_t p = 0;
    for (const auto& [key, value] : calls[c].arguments.items()) {
      if (p++ > 0 && !d.newline_per_parameter) w.text("\n");
      const bool is_string = value.is_string();
      tag("<", d.parameter, fmt::format(" name=\"{}\" string=\"{}\">{}", key, is_string ? "true" : "false",
                                        is_string ? value.get<std::string>() : python_json(value, floats_of(format))));
      tag("</", d.parameter, d.newline_per_parameter ? ">\n" : ">");
    }
    tag(d.newline_per_parameter ? "</" : "\n</", d.invoke, ">");
  }
  tag("\n</", d.calls, ">");
}

void write_tools(PromptWriter& w, ChatFormat format, const ChatProse::Format& prose, const std::vector<ChatTool>& tools) {
  w.prose(prose.tools_before);
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) w.text("\n");
    nlohmann::ordered_json schema;
    schema["name"] = tools[i].name;
    schema["description"] = tools[i].description;
    schema["parameters"] = tools[i].parameters;
    w.text(python_json(schema, floats_of(format)));
  }
  w.prose(prose.tools_after);
}

// The tools' instructions and schemas are shown (tool_choice none hides them).
bool tools_shown(const ChatConversation& c) { return !c.tools.empty() && c.tool_choice != "none"; }

// What the system area gains after its text: the tools' instructions and schemas, then the response format's.
bool has_system_extras(const ChatConversation& c) {
  return tools_shown(c) || c.response_format == "json_object" ||
         c.response_format == "json_schema";
}

void write_system_extras(PromptWriter& w, ChatFormat format, const ChatProse::Format& prose, const ChatConversation& c) {
  if (tools_shown(c)) write_tools(w, format, prose, c.tools);
  if (c.response_format == "json_object") w.text(prose.response_json_object);
  if (c.response_format == "json_schema")
    w.text(prose.response_schema_before + python_json(c.response_schema, floats_of(format)));
}

// The messages after V4 hoists its system texts: a run of user messages and tool results is one user turn.
struct Turn {
  ChatMessage::Role role;
  std::string text;              // a user turn's joined texts, a system turn's text
  const ChatMessage* assistant;  // an assistant turn's message
};

// A run of user messages and tool results becomes one user turn. V4.1 joins all their texts by blank lines. V4
// starts a new turn at a tool result that follows a user message, so a V4 turn is tool results (joined by blank
// lines) and then user messages (their non-empty texts joined), a blank line between the two parts wherever
// user messages follow the results.
std::vector<Turn> turns_of(ChatFormat format, const std::vector<const ChatMessage*>& messages) {
  std::vector<Turn> turns;
  std::vector<std::string> results, users;  // V4.1: every text in `users`, in order
  bool open = false;
  auto close_users = [&] {
    if (!open) return;
    std::string text;
    if (format == ChatFormat::kV41) {
      for (size_t i = 0; i < users.size(); ++i) text += (i == 0 ? "" : "\n\n") + users[i];
    } else {
      for (size_t i = 0; i < results.size(); ++i) text += (i == 0 ? "" : "\n\n") + results[i];
      if (!results.empty() && !users.empty()) text += "\n\n";
      text += join_nonempty(users);
    }
    turns.push_back({ChatMessage::Role::kUser, std::move(text), nullptr});
    results.clear();
    users.clear();
    open = false;
  };
  for (const ChatMessage* m : messages) {
    if (m->role == ChatMessage::Role::kTool) {
      std::string result = "<tool_result>" + m->content + "</tool_result>";
      if (format == ChatFormat::kV41) {
        users.push_back(std::move(result));
      } else {
        if (!users.empty()) close_users();  // V4: results after a user message: a new turn
        results.push_back(std::move(result));
      }
      open = true;
      continue;
    }
    if (m->role == ChatMessage::Role::kUser) {
      users.push_back(m->content);
      open = true;
      continue;
    }
    close_users();
    // V4.1 shows the first of consecutive latest_reminder messages only.
    if (format == ChatFormat::kV41 && m->role == ChatMessage::Role::kReminder && !turns.empty() &&
        turns.back().role == ChatMessage::Role::kReminder)
      continue;
    const bool has_text = m->role == ChatMessage::Role::kSystem || m->role == ChatMessage::Role::kReminder;
    turns.push_back({m->role, has_text ? m->content : std::string(), m});
  }
  close_users();
  return turns;
}

struct AssistantStyle {
  ChatFormat format;
  bool thinking;
  bool keep_reasoning;  // earlier turns keep their reasoning (a conversation with tools)
};

void write_assistant(PromptWriter& w, const AssistantStyle& style, const ChatMessage& m, bool last, bool first) {
  w.special(kAssistant);
  const bool continued = m.prefix && last;
  // The continued message's reasoning is written in thinking mode (V4.1: unless the message opens the conversation).
  if (continued && style.thinking && m.reasoning && !(style.format == ChatFormat::kV41 && first)) {
    w.special(kThinkStart);
    w.assistant_text(*m.reasoning);
    if (m.content.empty() && m.tool_calls.empty()) return;  // the reasoning is what continues
  } else if (!continued && style.keep_reasoning && m.reasoning) {
    w.special(kThinkStart);
    w.assistant_text(*m.reasoning);
  }
  w.special(kThinkEnd);  // without tools, earlier turns' reasoning is dropped
  w.assistant_text(m.content);
  if (!m.tool_calls.empty()) write_tool_calls(w, style.format, m.tool_calls);
  // V4.1 leaves a prefix message open wherever it stands; V4 only the last one.
  if (!continued && !(style.format == ChatFormat::kV41 && m.prefix)) w.special(kEos);
}

}  // namespace

ChatProse ChatProse::load(const std::filesystem::path& chat_prose_json) {
  const std::string source = chat_prose_json.string();
  const std::string text = read_text_file(chat_prose_json, "chat prose (launch/chat_prose.py writes it)");
  check_json_file_depth(text, source);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {  // (its text names the byte where the JSON breaks)
    throw InputError(fmt::format("{}: not valid JSON (damaged, or cut short? launch/chat_prose.py writes it): {}",
                                 source, e.what()));
  }
  DI_INPUT_CHECK(j.is_object(), "{}: not a JSON object", source);
  ChatProse prose;
  for (auto [key, format] : {std::pair{"v4", &prose.v4}, std::pair{"v41", &prose.v41}}) {
    DI_INPUT_CHECK(j.contains(key) && j[key].is_object(), "{}: '{}' is missing or not an object", source, key);
    const nlohmann::json& section = j[key];
    for (const char* part : {"effort", "response", "tools"})
      DI_INPUT_CHECK(section.contains(part) && section[part].is_object(), "{}: {}.{} is missing or not an object",
                     source, key, part);
    const nlohmann::json effort = section.value("effort", nlohmann::json());
    for (const char* e : {"low", "high", "xhigh", "max", "default"}) {
      DI_INPUT_CHECK(effort.is_object() && effort.contains(e) && effort[e].is_string(),
                     "{}: {}.effort.{} is missing or not a string", source, key, e);
      format->effort[e] = effort[e].get<std::string>();
    }
    const nlohmann::json response = section.value("response", nlohmann::json());
    for (auto [part, field] : {std::pair{"schema_before", &format->response_schema_before},
                               std::pair{"json_object", &format->response_json_object}}) {
      DI_INPUT_CHECK(response.is_object() && response.contains(part) && response[part].is_string(),
                     "{}: {}.response.{} is missing or not a string", source, key, part);
      *field = response[part].get<std::string>();
    }
    const nlohmann::json tools = section.value("tools", nlohmann::json());
    for (auto [part, segments] : {std::pair{"before", &format->tools_before}, std::pair{"after", &format->tools_after}}) {
      DI_INPUT_CHECK(tools.is_object() && tools.contains(part) && tools[part].is_array(),
                     "{}: {}.tools.{} is missing or not a list", source, key, part);
      for (size_t i = 0; i < tools[part].size(); ++i) {
        const nlohmann::json& segment = tools[part][i];
        const bool special = segment.contains("special");
        DI_INPUT_CHECK(segment.is_object() && (special || segment.contains("text")) &&
                           segment[special ? "special" : "text"].is_string(),
                       "{}: {}.tools.{}[{}]: a segment is {{\"text\": string}} or {{\"special\": string}}", source,
                       key, part, i);
        segments->push_back({segment[special ? "special" : "text"].get<std::string>(), special});
      }
    }
  }
  return prose;
}

RenderedChat render_chat(ChatFormat format, const ChatProse& prose, const ChatConversation& c,
                         const std::string& what) {
  const ChatMessage* last = c.messages.empty() ? nullptr : &c.messages.back();
  for (size_t i = 0; i < c.messages.size(); ++i)
    DI_INPUT_CHECK(!c.messages[i].prefix || c.messages[i].role == ChatMessage::Role::kAssistant,
                   "{}: messages[{}]: only an assistant message can be a prefix", what, i);
  DI_INPUT_CHECK(c.tool_choice == "auto" || c.tool_choice == "none" || c.tool_choice == "required",
                 "{}: tool_choice '{}' is none of auto, none, required", what, c.tool_choice);
  const ChatProse::Format& text = format == ChatFormat::kV4 ? prose.v4 : prose.v41;
  const bool tools = tools_shown(c);
  PromptWriter w;
  w.special(kBos);
  std::vector<const ChatMessage*> conversation;
  if (format == ChatFormat::kV4) {
    std::vector<std::string> system;
    for (const ChatMessage& m : c.messages)
      if (m.role == ChatMessage::Role::kSystem) system.push_back(m.content);
      else conversation.push_back(&m);
    w.text((c.thinking ? effort_text(text.effort, c.reasoning_effort, what) : std::string()) + join_nonempty(system));
    write_system_extras(w, format, text, c);
  } else {
    for (const ChatMessage& m : c.messages) conversation.push_back(&m);
  }
  // V4.1 opens a system block for the effort instruction (thinking mode, where there is any message) and the
  // tools; a first system message's text continues it, before the tools.
  const bool first_is_system = last != nullptr && c.messages.front().role == ChatMessage::Role::kSystem;
  bool system_open = false, extras_pending = false;
  if (format == ChatFormat::kV41 && ((c.thinking && !c.messages.empty()) || has_system_extras(c))) {
    w.special(kSystem);
    if (c.thinking && !c.messages.empty()) w.text(effort_text(text.effort, c.reasoning_effort, what));
    system_open = true;
    extras_pending = has_system_extras(c);
    if (extras_pending && !first_is_system) {
      write_system_extras(w, format, text, c);
      extras_pending = false;
    }
  }
  const AssistantStyle style{format, c.thinking, tools && (format == ChatFormat::kV4 || c.thinking)};
  for (const Turn& turn : turns_of(format, conversation)) {
    switch (turn.role) {
      case ChatMessage::Role::kUser:
      case ChatMessage::Role::kTool:
        w.special(kUser);
        w.text(turn.text);
        break;
      case ChatMessage::Role::kSystem:  // V4.1 only: V4's moved to the top
        if (!system_open) w.special(kSystem);
        w.text(turn.text);
        if (extras_pending) write_system_extras(w, format, text, c);
        extras_pending = false;
        break;
      case ChatMessage::Role::kReminder:
        w.special(kReminder);
        w.text(turn.text);
        break;
      case ChatMessage::Role::kAssistant:
        // "first": the conversation's first message (V4: once its system messages have moved to the top; V4.1: the
        // response format's or the tools' system text counts as a message before it).
        write_assistant(w, style, *turn.assistant, turn.assistant == last,
                        turn.assistant == conversation.front() && !(format == ChatFormat::kV41 && has_system_extras(c)));
        break;
    }
    system_open = false;
  }
  if (last == nullptr || !(last->role == ChatMessage::Role::kAssistant && last->prefix)) {
    w.special(kAssistant);
    w.special(c.thinking ? kThinkStart : kThinkEnd);
    if (tools && c.tool_choice == "required") {  // the answer starts inside a tool-call block
      const Dsml d = dsml_of(format);
      w.text("\n\n<");
      w.special(kDsml);
      w.text(std::string(d.calls) + ">\n");
    }
  }
  return w.take();
}

void check_chat_tokens(ChatFormat format, const ChatProse& prose, const std::string& prose_source,
                       const BpeTokenizer& tokenizer, const std::string& tokenizer_source) {
  const bool v41 = format == ChatFormat::kV41;
  std::vector<const char*> own = {kBos, kEos, kUser, kAssistant, kThinkStart, kThinkEnd};
  if (v41) own.insert(own.end(), {kSystem, kReminder});
  for (const char* token : own)
    DI_INPUT_CHECK(tokenizer.token_to_id(token) >= 0, "{}: has no token {}, which a DeepSeek-{} chat prompt holds: "
                   "pass the model's own tokenizer.json", tokenizer_source, token, v41 ? "V4.1" : "V4");
  const ChatProse::Format& f = v41 ? prose.v41 : prose.v4;
  for (auto [part, segments] : {std::pair{"before", &f.tools_before}, std::pair{"after", &f.tools_after}})
    for (size_t i = 0; i < segments->size(); ++i)
      DI_INPUT_CHECK(!(*segments)[i].special || tokenizer.token_to_id((*segments)[i].text) >= 0,
                     "{}: {}.tools.{}[{}] is the special token {}, which {} does not have (is the file damaged? "
                     "launch/chat_prose.py writes it)", prose_source, v41 ? "v41" : "v4", part, i,
                     (*segments)[i].text, tokenizer_source);
}

std::vector<int32_t> encode_chat(const BpeTokenizer& tokenizer, const RenderedChat& prompt) {
  tokenizer.check_text_length(prompt.text);  // the whole prompt first (each piece below is checked on its own too)
  std::vector<int32_t> ids;
  size_t at = 0;
  auto plain = [&](size_t end) {
    if (end > at) {
      const std::vector<int32_t> text = tokenizer.encode_plain(std::string_view(prompt.text).substr(at, end - at));
      ids.insert(ids.end(), text.begin(), text.end());
    }
  };
  for (const auto& [start, end] : prompt.special_ranges) {
    plain(start);
    const std::string token = prompt.text.substr(start, end - start);
    const int32_t id = tokenizer.token_to_id(token);
    DI_INPUT_CHECK(id >= 0, "the tokenizer has no special token {} that this chat prompt holds (a chat model's own "
                   "tokenizer.json has it)", token);
    ids.push_back(id);
    at = end;
  }
  plain(prompt.text.size());
  return ids;
}

}  // namespace deepinfer::text
