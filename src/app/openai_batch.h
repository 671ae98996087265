// The OpenAI batch file format (what OpenAI's Batch API and vLLM's run-batch read and write), beside today's
// request lines: one request a line,
//   {"custom_id": "...", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body": {...}}
// and one result a line,
//   {"id": "batch_req_N", "custom_id": "...", "response": {"status_code": 200, "request_id": "req_N", "body": {...}},
//    "error": null}
// (or "response": null and "error": {"code", "message"} for a request that failed). A chat body is today's chat
// request (text/chat_request.h); a completions body gives "prompt" as text, or as token ids, which need no
// tokenizer. Without a tokenizer a choice carries its generated "token_ids" (as vLLM's extension does).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace deepinfer::app {

enum class BatchEndpoint { kNone, kChatCompletions, kCompletions };  // kNone: today's request line

// How a request line was written, so that its result is written the same way.
struct BatchLineFormat {
  BatchEndpoint endpoint = BatchEndpoint::kNone;
  std::string custom_id;  // OpenAI lines
  nlohmann::json model;   // the body's "model", echoed in the response (null: the --model's name)
};

// Whether a parsed line is an OpenAI batch line (it has "custom_id", "url", "method" or "body").
bool is_openai_batch_line(const nlohmann::json& line);

// The OpenAI batch line as today's request line (its id the custom_id), filling `format`. InputError, prefixed
// with `where`, for what the format or this engine does not take: another method or url, n > 1, streaming,
// log probabilities, penalties, a completions "stop" (chat requests take stop sequences), ...
nlohmann::ordered_json openai_request_line(const nlohmann::ordered_json& line, const std::string& where,
                                           BatchLineFormat& format);

// The OpenAI result line of a finished request, from its result line as write_results writes it (result_line:
// output_token_ids, finish_reason, prompt_tokens, and with a tokenizer text / content / reasoning_content /
// tool_calls). `ordinal` numbers the batch_req_ / request ids; `created` is the Unix time it is written at.
nlohmann::json openai_result_line(const nlohmann::json& result, const BatchLineFormat& format, int64_t ordinal,
                                  const std::string& default_model, bool with_tokenizer, int64_t created);

// The error record of a request that did not run or did not finish: an OpenAI line's form for OpenAI lines,
// {"id", "error": {"code", "message"}} otherwise. `id` is today's line's id.
nlohmann::json error_line(const BatchLineFormat& format, const nlohmann::json& id, int64_t ordinal,
                          const std::string& code, const std::string& message);

// The error record of a line that could not be read as a request: its custom_id or id as far as the text gives
// them (else the ordinal, the id such a line would have had); a line that is no JSON object gives none:
// {"id": null, "request": ordinal, "error"} (a real request may have that ordinal as its id).
nlohmann::json bad_line_record(const std::string& text, int64_t ordinal, const std::string& message);

}  // namespace deepinfer::app
