#include "src/app/openai_batch.h"

#include <fmt/format.h>

#include <limits>
#include <set>

#include "src/app/result_log.h"
#include "src/core/check.h"

namespace deepinfer::app {

namespace {

// Body keys the API defines that change nothing at their default value; any other value asks for what this engine
// does not do, and is refused by name rather than ignored.
bool at_default(const nlohmann::ordered_json& value, const std::string& key) {
  if (value.is_null()) return true;
  if (key == "n" || key == "best_of") return value.is_number_integer() && value.get<int64_t>() == 1;
  if (key == "stream" || key == "echo" || key == "logprobs") return value.is_boolean() && !value.get<bool>();
  if (key == "presence_penalty" || key == "frequency_penalty") return value.is_number() && value.get<double>() == 0.0;
  if (key == "top_logprobs") return value.is_number_integer() && value.get<int64_t>() == 0;
  if (key == "logit_bias" || key == "stream_options") return value.is_object() && value.empty();
  return false;
}

// Keys that only describe the request to the API's bookkeeping: dropped.
const std::set<std::string>& bookkeeping_keys() {
  static const std::set<std::string> keys = {"user", "metadata", "store", "parallel_tool_calls", "service_tier"};
  return keys;
}

const std::set<std::string>& defaulted_keys() {
  static const std::set<std::string> keys = {"n", "best_of", "stream", "echo", "logprobs", "presence_penalty",
                                             "frequency_penalty", "top_logprobs", "logit_bias", "stream_options",
                                             "suffix"};
  return keys;
}

std::string endpoint_url(BatchEndpoint endpoint) {
  return endpoint == BatchEndpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions";
}

}  // namespace

bool is_openai_batch_line(const nlohmann::json& line) {
  return line.is_object() &&
         (line.contains("custom_id") || line.contains("url") || line.contains("method") || line.contains("body"));
}

nlohmann::ordered_json openai_request_line(const nlohmann::ordered_json& line, const std::string& where,
                                           BatchLineFormat& format) {
  for (const auto& [key, value] : line.items())
    DI_INPUT_CHECK(key == "custom_id" || key == "method" || key == "url" || key == "body",
                   "{}: unknown key '{}' in an OpenAI batch line (custom_id, method, url, body)", where, key);
  DI_INPUT_CHECK(line.contains("custom_id") && line["custom_id"].is_string() &&
                     !line["custom_id"].get<std::string>().empty(),
                 "{}: an OpenAI batch line needs 'custom_id', a non-empty string", where);
  format.custom_id = line["custom_id"].get<std::string>();
  DI_INPUT_CHECK(!line.contains("method") || line["method"] == "POST", "{}: 'method' must be \"POST\"", where);
  DI_INPUT_CHECK(line.contains("url") && line["url"].is_string(),
                 "{}: an OpenAI batch line needs 'url': \"/v1/chat/completions\" or \"/v1/completions\"", where);
  const std::string url = line["url"].get<std::string>();
  if (url == "/v1/chat/completions") format.endpoint = BatchEndpoint::kChatCompletions;
  else if (url == "/v1/completions") format.endpoint = BatchEndpoint::kCompletions;
  else throw InputError(fmt::format("{}: url '{}' is neither /v1/chat/completions nor /v1/completions", where, url));
  DI_INPUT_CHECK(line.contains("body") && line["body"].is_object(), "{}: 'body' must be a JSON object", where);
  const bool chat = format.endpoint == BatchEndpoint::kChatCompletions;
  DI_INPUT_CHECK(!chat || line["body"].contains("messages"), "{}: a /v1/chat/completions body needs 'messages'", where);

  nlohmann::ordered_json request = nlohmann::ordered_json::object();
  request["id"] = format.custom_id;
  for (const auto& [key, value] : line["body"].items()) {
    const std::string what = fmt::format("{}: body.{}", where, key);
    if (key == "model") {
      format.model = nlohmann::json::parse(value.dump());
      request["model"] = value;  // checked against the served model by the request line's reader
    } else if (bookkeeping_keys().contains(key)) {
      continue;
    } else if (defaulted_keys().contains(key)) {
      DI_INPUT_CHECK(at_default(value, key), "{} = {} is not supported (this engine returns one choice, whole, "
                     "without log probabilities or penalties)", what, value.dump());
    } else if (key == "max_completion_tokens" || key == "max_tokens") {
      // A chat body's max_tokens keeps its name (the API bounds it); max_completion_tokens is the engine's own.
      DI_INPUT_CHECK(!request.contains("max_tokens") && !request.contains("max_new_tokens"),
                     "{}: give 'max_tokens' or 'max_completion_tokens', not both", where);
      request[chat && key == "max_tokens" ? "max_tokens" : "max_new_tokens"] = value;
    } else if (!chat && key == "prompt") {
      if (value.is_string()) {
        request["prompt"] = value;
      } else if (value.is_array() && value.size() == 1 && value[0].is_string()) {
        request["prompt"] = value[0];
      } else {
        DI_INPUT_CHECK(value.is_array() && !value.empty() && value[0].is_number_integer(),
                       "{} must be a string or a list of token ids (one prompt a line)", what);
        request["prompt_token_ids"] = value;
      }
    } else if (!chat && key == "stop") {
      DI_INPUT_CHECK(value.is_null() || (value.is_array() && value.empty()),
                     "{} is not supported for /v1/completions (use stop_token_ids, or a chat request's 'stop')", what);
    } else if (key == "id" || key == "prompt_token_ids" || key == "max_new_tokens" || key == "continues") {
      throw InputError(fmt::format("{} is not an OpenAI request field{}", what,
                                   key == "max_new_tokens" ? ": use max_tokens" : ""));
    } else {
      request[key] = value;  // the request line's own checks name what they refuse
    }
  }
  // OpenAI's defaults: a completion 16 tokens, a chat completion up to the model's length.
  const bool given = (request.contains("max_tokens") && !request["max_tokens"].is_null()) ||
                     (request.contains("max_new_tokens") && !request["max_new_tokens"].is_null());
  if (!given) {
    request.erase("max_tokens");
    request["max_new_tokens"] = chat ? std::numeric_limits<int64_t>::max() : int64_t{16};
  }
  DI_INPUT_CHECK(chat || request.contains("prompt") || request.contains("prompt_token_ids"),
                 "{}: a /v1/completions body needs 'prompt'", where);
  return request;
}

nlohmann::json openai_result_line(const nlohmann::json& result, const BatchLineFormat& format, int64_t ordinal,
                                  const std::string& default_model, bool with_tokenizer, int64_t created) {
  const bool chat = format.endpoint == BatchEndpoint::kChatCompletions;
  const auto completion_tokens = static_cast<int64_t>(result.at("output_token_ids").size());
  const int64_t prompt_tokens = result.at("prompt_tokens").get<int64_t>();
  nlohmann::json choice = {{"index", 0}};
  if (chat) {
    nlohmann::json message = {{"role", "assistant"}, {"content", result.value("content", nlohmann::json())},
                              {"reasoning_content", result.value("reasoning_content", nlohmann::json())}};
    if (result.contains("tool_calls") && !result["tool_calls"].empty()) message["tool_calls"] = result["tool_calls"];
    choice["message"] = std::move(message);
  } else {
    choice["text"] = with_tokenizer ? result.at("text") : nlohmann::json();
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = result.at("finish_reason");
  if (!with_tokenizer) choice["token_ids"] = result.at("output_token_ids");
  for (const char* extension : {"constraint_satisfied", "logits_hashes"})
    if (result.contains(extension)) choice[extension] = result[extension];
  nlohmann::json body = {
      {"id", fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", ordinal)},
      {"object", chat ? "chat.completion" : "text_completion"},
      {"created", created},
      {"model", format.model.is_null() ? nlohmann::json(default_model) : format.model},
      {"choices", nlohmann::json::array({choice})},
      {"usage", {{"prompt_tokens", prompt_tokens},
                 {"completion_tokens", completion_tokens},
                 {"total_tokens", prompt_tokens + completion_tokens}}}};
  for (const char* extension : {"prompt_token_ids", "prompt_text"})  // --echo-prompt
    if (result.contains(extension)) body[extension] = result[extension];
  return {{"id", fmt::format("batch_req_{}", ordinal)},
          {"custom_id", format.custom_id},
          {"response", {{"status_code", 200}, {"request_id", fmt::format("req_{}", ordinal)}, {"body", body}}},
          {"error", nullptr}};
}

nlohmann::json error_line(const BatchLineFormat& format, const nlohmann::json& id, int64_t ordinal,
                          const std::string& code, const std::string& message) {
  const nlohmann::json error = {{"code", code}, {"message", message}};
  if (format.endpoint == BatchEndpoint::kNone) return {{"id", id}, {"error", error}};
  return {{"id", fmt::format("batch_req_{}", ordinal)},
          {"custom_id", format.custom_id},
          {"response", nullptr},
          {"error", error}};
}

nlohmann::json bad_line_record(const std::string& text, int64_t ordinal, const std::string& message) {
  BatchLineFormat format;
  nlohmann::json id = ordinal;
  const nlohmann::json line = parse_line_quietly(text);
  if (!line.is_object())  // no id to give: the record names the request's place (result_log.h's keys)
    return {{"id", nullptr}, {"request", ordinal}, {"error", {{"code", "invalid_request"}, {"message", message}}}};
  if (line.contains("custom_id") && line["custom_id"].is_string()) {
    format.endpoint = line.value("url", "") == endpoint_url(BatchEndpoint::kCompletions) ? BatchEndpoint::kCompletions
                                                                                         : BatchEndpoint::kChatCompletions;
    format.custom_id = line["custom_id"].get<std::string>();
  } else if (line.contains("id")) {
    id = line["id"];
  }
  return error_line(format, id, ordinal, "invalid_request", message);
}

}  // namespace deepinfer::app
