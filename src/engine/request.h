// A generation request as read from the input JSONL, and the finished result written back.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  int64_t top_k = 0;         // 0: no top-k filter
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;  // the model's EOS tokens do not stop the sequence (stop_token_ids still do), as vLLM's
};

// A request's constraint on its output (structured output, engine/structured_output.h): a JSON Schema (strict), any
// JSON object, a regular expression, an EBNF grammar (xgrammar's GBNF dialect, root rule `root`), or given tokens
// (forced decoding: the output is those tokens, then the model's EOS, as if sampled: an earlier output run again
// through the output side, stop sequences, parsers and streams, or a completion scored).
struct OutputConstraint {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kEbnf, kTokens };
  Kind kind = Kind::kJsonObject;
  // The schema (JSON text), the regex or the grammar; empty for any JSON object; kTokens: the ids as a JSON array.
  std::string text;
  // -1: the whole output is constrained. Else the output is free up to and including this token, and constrained
  // after it: a thinking-mode chat request's answer after its reasoning's end (</think>).
  int32_t after_token = -1;
  // "json_schema", "json_object", "regex" or "ebnf".
  const char* kind_name() const;
  bool operator==(const OutputConstraint&) const = default;
};

// Stop sequences: text that ends a request's output where it appears (a chat request's "stop"), met where the engine
// reads the output as the writers do (text/stream_parser.h: the content only, not the reasoning nor tool-call markup).
struct TextStops {
  std::vector<std::string> sequences;  // empty: none
  bool reasoning_first = false;        // the prompt opened the reasoning (thinking mode)
  bool tool_calls = false;             // the request shows tools: its DSML tool-call block is markup
  bool in_tool_calls = false;          // tool_choice required: the prompt opened the tool-call block
  bool operator==(const TextStops&) const = default;
};

struct Request {
  int64_t index = 0;  // position in the input: the output order, and how ranks name a request to each other
  nlohmann::json id;  // any JSON value, echoed back as given
  std::vector<int32_t> prompt_token_ids;
  int64_t max_new_tokens = 0;
  SamplingParams sampling;
  // The index of an earlier request whose conversation this one continues (-1: none): it runs once that one has
  // finished, its prompt_token_ids following that one's prompt and output (generate's waves).
  int64_t continues = -1;
  std::optional<OutputConstraint> constraint;  // none: free text
  TextStops stops;  // the engine ends the sequence at the token that completes one (EngineOptions::stops)
};

enum class FinishReason { kNone, kStop, kLength };
FinishReason parse_finish_reason(const std::string& name);
inline const char* finish_reason_name(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : reason == FinishReason::kLength ? "length" : "none";
}

// A request that failed after it started, alone (the job goes on): a code for scripts and a message naming the
// request and what happened. Its output so far is not a result.
struct RequestFailure {
  std::string code;
  std::string message;
};

struct RequestResult {
  int64_t index = 0;
  nlohmann::json id;
  std::vector<int32_t> output_token_ids;
  FinishReason finish_reason = FinishReason::kNone;
  int64_t prompt_tokens = 0;
  // With a constraint: whether the output is a whole sentence of it (false: cut short, by max_new_tokens or the
  // model's length).
  std::optional<bool> constraint_satisfied;
  // With --logits-hashes: per output token, the fingerprint of its logits row (cpu::logits_row_hashes).
  std::vector<uint64_t> logits_hashes;
  std::optional<RequestFailure> failure;
  // With EngineOptions::echo_prompt: the prompt's token ids as the model saw them.
  std::vector<int32_t> prompt_token_ids;
};

nlohmann::json result_to_json(const RequestResult& result);
RequestResult result_from_json(const nlohmann::json& json);

}  // namespace deepinfer
