#include "src/text/chat_request.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <set>

#include "src/core/check.h"
#include "src/core/json_depth.h"
#include "src/text/api_schema_rules.h"

namespace deepinfer::text {

namespace {

using Json = nlohmann::ordered_json;

// A message's content: a string, or text parts joined by blank lines.
std::string content_of(const Json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  DI_INPUT_CHECK(content.is_array(), "{}: content should be a string or a list of text parts", field);
  std::string joined;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
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

bool present(const Json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

// What the API checks of the tools it offers (none of it under tool_choice none, which offers none): unique names,
// and each `parameters` a JSON Schema of type object that keeps the API's schema rules (api_schema_rules.h); a
// strict tool's parameters are rewritten as the API shows them.
void check_tools(std::vector<ChatTool>& tools, const std::string& what) {
  for (size_t i = 0; i < tools.size(); ++i) {
    ChatTool& t = tools[i];
    const std::string field = fmt::format("{}: tools[{}]", what, i);
    for (size_t k = 0; k < i; ++k)
      DI_INPUT_CHECK(tools[k].name != t.name, "{}.function.name '{}' is an earlier tool's too: tool names must be "
                     "unique", field, t.name);
    if (!t.has_parameters) {
      if (t.strict) t.parameters = strict_tool_form(Json{{"type", "object"}});  // as the API shows it
      continue;
    }
    // It describes the arguments, which are an object (deepseek-recipe refuses any other schema).
    DI_INPUT_CHECK(t.parameters.is_object() && t.parameters.contains("type") && t.parameters["type"] == "object",
                   "{}.function.parameters must be a JSON Schema of type \"object\" (a function's arguments are an "
                   "object), not {}", field, t.parameters.dump().substr(0, 80));
    check_api_schema(t.parameters, t.strict ? SchemaUse::kStrictToolParameters : SchemaUse::kSchema,
                     field + ".function.parameters");
    if (t.strict) t.parameters = strict_tool_form(t.parameters);  // as the API shows it
  }
}

}  // namespace

ChatConversation parse_chat_request(const nlohmann::ordered_json& body, const std::string& what) {
  DI_INPUT_CHECK(body.is_object(), "{}: a chat request is a JSON object", what);
  DI_INPUT_CHECK(body.contains("messages"), "{}: a chat request needs 'messages'", what);
  const Json& messages = body["messages"];
  DI_INPUT_CHECK(messages.is_array(), "{}: 'messages' should be a list", what);
  DI_INPUT_CHECK(!messages.empty(), "{}: 'messages' is empty", what);
  ChatConversation c;
  if (present(body, "tools")) {
    DI_INPUT_CHECK(body["tools"].is_array(), "{}: 'tools' should be a list", what);
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const Json& tool = body["tools"][i];
      const std::string field = fmt::format("{}: tools[{}]", what, i);
      DI_INPUT_CHECK(tool.is_object() && tool.value("type", "") == "function" && tool.contains("function") &&
                         tool["function"].is_object(),
                     "{}: a tool is {{\"type\": \"function\", \"function\": {{...}}}}", field);
      const Json& f = tool["function"];
      DI_INPUT_CHECK(f.contains("name") && f["name"].is_string(), "{}.function needs a string 'name'", field);
      DI_INPUT_CHECK(!present(f, "description") || f["description"].is_string(),
                     "{}.function.description should be a string", field);
      ChatTool t;
      t.name = f["name"].get<std::string>();
      DI_INPUT_CHECK(!t.name.empty() && std::all_of(t.name.begin(), t.name.end(), [](char ch) {
                       return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
                     }), "{}.function.name '{}' is not of the letters, digits, _ and - a tool name allows", field, t.name);
      if (present(f, "description")) t.description = f["description"].get<std::string>();
      // The schema as written, key order kept (the prompt shows it so); none is an empty object, as the API has it.
      t.parameters = present(f, "parameters") ? f["parameters"] : Json::object();
      DI_INPUT_CHECK(!present(f, "strict") || f["strict"].is_boolean(), "{}.function.strict should be true or false",
                     field);
      t.strict = present(f, "strict") && f["strict"].get<bool>();
      t.has_parameters = present(f, "parameters");
      c.tools.push_back(std::move(t));
    }
  }
  if (present(body, "tool_choice")) {
    const Json& choice = body["tool_choice"];
    if (choice.is_object()) {  // one function: that tool alone, and a call of it required (as the API has it)
      DI_INPUT_CHECK(choice.value("type", "") == "function" && choice.contains("function") &&
                         choice["function"].is_object() && choice["function"].contains("name") &&
                         choice["function"]["name"].is_string(),
                     "{}: tool_choice is none, auto, required or {{\"type\": \"function\", \"function\": "
                     "{{\"name\"}}}}", what);
      const std::string name = choice["function"]["name"].get<std::string>();
      check_tools(c.tools, what);
      std::erase_if(c.tools, [&](const ChatTool& t) { return t.name != name; });
      DI_INPUT_CHECK(!c.tools.empty(), "{}: tool_choice names '{}', which is none of the tools", what, name);
      c.tool_choice = "required";
    } else {
      DI_INPUT_CHECK(choice.is_string(), "{}: tool_choice is none, auto, required or a function", what);
      c.tool_choice = choice.get<std::string>();
      DI_INPUT_CHECK(c.tool_choice == "auto" || c.tool_choice == "none" || c.tool_choice == "required",
                     "{}: tool_choice '{}' is none of auto, none, required", what, c.tool_choice);
    }
  }
  if (c.tool_choice != "none") {  // the tools offered (tool_choice none offers none)
    const bool chose_function = present(body, "tool_choice") && body["tool_choice"].is_object();
    if (!chose_function) check_tools(c.tools, what);  // (a function's choice checked them all before choosing)
    DI_INPUT_CHECK(std::all_of(c.tools.begin(), c.tools.end(), [&](const ChatTool& t) { return t.strict == c.tools[0].strict; }),
                   "{}: strict and non-strict tools cannot be used in the same request (set 'strict' alike on every "
                   "tool)", what);
    // Strict tools constrain the output themselves: no response format beside them (not even "text").
    DI_INPUT_CHECK(c.tools.empty() || !c.tools[0].strict || !present(body, "response_format"),
                   "{}: response_format cannot be used with strict tools", what);
  }
  if (present(body, "response_format")) {
    const Json& rf = body["response_format"];
    DI_INPUT_CHECK(rf.is_object() && rf.contains("type") && rf["type"].is_string(),
                   "{}: 'response_format' should be {{\"type\": ...}}", what);
    c.response_format = rf["type"].get<std::string>();
    DI_INPUT_CHECK(c.response_format == "text" || c.response_format == "json_object" ||
                       c.response_format == "json_schema" || c.response_format == "regex",
                   "{}: response_format type '{}' is none of text, json_object, json_schema, regex", what,
                   c.response_format);
    if (c.response_format == "json_schema") {
      DI_INPUT_CHECK(rf.contains("json_schema") && rf["json_schema"].is_object() && rf["json_schema"].contains("schema"),
                     "{}: response_format json_schema needs json_schema.schema", what);
      const Json& spec = rf["json_schema"];
      DI_INPUT_CHECK(!present(spec, "strict") || spec["strict"].is_boolean(),
                     "{}: response_format json_schema.strict should be true or false", what);
      const bool strict = present(spec, "strict") && spec["strict"].get<bool>();
      c.response_schema = spec["schema"];
      check_api_schema(c.response_schema, strict ? SchemaUse::kStrictResponse : SchemaUse::kSchema,
                       what + ": response_format json_schema.schema");
    }
    if (c.response_format == "regex")
      DI_INPUT_CHECK(rf.contains("regex") && rf["regex"].is_string(), "{}: response_format regex needs 'regex'", what);
  }
  size_t answered_until = 0;  // messages before this one are the answers to an assistant's tool calls
  // Where the answers to the latest tool calls start in c.messages, and the calls' ids in order: the answers are
  // put in the calls' order, as the API does.
  std::pair<size_t, std::vector<std::string>> answers;
  std::vector<std::string> answer_ids;  // the tool_call_id of each message in c.messages (tool messages)
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    std::vector<std::string> call_ids;
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
      if (present(m, "tool_calls")) {
        DI_INPUT_CHECK(m["tool_calls"].is_array(), "{}.tool_calls should be a list", field);
        DI_INPUT_CHECK(!m["tool_calls"].empty(), "{}.tool_calls is an empty list: give at least one call, or leave "
                       "it out", field);
        for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
          const Json& call = m["tool_calls"][k];
          const std::string at = fmt::format("{}.tool_calls[{}]", field, k);
          DI_INPUT_CHECK(call.is_object() && call.contains("function") && call["function"].is_object() &&
                             call["function"].contains("name") && call["function"]["name"].is_string() &&
                             call["function"].contains("arguments") && call["function"]["arguments"].is_string(),
                         "{}: a tool call is {{\"function\": {{\"name\", \"arguments\"}}}} (arguments a JSON "
                         "string)", at);
          const std::string text = call["function"]["arguments"].get<std::string>();
          check_json_depth(text, at + ".function.arguments");
          nlohmann::ordered_json arguments = nlohmann::ordered_json::parse(text, nullptr, false);
          // Arguments that are not a JSON object's text (a list, a string, broken JSON) are shown as they are, as one
          // string parameter named "arguments" (the API's rendering).
          if (arguments.is_discarded() || !arguments.is_object()) arguments = Json{{"arguments", text}};
          DI_INPUT_CHECK(call.contains("id") && call["id"].is_string(), "{}: a tool call needs its 'id' (a string: the "
                         "tool message that answers it names it)", at);
          message.tool_calls.push_back({call["function"]["name"].get<std::string>(), std::move(arguments)});
          call_ids.push_back(call.value("id", ""));
        }
        // As the API requires: a result for each call, in the messages right after it.
        std::multiset<std::string> pending(call_ids.begin(), call_ids.end());
        size_t next = i + 1;
        for (; next < messages.size() && next < i + 1 + call_ids.size(); ++next) {
          const Json& reply = messages[next];
          if (!reply.is_object() || reply.value("role", "") != "tool") break;
          const auto found = pending.find(reply.value("tool_call_id", ""));
          DI_INPUT_CHECK(found != pending.end(), "{}: messages[{}] answers no tool call of messages[{}]", what, next,
                         i);
          pending.erase(found);
        }
        DI_INPUT_CHECK(pending.empty(), "{}: the tool calls of messages[{}] need a tool message each right after it",
                       what, i);
        answered_until = next;
        answers = {c.messages.size() + 1, std::move(call_ids)};
      }
    } else if (role == "tool") {
      message.role = ChatMessage::Role::kTool;
      DI_INPUT_CHECK(i < answered_until, "{}: a tool message answers the tool calls of the assistant message before it",
                     field);
    } else if (role == "latest_reminder") {
      message.role = ChatMessage::Role::kReminder;
      DI_INPUT_CHECK(m.contains("content") && m["content"].is_string(), "{}: a latest_reminder's content is a string",
                     field);
    } else {
      throw InputError(fmt::format("{}: unknown role '{}' (system, user, assistant, tool or latest_reminder)", field,
                                   role));
    }
    if (message.role == ChatMessage::Role::kAssistant) {
      DI_INPUT_CHECK(present(m, "content") || !message.tool_calls.empty(),
                     "{}: an assistant message needs its content or tool calls", field);
      if (present(m, "reasoning_content")) {
        DI_INPUT_CHECK(m["reasoning_content"].is_string(), "{}.reasoning_content should be a string", field);
        message.reasoning = m["reasoning_content"].get<std::string>();
      }
      if (m.contains("prefix")) {
        DI_INPUT_CHECK(m["prefix"].is_boolean(), "{}.prefix should be true or false", field);
        message.prefix = m["prefix"].get<bool>();
        DI_INPUT_CHECK(!message.prefix || i + 1 == messages.size(),
                       "{}: prefix is set on an assistant message that is not the last", field);
        DI_INPUT_CHECK(!message.prefix || c.tools.empty(), "{}: a prefix message cannot be used with tools", field);
      }
    }
    DI_INPUT_CHECK(m.contains("content") || !message.tool_calls.empty(), "{}: a message needs 'content'", field);
    if (present(m, "content") || message.role != ChatMessage::Role::kAssistant)
      message.content = content_of(m["content"], field + ".content");
    // As the API converts them: an empty system message is left out.
    if (message.role == ChatMessage::Role::kSystem && message.content.empty()) continue;
    answer_ids.push_back(message.role == ChatMessage::Role::kTool ? m.value("tool_call_id", "") : std::string());
    c.messages.push_back(std::move(message));
    if (i + 1 == answered_until) {  // the last answer: order them as the calls
      const auto& [first, ids] = answers;
      std::vector<size_t> order(c.messages.size() - first);
      std::iota(order.begin(), order.end(), first);
      const auto rank = [&](size_t k) { return std::find(ids.begin(), ids.end(), answer_ids[k]) - ids.begin(); };
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
      std::vector<ChatMessage> sorted;
      for (size_t k : order) sorted.push_back(c.messages[k]);
      std::move(sorted.begin(), sorted.end(), c.messages.begin() + static_cast<std::ptrdiff_t>(first));
    }
  }
  const bool thinking_given = present(body, "thinking");
  if (thinking_given) {
    const Json& thinking = body["thinking"];
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
  // As the API converts them: in thinking mode an assistant's reasoning is "" where not given; outside it, none.
  for (ChatMessage& m : c.messages)
    if (m.role == ChatMessage::Role::kAssistant) m.reasoning = c.thinking ? m.reasoning.value_or("") : std::optional<std::string>();
  if (c.response_format == "json_object") {  // as the API requires
    bool says_json = false;
    for (const ChatMessage& m : c.messages) {
      std::string lower = m.content;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      says_json |= lower.find("json") != std::string::npos;
    }
    DI_INPUT_CHECK(says_json, "{}: a json_object response format needs the word 'json' in the messages", what);
    DI_INPUT_CHECK(c.messages.empty() || !c.messages.back().prefix,
                   "{}: a json_object response format cannot continue a prefix message", what);
  }
  if (c.tools.empty()) c.tool_choice = "auto";  // nothing to require (the API's reading)
  DI_INPUT_CHECK(!(c.thinking && c.tool_choice == "required"),
                 "{}: tool_choice 'required' is not supported in thinking mode", what);
  return c;
}

}  // namespace deepinfer::text
