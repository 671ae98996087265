#include "src/app/prompt_sources.h"

#include <spdlog/spdlog.h>

#include "src/core/check.h"
#include "src/model/architectures.h"

namespace deepinfer::app {

PromptSources::PromptSources(const ModelConfig& config, const std::filesystem::path& model_path,
                             std::string tokenizer_path, std::string chat_prose_path, std::string served_model_name)
    : config_(config), model_path_(model_path.string()), served_model_name_(std::move(served_model_name)) {
  if (served_model_name_.empty()) {  // a directory's name; a config.json's directory's; another file's stem
    const std::filesystem::path path = std::filesystem::absolute(model_path).lexically_normal();
    const std::filesystem::path named = path.has_filename() ? path : path.parent_path();
    served_model_name_ = std::filesystem::is_directory(named) ? named.filename().string()
                         : named.filename() == "config.json" ? named.parent_path().filename().string()
                                                             : named.stem().string();
  }
  tokenizer_file_ = !tokenizer_path.empty()                    ? std::filesystem::path(tokenizer_path)
                    : std::filesystem::is_directory(model_path) ? model_path / "tokenizer.json"
                                                                : std::filesystem::path();
  chat_prose_file_ = !chat_prose_path.empty() ? std::filesystem::path(chat_prose_path)
                                              : tokenizer_file_.parent_path() / "chat_prose.json";
}

bool PromptSources::has_tokenizer_file() const {
  return !tokenizer_file_.empty() && std::filesystem::exists(tokenizer_file_);
}

const text::BpeTokenizer& PromptSources::tokenizer() {
  if (tokenizer_) return *tokenizer_;
  DI_INPUT_CHECK(has_tokenizer_file(), "requests give 'prompt' text or 'messages': pass --tokenizer tokenizer.json "
                 "(the model has none beside it)");
  tokenizer_.emplace(text::BpeTokenizer::load(tokenizer_file_));
  // A tokenizer with more tokens than the model's vocabulary is another model's; one with fewer is usual (the
  // model pads its vocabulary): a padding id in an output has no text (it decodes to nothing, as in the tokenizers
  // library; the result's token ids keep it).
  DI_INPUT_CHECK(tokenizer_->vocab_size() <= config_.vocab_size, "{}: {} tokens, more than the {} of the model's "
                 "vocabulary ({}): it is not this model's tokenizer", tokenizer_file_.string(),
                 tokenizer_->vocab_size(), config_.vocab_size, model_path_);
  tokenizer_->limit_text(config_.max_position_embeddings);  // a prompt longer than the model's length is refused
  if (tokenizer_->vocab_size() < config_.vocab_size)
    spdlog::info("{} spells ids below {} of the model's {}: a higher (padding) id in an output has no text",
                 tokenizer_file_.string(), tokenizer_->vocab_size(), config_.vocab_size);
  return *tokenizer_;
}

const text::ChatProse& PromptSources::chat_prose() {
  if (chat_prose_) return *chat_prose_;
  DI_INPUT_CHECK(std::filesystem::exists(chat_prose_file_),
                 "chat requests need DeepSeek's effort instructions: run launch/chat_prose.py {} (pip install "
                 "deepseek-recipe==0.2.0), or pass --chat-prose FILE", chat_prose_file_.string());
  chat_prose_.emplace(text::ChatProse::load(chat_prose_file_));
  // A chat request needs the tokenizer anyway: its tokens are checked once, blaming the files, not a request.
  text::check_chat_tokens(chat_format_of(config_), *chat_prose_, chat_prose_file_.string(), tokenizer(),
                          tokenizer_file_.string());
  return *chat_prose_;
}

ChatSource PromptSources::chat_source() {
  return ChatSource{chat_format_of(config_), [this]() -> const text::ChatProse& { return chat_prose(); },
                    served_model_name_};
}

}  // namespace deepinfer::app
