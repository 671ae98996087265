// `deepinfer forward --model M --tokens 1,2,3 --output logits.h5`: the logits of every position, as dataset
// "logits" [tokens, vocab] float32.
#include <spdlog/spdlog.h>

#include <charconv>
#include <filesystem>

#include "src/app/model_loading.h"
#include "src/app/spmd_command.h"
#include "src/core/files.h"
#include "src/core/hdf5_file.h"

namespace deepinfer::app {

namespace {

std::vector<int32_t> parse_tokens(const std::string& text) {
  std::vector<int32_t> tokens;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    int32_t value = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + end, value);
    DI_INPUT_CHECK(ec == std::errc() && ptr == text.data() + end && end > begin,
                   "--tokens: '{}' is not a comma-separated list of token ids", text);
    tokens.push_back(value);
    begin = end + 1;
  }
  return tokens;
}

}  // namespace

int run_forward(const ForwardOptions& options, const World& world) {
  LoadedModel loaded;
  std::unique_ptr<CausalLm> model;
  std::vector<int32_t> tokens;
  auto prepare = [&] {
    require_single_rank(world, "forward");
    check_output_path(options.output_path, "--output", input_files(options.model.model_path),
                      /*allow_special=*/false);
    tokens = parse_tokens(options.tokens);
    {  // against the config, before the weights are read
      DI_INPUT_CHECK(std::filesystem::exists(options.model.model_path), "--model '{}' does not exist",
                     options.model.model_path);
      const ModelConfig c = load_model_config(options.model.model_path);
      DI_INPUT_CHECK(static_cast<int64_t>(tokens.size()) <= c.max_position_embeddings,
                     "--tokens: {} tokens exceed the model's maximum of {} positions", tokens.size(),
                     c.max_position_embeddings);
      for (int32_t t : tokens)
        DI_INPUT_CHECK(t >= 0 && t < c.vocab_size, "--tokens: id {} is outside the vocabulary [0, {})", t,
                       c.vocab_size);
    }
    loaded = load_model(options.model);
  };
  auto execute = [&] {
    model = build_model(std::move(loaded), 0);
    const auto num_tokens = static_cast<int64_t>(tokens.size());
    std::unique_ptr<KvCache> cache = model->make_kv_cache((num_tokens + KvCache::kBlockSize - 1) / KvCache::kBlockSize);
    std::vector<int32_t> blocks(cache->num_blocks());
    for (size_t b = 0; b < blocks.size(); ++b) blocks[b] = static_cast<int32_t>(b);
    ForwardBatch batch;
    batch.token_ids = tokens;
    batch.sequences.push_back({0, num_tokens, blocks});
    batch.all_logits = true;
    const Tensor logits = model->forward(batch, *cache);

    H5Writer out(options.output_path);
    out.write_dataset("logits", logits);
    out.set_attribute("model", options.model.model_path);
    out.set_attribute("model_type", model->config().model_type);
    out.set_attribute("num_tokens", num_tokens);
    out.commit();
    spdlog::info("wrote logits [{}, {}] to {}", logits.size(0), logits.size(1), options.output_path);
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
