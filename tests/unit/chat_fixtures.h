// What the chat tests share about deepseek-recipe's fixtures (tests/fixtures/chat, written by the make_*.py
// scripts there): the V4.1 tokenizer both implementations were given, and stream events in the fixtures' form.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/core/files.h"
#include "src/text/stream_parser.h"

namespace deepinfer::testing {

// The V4 tokenizer.json at `v4` with V4.1's <｜System｜> appended at `id` (as make_chat_fixtures.encodings() gave
// recipe's V4.1 encoding), written to a temporary file named by `name`; returns its path.
inline std::filesystem::path write_v41_tokenizer(const std::filesystem::path& v4, int32_t id, const std::string& name) {
  nlohmann::json spec = nlohmann::json::parse(read_text_file(v4, "tokenizer"));
  spec["added_tokens"].push_back({{"id", id}, {"content", "<｜System｜>"}, {"single_word", false}, {"lstrip", false},
                                  {"rstrip", false}, {"normalized", false}, {"special", true}});
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << spec.dump();
  return path;
}

// An event as the fixtures write it: [token index (-1: the finish), content, reasoning, finish reason].
inline nlohmann::json event_fixture(int64_t index, const text::StreamEvent& e) {
  const bool reasoning = e.channel == text::StreamEvent::Channel::kReasoning;
  return {index, reasoning ? nlohmann::json() : nlohmann::json(e.text),
          reasoning ? nlohmann::json(e.text) : nlohmann::json(),
          e.finish_reason.empty() ? nlohmann::json() : nlohmann::json(e.finish_reason)};
}

// With tools the fixtures' events carry a fifth field, [call index, name or null, arguments piece or null].
inline nlohmann::json tool_event_fixture(int64_t index, const text::StreamEvent& e) {
  if (e.channel != text::StreamEvent::Channel::kToolCall) {
    nlohmann::json j = event_fixture(index, e);
    j.push_back(nullptr);
    return j;
  }
  return {index, nullptr, nullptr, nullptr,
          {e.call_index, e.call_start ? nlohmann::json(e.text) : nlohmann::json(),
           e.call_start ? nlohmann::json("") : nlohmann::json(e.text)}};
}

}  // namespace deepinfer::testing
