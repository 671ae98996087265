// What turns request lines into prompts, loaded when a line first needs it: the tokenizer (--tokenizer, or the
// model directory's tokenizer.json) and DeepSeek's chat instructions (--chat-prose, or chat_prose.json beside the
// tokenizer). Each is checked once against the other and against the model's config (a tokenizer larger than the
// vocabulary, a chat special token the tokenizer lacks), so that a wrong file is blamed, not the first request that
// meets it. `generate` and `render` read their lines through it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "src/app/jsonl.h"
#include "src/model/model_config.h"
#include "src/text/bpe_tokenizer.h"
#include "src/text/chat_template.h"

namespace deepinfer::app {

class PromptSources {
 public:
  // `config` (the model's) must outlive this. Empty paths: the defaults beside the model and the tokenizer; an
  // empty served name: the model directory's name.
  PromptSources(const ModelConfig& config, const std::filesystem::path& model_path, std::string tokenizer_path,
                std::string chat_prose_path, std::string served_model_name = "");

  bool has_tokenizer_file() const;       // given, or beside the model
  bool loaded() const { return tokenizer_.has_value(); }
  const text::BpeTokenizer& tokenizer();  // loads it; InputError when there is none
  const text::BpeTokenizer* loaded_tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const text::ChatProse& chat_prose();    // loads it (and the tokenizer); InputError when there is none

  TokenizerSource tokenizer_source() { return [this]() -> const text::BpeTokenizer& { return tokenizer(); }; }
  ChatSource chat_source();
  const std::string& served_model_name() const { return served_model_name_; }

 private:
  const ModelConfig& config_;
  std::string model_path_;
  std::string served_model_name_;
  std::filesystem::path tokenizer_file_, chat_prose_file_;
  std::optional<text::BpeTokenizer> tokenizer_;
  std::optional<text::ChatProse> chat_prose_;
};

}  // namespace deepinfer::app
