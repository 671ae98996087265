// The generate command's files: requests in, results out, one JSON object per line.
#pragma once

#include <filesystem>
#include <functional>
#include <vector>

#include "src/engine/request.h"
#include "src/text/bpe_tokenizer.h"

namespace deepinfer::app {

// The tokenizer a request with "prompt" text needs, loaded when first asked for (InputError where there is none).
using TokenizerSource = std::function<const text::BpeTokenizer&()>;

// Throws InputError naming the file and line number of a malformed line or a bad field. A request gives either
// "prompt_token_ids" or "prompt" (text, encoded by the tokenizer, special tokens matched).
std::vector<Request> read_requests(const std::filesystem::path& path, const TokenizerSource& tokenizer = {});

// Writes the results in order, whole or not at all (temporary file, then rename). With a tokenizer each result
// also carries "text", its output decoded (special tokens skipped).
void write_results(const std::filesystem::path& path, const std::vector<RequestResult>& results,
                   const text::BpeTokenizer* tokenizer = nullptr);

}  // namespace deepinfer::app
