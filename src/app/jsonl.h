// The generate command's files: requests in, results out, one JSON object per line.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/app/openai_batch.h"
#include "src/engine/request.h"
#include "src/text/bpe_tokenizer.h"
#include "src/text/chat_template.h"
#include "src/text/stream_parser.h"

namespace deepinfer::app {

// The tokenizer a request with "prompt" text needs, loaded when first asked for (InputError where there is none).
using TokenizerSource = std::function<const text::BpeTokenizer&()>;

// What chat requests need besides the tokenizer: the model's chat format and the effort instructions (loaded
// when first asked for).
struct ChatSource {
  text::ChatFormat format = text::ChatFormat::kV4;
  std::function<const text::ChatProse&()> prose;
  // The name a request's "model" may give besides the DeepSeek API's own (DeepSeek-V4-Pro, DeepSeek-V4.1-Flash):
  // --served-model-name, by default the model directory's name. (Every request's "model" is checked, chat or not.)
  std::string served_model_name;
};

// How a request's output reads as text: a chat request whose prompt opened the reasoning (thinking mode) has its
// reasoning first, up to </think>.
struct OutputReading {
  bool chat = false;
  bool reasoning_first = false;
  std::vector<std::string> stop;  // the chat request's stop sequences
  bool tool_calls = false;        // its tools are shown: the output's DSML tool calls become tool_calls
  bool in_tool_calls = false;     // tool_choice required: the prompt opened the tool-call block
};

// Throws InputError naming the file and line number of a malformed line or a bad field. A request gives
// "prompt_token_ids", "prompt" (text, encoded by the tokenizer, special tokens matched) or "messages" (an OpenAI
// chat-completions request, text/chat_request.h: rendered with the model's chat template, then encoded; its
// "max_tokens" stands for "max_new_tokens"; "stop" holds stop sequences, which end its content in the result).
// `readings` (optional) gets one entry per request.
std::vector<Request> read_requests(const std::filesystem::path& path, const TokenizerSource& tokenizer = {},
                                   const ChatSource& chat = {}, std::vector<OutputReading>* readings = nullptr,
                                   std::vector<BatchLineFormat>* formats = nullptr);

// One input line (not blank) as a request: today's request line or an OpenAI batch line (openai_batch.h; `format`
// gets its endpoint and custom_id when given). `where` (file:line) prefixes every error; `ordinal` is the request's
// position among the input's requests (its default id and seed); `continues` (when given) gets the line's
// "continues" value (null: none), which the caller resolves.
Request parse_request_line(const std::string& text, const std::string& where, int64_t ordinal,
                           const TokenizerSource& tokenizer, const ChatSource& chat, OutputReading& reading,
                           BatchLineFormat* format = nullptr, nlohmann::json* continues = nullptr);

// generate --draft-reference: the results of an earlier run (generate's --output), request id (its JSON text) ->
// output_token_ids; the controlled drafter's knowledge of the target's continuation. Throws InputError naming the
// file and line of a malformed line, a token outside [0, vocab_size) or an id given twice.
std::unordered_map<std::string, std::vector<int32_t>> read_draft_reference(const std::filesystem::path& path,
                                                                           int64_t vocab_size);

// generate --stream: one JSON object per line, written as the tokens arrive on world rank 0 (flushed each time):
// {"id", "token_ids", "delta"} with delta's "content", "reasoning_content" and "tool_calls" (OpenAI's chunk form,
// call ids call_0, ...) where a tokenizer reads the output (a chat request through the stream parser, a text
// prompt's output as content), then per request {"id", "finish_reason"} once generation is over, and last
// {"done": true}: a file without that line is not whole. PATH "-" is the standard output. A reader that goes away
// stops the stream (one warning), not the job.
class StreamWriter {
 public:
  StreamWriter(const std::filesystem::path& path, const text::BpeTokenizer* tokenizer);
  ~StreamWriter();
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // The requests whose tokens follow, by their index in `requests` (the whole input, or one window of it); they
  // must outlive the calls up to end().
  void begin(const std::vector<Request>& requests, const std::vector<OutputReading>& readings);
  void tokens(int64_t request_index, std::span<const int32_t> tokens);
  void end(const std::vector<RequestResult>& results);  // each result's finish line
  void close();                                          // the last line, {"done": true}

 private:
  void write(const nlohmann::json& line);
  // The events' delta (null: nothing to say); `finish_reason` gets a parser's own end (stop, tool_calls).
  nlohmann::json delta(const std::vector<text::StreamEvent>& events, std::string* finish_reason) const;

  std::filesystem::path path_;
  const text::BpeTokenizer* tokenizer_;
  const std::vector<Request>* requests_ = nullptr;
  std::vector<std::unique_ptr<text::ChatStreamParser>> parsers_;
  std::vector<std::string> finish_reasons_;  // a parser's own end, where it had one
  std::FILE* out_ = nullptr;
  bool own_ = false;
  bool reader_gone_ = false;
};

// Writes the results in order, whole or not at all (temporary file, then rename). With a tokenizer each result
// also carries "text", its output decoded (special tokens skipped), and a chat request's result its
// "reasoning_content" (null outside thinking mode), "content" and, where it had tools, "tool_calls" (OpenAI's
// form, ids call_0, call_1, ...) as the stream parser (text/stream_parser.h) reads the output token by token; a stop sequence met ends the content there and makes the finish reason "stop" (the
// engine does not stop at stop sequences: the tokens after one were generated and are in the ids).
// An OpenAI batch line's result (`formats`, by request) takes the Batch API's form (openai_batch.h), `model_name`
// where its request names none; a request that failed alone is an error record in its line's form.
void write_results(const std::filesystem::path& path, const std::vector<RequestResult>& results,
                   const text::BpeTokenizer* tokenizer = nullptr, const std::vector<OutputReading>* readings = nullptr,
                   const std::vector<BatchLineFormat>* formats = nullptr, const std::string& model_name = "");
// One result as write_results writes it (today's result line, before any OpenAI wrapping).
nlohmann::json result_line(const RequestResult& result, const text::BpeTokenizer* tokenizer,
                           const OutputReading& reading);

}  // namespace deepinfer::app
