#include "src/app/jsonl.h"

#include <fstream>
#include <set>

#include "src/core/check.h"

namespace deepinfer::app {

namespace {

Request parse_request(const nlohmann::json& line, const std::string& where, int64_t line_idx) {
  DI_INPUT_CHECK(line.is_object(), "{}: a request must be a JSON object", where);
  static const std::set<std::string> kKeys = {"id", "prompt_token_ids", "max_new_tokens", "temperature",
                                              "top_p", "top_k", "seed", "stop_token_ids"};
  for (const auto& [key, value] : line.items())
    DI_INPUT_CHECK(kKeys.contains(key), "{}: unknown key '{}'", where, key);
  Request r;
  r.index = line_idx;
  r.id = line.contains("id") ? line["id"] : nlohmann::json(line_idx);
  DI_INPUT_CHECK(line.contains("prompt_token_ids") && line["prompt_token_ids"].is_array(),
                 "{}: 'prompt_token_ids' must be an array of token ids", where);
  for (const auto& token : line["prompt_token_ids"]) {
    DI_INPUT_CHECK(token.is_number_integer(), "{}: 'prompt_token_ids' holds a non-integer {}", where, token.dump());
    r.prompt_token_ids.push_back(token.get<int32_t>());
  }
  DI_INPUT_CHECK(line.contains("max_new_tokens") && line["max_new_tokens"].is_number_integer() &&
                     line["max_new_tokens"].get<int64_t>() >= 1,
                 "{}: 'max_new_tokens' must be an integer >= 1", where);
  r.max_new_tokens = line["max_new_tokens"].get<int64_t>();
  auto number = [&](const char* key, double min, double max, double fallback) {
    if (!line.contains(key) || line[key].is_null()) return fallback;
    DI_INPUT_CHECK(line[key].is_number(), "{}: '{}' must be a number", where, key);
    const double v = line[key].get<double>();
    DI_INPUT_CHECK(v >= min && v <= max, "{}: '{}' = {} is out of range [{}, {}]", where, key, v, min, max);
    return v;
  };
  r.sampling.temperature = static_cast<float>(number("temperature", 0.0, 100.0, 0.0));
  r.sampling.top_p = static_cast<float>(number("top_p", 1e-6, 1.0, 1.0));
  r.sampling.top_k = static_cast<int64_t>(number("top_k", 0, 1e9, 0));
  r.sampling.seed = static_cast<uint64_t>(number("seed", 0, 9.0e15, static_cast<double>(line_idx)));
  if (line.contains("stop_token_ids")) {
    DI_INPUT_CHECK(line["stop_token_ids"].is_array(), "{}: 'stop_token_ids' must be an array", where);
    for (const auto& token : line["stop_token_ids"]) {
      DI_INPUT_CHECK(token.is_number_integer(), "{}: 'stop_token_ids' holds a non-integer", where);
      r.sampling.stop_token_ids.push_back(token.get<int32_t>());
    }
  }
  return r;
}

}  // namespace

std::vector<Request> read_requests(const std::filesystem::path& path) {
  std::ifstream in(path);
  DI_INPUT_CHECK(in.good(), "cannot open input '{}'", path.string());
  std::vector<Request> requests;
  std::string text;
  int64_t line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    const std::string where = fmt::format("{}:{}", path.string(), line_number);
    nlohmann::json line;
    try {
      line = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: malformed JSON: {}", where, e.what()));
    }
    requests.push_back(parse_request(line, where, static_cast<int64_t>(requests.size())));
  }
  DI_INPUT_CHECK(!requests.empty(), "{}: no requests", path.string());
  return requests;
}

void write_results(const std::filesystem::path& path, const std::vector<RequestResult>& results) {
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    DI_INPUT_CHECK(out.good(), "cannot write '{}'", tmp);
    for (const RequestResult& r : results) {
      nlohmann::json line = result_to_json(r);
      line.erase("index");
      out << line.dump() << '\n';
    }
    DI_CHECK(out.good(), "writing '{}' failed", tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace deepinfer::app
