#include "src/text/chat_request.h"

#include "src/core/check.h"

namespace deepinfer::text {

namespace {

// A message's content: a string, or text parts joined by blank lines.
std::string content_of(const nlohmann::json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  DI_INPUT_CHECK(content.is_array(), "{}: content should be a string or a list of text parts", field);
  std::string joined;
  for (size_t i = 0; i < content.size(); ++i) {
    const nlohmann::json& part = content[i];
    const std::string at = fmt::format("{}[{}]", field, i);
    DI_INPUT_CHECK(part.is_object() && part.contains("type"), "{}: a content part needs a 'type'", at);
    DI_INPUT_CHECK(part["type"] == "text", "{}: content parts of type {} are not supported (text is)", at,
                   part["type"].dump());
    DI_INPUT_CHECK(part.contains("text") && part["text"].is_string(), "{}: a text part needs a string 'text'", at);
    if (i > 0) joined += "\n\n";
    joined += part["text"].get<std::string>();
  }
  return joined;
}

bool present(const nlohmann::json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

}  // namespace

ChatConversation parse_chat_request(const nlohmann::json& body, const std::string& what) {
  DI_INPUT_CHECK(body.is_object(), "{}: a chat request is a JSON object", what);
  DI_INPUT_CHECK(body.contains("messages"), "{}: a chat request needs 'messages'", what);
  const nlohmann::json& messages = body["messages"];
  DI_INPUT_CHECK(messages.is_array(), "{}: 'messages' should be a list", what);
  DI_INPUT_CHECK(!messages.empty(), "{}: 'messages' is empty", what);
  DI_INPUT_CHECK(!present(body, "tools") || body["tools"].empty(), "{}: 'tools' are not supported yet", what);
  DI_INPUT_CHECK(!present(body, "response_format") ||
                     (body["response_format"].is_object() && body["response_format"].value("type", "") == "text"),
                 "{}: response formats other than text are not supported yet", what);
  ChatConversation c;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    const std::string field = fmt::format("{}: messages[{}]", what, i);
    DI_INPUT_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(), "{}: a message needs a 'role'",
                   field);
    const std::string role = m["role"].get<std::string>();
    ChatMessage message;
    if (role == "system") {
      message.role = ChatMessage::Role::kSystem;
    } else if (role == "user") {
      message.role = ChatMessage::Role::kUser;
    } else if (role == "assistant") {
      message.role = ChatMessage::Role::kAssistant;
      DI_INPUT_CHECK(!present(m, "tool_calls"), "{}: tool calls are not supported yet", field);
    } else {
      DI_INPUT_CHECK(role != "tool" && role != "latest_reminder", "{}: {} messages are not supported yet", field, role);
      throw InputError(fmt::format("{}: unknown role '{}' (system, user, assistant, tool or latest_reminder)", field,
                                   role));
    }
    if (message.role == ChatMessage::Role::kAssistant) {
      DI_INPUT_CHECK(present(m, "content"), "{}: an assistant message needs its content", field);
      if (present(m, "reasoning_content")) {
        DI_INPUT_CHECK(m["reasoning_content"].is_string(), "{}.reasoning_content should be a string", field);
        message.reasoning = m["reasoning_content"].get<std::string>();
      }
      if (m.contains("prefix")) {
        DI_INPUT_CHECK(m["prefix"].is_boolean(), "{}.prefix should be true or false", field);
        message.prefix = m["prefix"].get<bool>();
        DI_INPUT_CHECK(!message.prefix || i + 1 == messages.size(),
                       "{}: prefix is set on an assistant message that is not the last", field);
      }
    }
    DI_INPUT_CHECK(m.contains("content"), "{}: a message needs 'content'", field);
    message.content = content_of(m["content"], field + ".content");
    // As the API converts them: an empty system message is left out; an assistant's reasoning is empty, not absent.
    if (message.role == ChatMessage::Role::kSystem && message.content.empty()) continue;
    if (message.role == ChatMessage::Role::kAssistant && !message.reasoning) message.reasoning = "";
    c.messages.push_back(std::move(message));
  }
  const bool thinking_given = present(body, "thinking");
  if (thinking_given) {
    const nlohmann::json& thinking = body["thinking"];
    DI_INPUT_CHECK(thinking.is_object() && thinking.contains("type") && thinking["type"].is_string(),
                   "{}: 'thinking' should be {{\"type\": \"enabled\" | \"adaptive\" | \"disabled\"}}", what);
    const std::string type = thinking["type"].get<std::string>();
    DI_INPUT_CHECK(type == "enabled" || type == "adaptive" || type == "disabled",
                   "{}: thinking.type '{}' is none of enabled, adaptive, disabled", what, type);
    c.thinking = type != "disabled";
  }
  std::string effort = "high";  // the API's default
  if (present(body, "reasoning_effort")) {
    DI_INPUT_CHECK(body["reasoning_effort"].is_string(), "{}: 'reasoning_effort' should be a string", what);
    const std::string e = body["reasoning_effort"].get<std::string>();
    if (e == "none") c.thinking = c.thinking && thinking_given;  // "none" decides only where thinking is not given
    else if (e == "minimal" || e == "low") effort = "low";
    else if (e == "medium" || e == "high") effort = "high";
    else if (e == "xhigh") effort = "xhigh";
    else if (e == "ultra" || e == "max") effort = "max";
    else
      throw InputError(fmt::format("{}: reasoning_effort '{}' is none of none, minimal, low, medium, high, xhigh, "
                                   "ultra, max", what, e));
  }
  c.reasoning_effort = c.thinking ? effort : std::string();
  return c;
}

}  // namespace deepinfer::text
