// `deepinfer render --model M --input requests.jsonl --output prompts.jsonl`: every request line's prompt as the
// model would see it — a chat request's template rendered and encoded, text encoded, ids checked against the
// vocabulary, the output's limits checked — without loading the weights (the model's config.json, its tokenizer
// and chat instructions only), so that a batch file can be checked in seconds before a long job. One line out per
// request, in input order: {"id" (or "custom_id"), "prompt_token_ids", "prompt_text" (special tokens spelled out),
// "prompt_tokens", "max_new_tokens"}; a bad line becomes an error record naming it ({"id", "error": {"code",
// "message"}}), and the exit code is 2 when any line was bad (after every line has been written).
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "src/app/commands.h"
#include "src/app/model_loading.h"
#include "src/app/openai_batch.h"
#include "src/app/prompt_sources.h"
#include "src/app/request_lines.h"
#include "src/app/spmd_command.h"
#include "src/core/check.h"
#include "src/core/files.h"
#include "src/engine/engine.h"

namespace deepinfer::app {

int run_render(const RenderOptions& given, const World& world) {
  RenderOptions options = given;
  if (options.output_path == "-") options.output_path = "/dev/stdout";  // as generate's --output -
  std::optional<ModelConfig> config;
  std::optional<PromptSources> prompts;
  int64_t bad = 0;
  auto prepare = [&] {
    require_single_rank(world, "render");
    check_output_path(options.output_path, "--output",
                      input_files(options.model_path, {options.input_path, options.tokenizer_path,
                                                       options.chat_prose_path}));
    config = load_model_config(options.model_path);
    prompts.emplace(*config, options.model_path, options.tokenizer_path, options.chat_prose_path,
                    options.served_model_name);
    if (!options.tokenizer_path.empty()) prompts->tokenizer();
  };
  auto execute = [&] {
    RequestLines input(options.input_path);
    OutputFile out(options.output_path);
    EngineOptions limits;  // the engine's checks of a request, at generate's defaults (no constraint compiled)
    limits.kv_cache_tokens = options.kv_cache_tokens;
    int64_t lines = 0;
    const TokenizerSource tokenizer = prompts->tokenizer_source();
    const ChatSource chat = prompts->chat_source();
    RequestLines::Line line;
    while (input.next(line)) {
      ++lines;
      nlohmann::json record;
      try {
        OutputReading reading;
        BatchLineFormat format;
        Request request = parse_request_line(line.text, input.where(line), line.ordinal, tokenizer, chat, reading,
                                             &format);
        // generate's checks of a constraint that need no grammar (the grammar itself is compiled there).
        if (request.constraint)
          Engine::validate_constraint(*config, request, fmt::format("{}: request id {}", input.where(line),
                                                                    request.id.dump()));
        request.constraint.reset();  // (compiled by generate; here only the prompt is rendered)
        try {
          Engine::validate(*config, limits, request);
        } catch (const InputError& e) {
          throw InputError(fmt::format("{}: {}", input.where(line), e.what()));
        }
        record = format.endpoint != BatchEndpoint::kNone ? nlohmann::json{{"custom_id", format.custom_id}}
                                                          : nlohmann::json{{"id", request.id}};
        record["prompt_token_ids"] = request.prompt_token_ids;
        if (const text::BpeTokenizer* tokenizer = prompts->loaded_tokenizer())
          record["prompt_text"] = tokenizer->decode(request.prompt_token_ids, /*skip_special_tokens=*/false);
        record["prompt_tokens"] = request.prompt_token_ids.size();
        record["max_new_tokens"] = request.max_new_tokens;
      } catch (const InputError& e) {
        // What is not about the line (no tokenizer, damaged chat instructions) stops the command once.
        if (!std::string_view(e.what()).starts_with(input.where(line))) throw;
        ++bad;
        record = bad_line_record(line.text, line.ordinal, e.what());
      }
      out.write(record.dump());
      out.write("\n");
    }
    DI_INPUT_CHECK(lines > 0, "{}: no requests", options.input_path);
    out.commit();
    if (bad > 0)
      spdlog::error("{} of {} request lines are bad: each has an error record in {}", bad, lines, options.output_path);
    else
      spdlog::info("rendered {} requests to {}", lines, options.output_path);
  };
  const int code = run_spmd_command(world, prepare, execute);
  return code != 0 ? code : bad > 0 ? kExitInputError : 0;
}

}  // namespace deepinfer::app
