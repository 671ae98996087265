// The transformers-written checkpoints under tests/fixtures/ and their reference outputs.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace deepinfer::testing {

inline std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests" / "fixtures" / name;
}

inline const std::vector<std::string>& all_fixtures() {
  static const std::vector<std::string> kNames = {"tiny-v3-fp32", "tiny-v3-bf16", "tiny-v2-fp32", "tiny-v2-bf16"};
  return kNames;
}

inline nlohmann::json fixture_reference(const std::string& name) {
  std::ifstream in(fixture_dir(name) / "reference.json");
  return nlohmann::json::parse(in);
}

}  // namespace deepinfer::testing
