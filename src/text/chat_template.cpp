#include "src/text/chat_template.h"

#include <nlohmann/json.hpp>

#include "src/core/check.h"
#include "src/core/files.h"

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

// A prompt being written: text, and special tokens whose byte ranges are recorded.
class PromptWriter {
 public:
  void text(const std::string& s) { out_.text += s; }
  void special(const char* token) {
    const size_t start = out_.text.size();
    out_.text += token;
    out_.special_ranges.emplace_back(start, out_.text.size());
  }
  RenderedChat take() { return std::move(out_); }

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

// The messages after V4 hoists its system texts: runs of user messages become one turn.
struct Turn {
  ChatMessage::Role role;
  std::string text;              // a user turn's joined texts
  const ChatMessage* assistant;  // an assistant turn's message
};

// V4 joins a run of user messages' non-empty texts by blank lines; V4.1 joins all of them.
std::vector<Turn> turns_of(ChatFormat format, const std::vector<const ChatMessage*>& messages) {
  std::vector<Turn> turns;
  bool user_open = false;
  std::string users;  // the open user turn's text
  auto close_users = [&] {
    if (!user_open) return;
    turns.push_back({ChatMessage::Role::kUser, users, nullptr});
    user_open = false;
    users.clear();
  };
  for (const ChatMessage* m : messages) {
    if (m->role == ChatMessage::Role::kUser) {
      const bool join = format == ChatFormat::kV41 ? user_open : !users.empty() && !m->content.empty();
      if (join) users += "\n\n";
      users += m->content;
      user_open = true;
      continue;
    }
    close_users();
    turns.push_back({m->role, m->role == ChatMessage::Role::kSystem ? m->content : std::string(), m});
  }
  close_users();
  return turns;
}

void write_assistant(PromptWriter& w, ChatFormat format, const ChatMessage& m, bool last, bool first,
                     bool thinking) {
  w.special(kAssistant);
  const bool continued = m.prefix && last;
  // The continued message's reasoning is written in thinking mode (V4.1: unless the message opens the conversation).
  if (continued && thinking && m.reasoning && !(format == ChatFormat::kV41 && first)) {
    w.special(kThinkStart);
    w.text(*m.reasoning);
    if (m.content.empty()) return;  // the reasoning is what continues
  }
  w.special(kThinkEnd);  // earlier turns' reasoning is dropped
  w.text(m.content);
  // V4.1 leaves a prefix message open wherever it stands; V4 only the last one.
  if (!continued && !(format == ChatFormat::kV41 && m.prefix)) w.special(kEos);
}

}  // namespace

ChatProse ChatProse::load(const std::filesystem::path& chat_prose_json) {
  const std::string source = chat_prose_json.string();
  const nlohmann::json j =
      nlohmann::json::parse(read_text_file(chat_prose_json, "chat prose (launch/chat_prose.py writes it)"), nullptr,
                            false);
  DI_INPUT_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", source);
  ChatProse prose;
  for (auto [key, efforts] : {std::pair{"v4", &prose.v4_effort}, std::pair{"v41", &prose.v41_effort}}) {
    const nlohmann::json section = j.value(key, nlohmann::json()).value("effort", nlohmann::json());
    for (const char* effort : {"low", "high", "xhigh", "max", "default"}) {
      DI_INPUT_CHECK(section.is_object() && section.contains(effort) && section[effort].is_string(),
                     "{}: {}.effort.{} is missing or not a string", source, key, effort);
      (*efforts)[effort] = section[effort].get<std::string>();
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
  PromptWriter w;
  w.special(kBos);
  std::vector<const ChatMessage*> conversation;
  if (format == ChatFormat::kV4) {
    std::vector<std::string> system;
    for (const ChatMessage& m : c.messages)
      if (m.role == ChatMessage::Role::kSystem) system.push_back(m.content);
      else conversation.push_back(&m);
    w.text((c.thinking ? effort_text(prose.v4_effort, c.reasoning_effort, what) : std::string()) +
           join_nonempty(system));
  } else {
    for (const ChatMessage& m : c.messages) conversation.push_back(&m);
  }
  // V4.1 in thinking mode opens a system block with the effort instruction (where there is any message); a first
  // system message continues it.
  bool system_open = false;
  if (format == ChatFormat::kV41 && c.thinking && !c.messages.empty()) {
    w.special(kSystem);
    w.text(effort_text(prose.v41_effort, c.reasoning_effort, what));
    system_open = true;
  }
  for (const Turn& turn : turns_of(format, conversation)) {
    switch (turn.role) {
      case ChatMessage::Role::kUser:
        w.special(kUser);
        w.text(turn.text);
        break;
      case ChatMessage::Role::kSystem:  // V4.1 only: V4's moved to the top
        if (!system_open) w.special(kSystem);
        w.text(turn.text);
        break;
      case ChatMessage::Role::kAssistant:
        write_assistant(w, format, *turn.assistant, turn.assistant == last, turn.assistant == &c.messages.front(),
                        c.thinking);
        break;
    }
    system_open = false;
  }
  if (last == nullptr || !(last->role == ChatMessage::Role::kAssistant && last->prefix)) {
    w.special(kAssistant);
    w.special(c.thinking ? kThinkStart : kThinkEnd);
  }
  return w.take();
}

std::vector<int32_t> encode_chat(const BpeTokenizer& tokenizer, const RenderedChat& prompt) {
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
    DI_INPUT_CHECK(id >= 0, "the tokenizer has no token {} (a DeepSeek-V4.1 prompt needs its <｜System｜> token)",
                   token);
    ids.push_back(id);
    at = end;
  }
  plain(prompt.text.size());
  return ids;
}

}  // namespace deepinfer::text
