#include "src/app/jsonl.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <set>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/json_depth.h"
#include "src/core/json_integers.h"
#include "src/engine/schema_check.h"
#include "src/text/chat_request.h"
#include "src/text/stream_parser.h"

namespace deepinfer::app {

namespace {

// A JSON integer read at its full width (nlohmann keeps up to 64 bits, signed or unsigned), so that no value
// wraps into range before it is checked: 2^32 + 5 is refused, not read as 5.
int64_t integer_in_range(const nlohmann::json& value, int64_t min, int64_t max, const std::string& where,
                         const char* key) {
  DI_INPUT_CHECK(value.is_number_integer(), "{}: '{}' holds {}, not an integer", where, key, value.dump());
  const bool fits = value.is_number_unsigned()
                        ? value.get<uint64_t>() <= static_cast<uint64_t>(max) && value.get<int64_t>() >= min
                        : value.get<int64_t>() >= min && value.get<int64_t>() <= max;
  DI_INPUT_CHECK(fits, "{}: '{}' holds {}, outside [{}, {}]", where, key, value.dump(), min, max);
  return value.get<int64_t>();
}

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxChatTokens = 393216;  // the DeepSeek API's bound on a chat request's max_tokens

// A request's "model": the served model's name, or one of the DeepSeek API's (the names its chat formats answer to).
void check_model_name(const nlohmann::json& model, const std::string& served, const std::string& where) {
  static const char* const kApiNames[] = {"DeepSeek-V4-Pro", "DeepSeek-V4.1-Flash"};
  DI_INPUT_CHECK(model.is_string(), "{}: 'model' should be a string (the served model's name)", where);
  const std::string name = model.get<std::string>();
  if ((!name.empty() && name == served) || std::find(std::begin(kApiNames), std::end(kApiNames), name) != std::end(kApiNames)) return;
  throw InputError(fmt::format("{}: 'model' is '{}', but this job serves '{}' (--served-model-name; also answered to: "
                               "{}, {})", where, name, served, kApiNames[0], kApiNames[1]));
}

// The output constraint of a request (structured output): 'response_format' (json_schema with its schema, json_object,
// regex with its 'regex'; text: none), 'regex' or 'ebnf', at most one of them. `ordered`: the same line in its key
// order.
std::optional<OutputConstraint> parse_constraint(const nlohmann::json& line, const nlohmann::ordered_json& ordered,
                                                 const std::string& where) {
  const bool format = line.contains("response_format") && !line["response_format"].is_null();
  DI_INPUT_CHECK(format + line.contains("regex") + line.contains("ebnf") <= 1,
                 "{}: give one of 'response_format', 'regex' and 'ebnf'", where);
  for (const char* key : {"regex", "ebnf"}) {
    if (!line.contains(key)) continue;
    DI_INPUT_CHECK(line[key].is_string() && !line[key].get<std::string>().empty(), "{}: '{}' must be a non-empty string",
                   where, key);
    return OutputConstraint{key[0] == 'r' ? OutputConstraint::Kind::kRegex : OutputConstraint::Kind::kEbnf,
                            line[key].get<std::string>()};
  }
  if (!format) return std::nullopt;
  const nlohmann::json& rf = line["response_format"];
  DI_INPUT_CHECK(rf.is_object() && rf.contains("type") && rf["type"].is_string(),
                 "{}: 'response_format' should be {{\"type\": ...}}", where);
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return OutputConstraint{OutputConstraint::Kind::kJsonObject, ""};
  if (type == "regex") {
    DI_INPUT_CHECK(rf.contains("regex") && rf["regex"].is_string(), "{}: response_format regex needs 'regex'", where);
    return OutputConstraint{OutputConstraint::Kind::kRegex, rf["regex"].get<std::string>()};
  }
  DI_INPUT_CHECK(type == "json_schema", "{}: response_format type '{}' is none of text, json_object, json_schema, "
                 "regex", where, type);
  DI_INPUT_CHECK(rf.contains("json_schema") && rf["json_schema"].is_object() && rf["json_schema"].contains("schema") &&
                     rf["json_schema"]["schema"].is_object(),
                 "{}: response_format json_schema needs json_schema.schema, an object", where);
  const nlohmann::json& spec = rf["json_schema"];
  DI_INPUT_CHECK(!spec.contains("strict") || spec["strict"].is_null() || spec["strict"].is_boolean(),
                 "{}: response_format json_schema.strict should be true or false", where);
  // (A schema is always enforced whole, strict or not: an output that satisfies it satisfies a best effort too.)
  // The schema as written (its properties' order is the order the output gives them in).
  return OutputConstraint{OutputConstraint::Kind::kJsonSchema,
                          with_whole_integer_bounds(ordered.at("response_format").at("json_schema").at("schema")).dump()};
}

// `ordered`: a chat request's line again with its keys in their order (its tool schemas and arguments keep it).
Request parse_request(const nlohmann::json& line, const nlohmann::ordered_json& ordered, const std::string& where,
                      int64_t line_idx, const TokenizerSource& tokenizer, const ChatSource& chat,
                      OutputReading& reading) {
  // line_idx: the request's position among the input's requests, its default id and seed (so a resumed run,
  // which skips the requests already done, draws what an uninterrupted one draws).
  DI_INPUT_CHECK(line.is_object(), "{}: a request must be a JSON object", where);
  static const std::set<std::string> kKeys = {"id", "prompt_token_ids", "prompt", "max_new_tokens", "temperature",
                                              "top_p", "top_k", "seed", "stop_token_ids", "model",
                                              "ignore_eos", "continues", "response_format", "regex", "ebnf",
                                              "forced_output_token_ids"};
  // A chat request's own keys (text/chat_request.h reads them).
  static const std::set<std::string> kChatKeys = {"messages", "thinking", "reasoning_effort", "tools",
                                                  "tool_choice", "response_format", "max_tokens", "stop"};
  const bool is_chat = line.contains("messages");
  for (const auto& [key, value] : line.items())
    DI_INPUT_CHECK(kKeys.contains(key) || (is_chat && kChatKeys.contains(key)), "{}: unknown key '{}'", where, key);
  if (line.contains("model")) check_model_name(line["model"], chat.served_model_name, where);
  Request r;
  r.index = line_idx;
  r.id = line.contains("id") ? line["id"] : nlohmann::json(line_idx);
  DI_INPUT_CHECK(line.contains("prompt_token_ids") + line.contains("prompt") + is_chat == 1,
                 "{}: a request gives 'prompt_token_ids', 'prompt' (text) or 'messages' (chat), one of them", where);
  if (is_chat) {
    DI_INPUT_CHECK(static_cast<bool>(tokenizer) && static_cast<bool>(chat.prose),
                   "{}: a chat request needs a tokenizer (--tokenizer)", where);
    const text::ChatConversation conversation = text::parse_chat_request(ordered, where);
    const text::RenderedChat prompt = text::render_chat(chat.format, chat.prose(), conversation, where);
    try {
      r.prompt_token_ids = text::encode_chat(tokenizer(), prompt);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", where, e.what()));
    }
    reading.chat = true;
    // The DeepSeek API's bounds on a chat request's own fields (its sampling fields are read below).
    if (line.contains("max_tokens") && !line["max_tokens"].is_null())
      integer_in_range(line["max_tokens"], 1, kMaxChatTokens, where, "max_tokens");
    if (line.contains("temperature") && line["temperature"].is_number())
      DI_INPUT_CHECK(line["temperature"].get<double>() >= 0 && line["temperature"].get<double>() <= 2,
                     "{}: 'temperature' = {} is out of range [0, 2]", where, line["temperature"].dump());
    reading.tool_calls = !conversation.tools.empty() && conversation.tool_choice != "none";
    reading.in_tool_calls = reading.tool_calls && conversation.tool_choice == "required";
    reading.reasoning_first = prompt.reasoning_open;
    DI_INPUT_CHECK(!(line.contains("max_tokens") && line.contains("max_new_tokens")),
                   "{}: give 'max_tokens' or 'max_new_tokens', not both", where);
    if (line.contains("stop") && !line["stop"].is_null()) {
      const nlohmann::json& stop = line["stop"];
      const bool strings = stop.is_string() || (stop.is_array() && std::all_of(stop.begin(), stop.end(), [](const auto& s) {
                                                  return s.is_string();
                                                }));
      DI_INPUT_CHECK(strings, "{}: 'stop' must be a string or a list of strings", where);
      if (stop.is_string()) reading.stop.push_back(stop.get<std::string>());
      else reading.stop = stop.get<std::vector<std::string>>();
      DI_INPUT_CHECK(std::none_of(reading.stop.begin(), reading.stop.end(), [](const std::string& s) { return s.empty(); }),
                     "{}: 'stop' holds an empty string (a stop sequence is at least one character)", where);
      // The engine ends the sequence where the writers will cut its content (EngineOptions::stops).
      r.stops = {reading.stop, reading.reasoning_first, reading.tool_calls, reading.in_tool_calls};
    }
  } else if (line.contains("prompt")) {
    DI_INPUT_CHECK(line["prompt"].is_string() && !line["prompt"].get<std::string>().empty(),
                   "{}: 'prompt' must be a non-empty string", where);
    DI_INPUT_CHECK(static_cast<bool>(tokenizer), "{}: 'prompt' text needs a tokenizer (--tokenizer)", where);
    try {
      r.prompt_token_ids = tokenizer().encode(line["prompt"].get<std::string>());
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: 'prompt': {}", where, e.what()));
    }
  } else {
    DI_INPUT_CHECK(line["prompt_token_ids"].is_array(), "{}: 'prompt_token_ids' must be an array of token ids",
                   where);
    for (const auto& token : line["prompt_token_ids"])
      r.prompt_token_ids.push_back(
          static_cast<int32_t>(integer_in_range(token, 0, kMaxTokenId, where, "prompt_token_ids")));
  }
  const char* max_key = is_chat && line.contains("max_tokens") ? "max_tokens" : "max_new_tokens";
  DI_INPUT_CHECK(line.contains(max_key) && line[max_key].is_number_integer(), "{}: '{}' must be an integer >= 1{}",
                 where, is_chat && !line.contains(max_key) ? "max_tokens" : max_key,
                 is_chat && !line.contains(max_key) ? " (a chat request's name for max_new_tokens, which it may give "
                                                      "instead)" : "");
  r.max_new_tokens = integer_in_range(line[max_key], 1, std::numeric_limits<int64_t>::max(), where, max_key);
  auto number = [&](const char* key, double min, double max, double fallback) {
    if (!line.contains(key) || line[key].is_null()) return fallback;
    DI_INPUT_CHECK(line[key].is_number(), "{}: '{}' must be a number", where, key);
    const double v = line[key].get<double>();
    DI_INPUT_CHECK(v >= min && v <= max, "{}: '{}' = {} is out of range [{}, {}]", where, key, v, min, max);
    return v;
  };
  r.constraint = parse_constraint(line, ordered, where);
  if (line.contains("forced_output_token_ids")) {  // forced decoding: the output is these tokens, then an EOS
    DI_INPUT_CHECK(!r.constraint, "{}: forced_output_token_ids decides the whole output: give no other constraint",
                   where);
    const nlohmann::json& ids = line["forced_output_token_ids"];
    DI_INPUT_CHECK(ids.is_array() && !ids.empty(), "{}: 'forced_output_token_ids' must be a non-empty list of token "
                   "ids", where);
    for (const nlohmann::json& id : ids) integer_in_range(id, 0, kMaxTokenId, where, "forced_output_token_ids");
    r.constraint = OutputConstraint{OutputConstraint::Kind::kTokens, ids.dump()};
  }
  // In thinking mode the answer is constrained, after the reasoning it starts with (forced tokens: all of them).
  if (r.constraint && reading.reasoning_first && r.constraint->kind != OutputConstraint::Kind::kTokens) {
    r.constraint->after_token = tokenizer().token_to_id("</think>");
    DI_INPUT_CHECK(r.constraint->after_token >= 0, "{}: the tokenizer has no </think> token to end the reasoning by", where);
  }
  r.sampling.temperature = static_cast<float>(number("temperature", 0.0, 100.0, 0.0));
  r.sampling.top_p = static_cast<float>(number("top_p", 1e-6, 1.0, 1.0));
  r.sampling.top_k = static_cast<int64_t>(number("top_k", 0, 1e9, 0));
  r.sampling.seed = line.contains("seed") && !line["seed"].is_null()
                        ? static_cast<uint64_t>(integer_in_range(line["seed"], 0, std::numeric_limits<int64_t>::max(),
                                                                 where, "seed"))
                        : static_cast<uint64_t>(line_idx);
  if (line.contains("ignore_eos") && !line["ignore_eos"].is_null()) {
    DI_INPUT_CHECK(line["ignore_eos"].is_boolean(), "{}: 'ignore_eos' must be true or false", where);
    r.sampling.ignore_eos = line["ignore_eos"].get<bool>();
  }
  if (line.contains("stop_token_ids")) {
    DI_INPUT_CHECK(line["stop_token_ids"].is_array(), "{}: 'stop_token_ids' must be an array", where);
    for (const auto& token : line["stop_token_ids"])
      r.sampling.stop_token_ids.push_back(
          static_cast<int32_t>(integer_in_range(token, 0, kMaxTokenId, where, "stop_token_ids")));
  }
  return r;
}

}  // namespace

Request parse_request_line(const std::string& text, const std::string& where, int64_t ordinal,
                           const TokenizerSource& tokenizer, const ChatSource& chat, OutputReading& reading,
                           BatchLineFormat* format, nlohmann::json* continues) {
  nlohmann::json line;
  nlohmann::ordered_json ordered;
  check_json_depth(text, where);
  try {
    line = nlohmann::json::parse(text);
    // Chat requests' tool schemas and arguments, and response_format's schema, keep their key order.
    if (line.is_object() && (line.contains("messages") || line.contains("response_format") ||
                             line.contains("custom_id")))
      ordered = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed JSON: {}", where, e.what()));
  }
  // A chat request's integers must each fit 64 bits, as the API has it (parsed, a wider one is a float).
  if (line.is_object() && (line.contains("messages") || line.contains("custom_id")))
    if (const std::string wide = json_integer_beyond_64_bits(text); !wide.empty())
      throw InputError(fmt::format("{}: the integer {} is beyond 64 bits (the JSON numbers a request may hold "
                                   "exactly)", where, wide.size() > 40 ? wide.substr(0, 40) + "..." : wide));
  BatchLineFormat own_format;
  BatchLineFormat& f = format != nullptr ? *format : own_format;
  f = BatchLineFormat{};
  if (is_openai_batch_line(line)) {  // an OpenAI batch line: its body read as today's request line
    ordered = openai_request_line(ordered, where, f);
    line = nlohmann::json::parse(ordered.dump());
  }
  DI_INPUT_CHECK(!(f.endpoint != BatchEndpoint::kNone && line.contains("continues")),
                 "{}: an OpenAI batch request cannot continue another ('continues')", where);
  if (continues != nullptr) *continues = line.is_object() && line.contains("continues") ? line["continues"] : nlohmann::json();
  return parse_request(line, ordered, where, ordinal, tokenizer, chat, reading);
}

std::unordered_map<std::string, std::vector<int32_t>> read_draft_reference(const std::filesystem::path& path,
                                                                           int64_t vocab_size) {
  std::ifstream in(path);
  DI_INPUT_CHECK(in.good(), "cannot open --draft-reference '{}'", path.string());
  std::unordered_map<std::string, std::vector<int32_t>> reference;
  std::string text;
  int64_t line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_number);
    nlohmann::json line;
    check_json_depth(text, where);
    try {
      line = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: malformed JSON: {}", where, e.what()));
    }
    // An error record (a request that failed alone) has no continuation to know: the drafter drafts nothing there.
    if (line.is_object() && line.contains("error") && !line["error"].is_null() && !line.contains("output_token_ids"))
      continue;
    DI_INPUT_CHECK(line.is_object() && line.contains("id") && line.contains("output_token_ids") &&
                       line["output_token_ids"].is_array(),
                   "{}: a reference result needs 'id' and an 'output_token_ids' array (generate's --output)", where);
    std::vector<int32_t> tokens;
    for (const nlohmann::json& token : line["output_token_ids"])
      tokens.push_back(static_cast<int32_t>(integer_in_range(token, 0, vocab_size - 1, where, "output_token_ids")));
    DI_INPUT_CHECK(reference.emplace(line["id"].dump(), std::move(tokens)).second, "{}: id {} given twice", where,
                   line["id"].dump());
  }
  DI_INPUT_CHECK(!reference.empty(), "--draft-reference '{}' holds no results", path.string());
  return reference;
}

std::vector<Request> read_requests(const std::filesystem::path& path, const TokenizerSource& tokenizer,
                                   const ChatSource& chat, std::vector<OutputReading>* readings,
                                   std::vector<BatchLineFormat>* formats) {
  std::ifstream in(path);
  DI_INPUT_CHECK(in.good(), "cannot open input '{}'", path.string());
  std::vector<Request> requests;
  std::string text;
  int64_t line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    const std::string where = fmt::format("{}:{}", path.string(), line_number);
    OutputReading reading;
    BatchLineFormat format;
    nlohmann::json continues;
    Request request = parse_request_line(text, where, static_cast<int64_t>(requests.size()), tokenizer, chat, reading,
                                         &format, &continues);
    if (!continues.is_null()) {  // the earlier request of that id, the only one
      DI_INPUT_CHECK(!reading.chat, "{}: a chat request carries its history in 'messages', not 'continues'", where);
      const nlohmann::json& parent = continues;
      int64_t found = -1;
      for (const Request& earlier : requests) {
        if (earlier.id != parent) continue;
        DI_INPUT_CHECK(found < 0, "{}: 'continues' names id {}, which several earlier requests have", where,
                       parent.dump());
        found = earlier.index;
      }
      DI_INPUT_CHECK(found >= 0, "{}: 'continues' names id {}, which no earlier request has", where, parent.dump());
      request.continues = found;
    }
    requests.push_back(std::move(request));
    if (readings != nullptr) readings->push_back(reading);
    if (formats != nullptr) formats->push_back(format);
  }
  DI_INPUT_CHECK(!requests.empty(), "{}: no requests", path.string());
  return requests;
}

StreamWriter::StreamWriter(const std::filesystem::path& path, const text::BpeTokenizer* tokenizer)
    : path_(path), tokenizer_(tokenizer) {
  if (path == "-") {
    out_ = stdout;
  } else {
    out_ = std::fopen(path.c_str(), "w");
    DI_INPUT_CHECK(out_ != nullptr, "cannot write --stream '{}': {}", path.string(), std::strerror(errno));
    own_ = true;
  }
}

StreamWriter::~StreamWriter() {
  if (own_) std::fclose(out_);
}

void StreamWriter::begin(const std::vector<Request>& requests, const std::vector<OutputReading>& readings) {
  requests_ = &requests;
  parsers_.clear();
  finish_reasons_.assign(requests.size(), "");
  for (size_t i = 0; i < requests.size(); ++i) {
    const OutputReading reading = i < readings.size() ? readings[i] : OutputReading{};
    parsers_.push_back(tokenizer_ == nullptr ? nullptr
                                             : std::make_unique<text::ChatStreamParser>(
                                                   *tokenizer_, reading.reasoning_first, reading.stop,
                                                   reading.tool_calls, reading.in_tool_calls));
  }
}

void StreamWriter::write(const nlohmann::json& line) {
  if (reader_gone_) return;
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), out_) == text.size() && std::fflush(out_) == 0) return;
  // A reader that went away (`| head`, a FIFO's reader exiting) ends the stream, not the job: the results still
  // reach --output. (SIGPIPE is ignored: main.cpp.) Any other failure, a full disk, is the run's error.
  if (errno != EPIPE) throw Error(fmt::format("writing --stream '{}' failed: {}", path_.string(), std::strerror(errno)));
  spdlog::warn("--stream '{}': its reader went away, streaming stops, generation goes on", path_.string());
  reader_gone_ = true;
}

nlohmann::json StreamWriter::delta(const std::vector<text::StreamEvent>& events, std::string* finish_reason) const {
  nlohmann::json d = nlohmann::json::object();
  for (const text::StreamEvent& e : events) {
    if (!e.finish_reason.empty()) *finish_reason = e.finish_reason;
    switch (e.channel) {
      case text::StreamEvent::Channel::kContent:
        if (!e.text.empty()) d["content"] = d.value("content", "") + e.text;
        break;
      case text::StreamEvent::Channel::kReasoning:
        d["reasoning_content"] = d.value("reasoning_content", "") + e.text;
        break;
      case text::StreamEvent::Channel::kToolCall: {
        nlohmann::json call = {{"index", e.call_index}, {"function", {{"arguments", e.call_start ? "" : e.text}}}};
        if (e.call_start) {
          call["id"] = fmt::format("call_{}", e.call_index);
          call["type"] = "function";
          call["function"]["name"] = e.text;
        }
        d["tool_calls"].push_back(std::move(call));
        break;
      }
    }
  }
  return d.empty() ? nlohmann::json() : d;
}

void StreamWriter::tokens(int64_t request_index, std::span<const int32_t> tokens) {
  nlohmann::json line = {{"id", requests_->at(request_index).id},
                         {"token_ids", std::vector<int32_t>(tokens.begin(), tokens.end())}};
  if (text::ChatStreamParser* parser = parsers_[request_index].get()) {
    const nlohmann::json d = delta(parser->push_output(tokens), &finish_reasons_[request_index]);
    if (!d.is_null()) line["delta"] = d;
  }
  write(line);
}

void StreamWriter::end(const std::vector<RequestResult>& results) {
  for (const RequestResult& r : results) {
    nlohmann::json line = {{"id", r.id}};
    if (r.failure) {  // it ended on an error: the stream says so where it would say how it finished
      line["finish_reason"] = "error";
      line["error"] = {{"code", r.failure->code}, {"message", r.failure->message}};
      write(line);
      continue;
    }
    std::string reason = finish_reasons_.at(r.index);
    const std::string engine_reason = finish_reason_name(r.finish_reason);
    text::ChatStreamParser* parser = parsers_.at(r.index).get();
    if (parser != nullptr && !parser->finished()) {
      const nlohmann::json d = delta(parser->finish(engine_reason), &reason);
      if (!d.is_null()) line["delta"] = d;
    }
    line["finish_reason"] = reason.empty() ? engine_reason : reason;
    write(line);
  }
}

void StreamWriter::close() { write({{"done", true}}); }

nlohmann::json result_line(const RequestResult& r, const text::BpeTokenizer* tokenizer, const OutputReading& reading) {
  if (r.failure) return {{"id", r.id}, {"error", {{"code", r.failure->code}, {"message", r.failure->message}}}};
  nlohmann::json line = result_to_json(r);
  line.erase("index");
  if (tokenizer != nullptr) line["text"] = tokenizer->decode(r.output_token_ids, /*skip_special_tokens=*/true);
  if (tokenizer != nullptr && !r.prompt_token_ids.empty())
    line["prompt_text"] = tokenizer->decode(r.prompt_token_ids, /*skip_special_tokens=*/false);
  if (tokenizer != nullptr && reading.chat) {  // the output as a stream of events (special tokens left out)
    text::ChatStreamParser parser(*tokenizer, reading.reasoning_first, reading.stop, reading.tool_calls,
                                  reading.in_tool_calls);
    std::string reasoning, content;
    nlohmann::json calls = nlohmann::json::array();
    const auto take = [&](const std::vector<text::StreamEvent>& events) {
      for (const text::StreamEvent& e : events) {
        if (e.channel == text::StreamEvent::Channel::kToolCall) {
          if (e.call_start)
            calls.push_back({{"id", fmt::format("call_{}", e.call_index)}, {"type", "function"},
                             {"function", {{"name", e.text}, {"arguments", ""}}}});
          else if (!calls.empty())
            calls.back()["function"]["arguments"] = calls.back()["function"]["arguments"].get<std::string>() + e.text;
          continue;
        }
        (e.channel == text::StreamEvent::Channel::kReasoning ? reasoning : content) += e.text;
        if (e.finish_reason == "stop" || e.finish_reason == "tool_calls") line["finish_reason"] = e.finish_reason;
      }
    };
    take(parser.push_output(r.output_token_ids));
    if (!parser.finished()) take(parser.finish(line["finish_reason"].get<std::string>()));
    line["reasoning_content"] = reading.reasoning_first ? nlohmann::json(reasoning) : nlohmann::json();
    line["content"] = content;
    if (reading.tool_calls) line["tool_calls"] = calls;
  }
  return line;
}

void write_results(const std::filesystem::path& path, const std::vector<RequestResult>& results,
                   const text::BpeTokenizer* tokenizer, const std::vector<OutputReading>* readings,
                   const std::vector<BatchLineFormat>* formats, const std::string& model_name) {
  OutputFile out(path);
  const auto created = static_cast<int64_t>(std::time(nullptr));
  for (size_t i = 0; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    const OutputReading reading = readings != nullptr && i < readings->size() ? (*readings)[i] : OutputReading{};
    const BatchLineFormat format = formats != nullptr && i < formats->size() ? (*formats)[i] : BatchLineFormat{};
    const auto ordinal = static_cast<int64_t>(i);
    nlohmann::json line;
    try {
      if (r.failure) {
        line = error_line(format, r.id, ordinal, r.failure->code, r.failure->message);
      } else {
        line = result_line(r, tokenizer, reading);
        if (format.endpoint != BatchEndpoint::kNone)
          line = openai_result_line(line, format, ordinal, model_name, tokenizer != nullptr, created);
      }
    } catch (const std::exception& e) {  // an output the tokenizer cannot read: that request alone fails
      line = error_line(format, r.id, ordinal, "output_unreadable",
                        fmt::format("request id {}: its output cannot be written: {}", r.id.dump(), e.what()));
    }
    out.write(line.dump());
    out.write("\n");
  }
  out.commit();
}

}  // namespace deepinfer::app
