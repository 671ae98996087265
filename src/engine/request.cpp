#include "src/engine/request.h"

#include "src/core/check.h"

namespace deepinfer {

FinishReason parse_finish_reason(const std::string& name) {
  if (name == "stop") return FinishReason::kStop;
  if (name == "length") return FinishReason::kLength;
  DI_CHECK(name == "none", "unknown finish reason '{}'", name);
  return FinishReason::kNone;
}

const char* OutputConstraint::kind_name() const {
  switch (kind) {
    case Kind::kJsonSchema: return "json_schema";
    case Kind::kJsonObject: return "json_object";
    case Kind::kRegex: return "regex";
    case Kind::kEbnf: return "ebnf";
    case Kind::kTokens: return "forced_output_token_ids";
  }
  return "?";
}

nlohmann::json result_to_json(const RequestResult& r) {
  nlohmann::json json = {{"index", r.index},
                         {"id", r.id},
                         {"output_token_ids", r.output_token_ids},
                         {"finish_reason", finish_reason_name(r.finish_reason)},
                         {"prompt_tokens", r.prompt_tokens},
                         {"output_tokens", r.output_token_ids.size()}};
  if (r.constraint_satisfied) json["constraint_satisfied"] = *r.constraint_satisfied;
  if (r.failure) json["error"] = {{"code", r.failure->code}, {"message", r.failure->message}};
  if (!r.prompt_token_ids.empty()) json["prompt_token_ids"] = r.prompt_token_ids;
  if (!r.logits_hashes.empty()) {  // as 16 hex digits (JSON numbers lose 64-bit integers in most readers)
    std::vector<std::string> hex;
    for (uint64_t h : r.logits_hashes) hex.push_back(fmt::format("{:016x}", h));
    json["logits_hashes"] = hex;
  }
  return json;
}

RequestResult result_from_json(const nlohmann::json& json) {
  RequestResult r;
  r.index = json.at("index").get<int64_t>();
  r.id = json.at("id");
  r.output_token_ids = json.at("output_token_ids").get<std::vector<int32_t>>();
  r.finish_reason = parse_finish_reason(json.at("finish_reason").get<std::string>());
  r.prompt_tokens = json.at("prompt_tokens").get<int64_t>();
  if (json.contains("constraint_satisfied")) r.constraint_satisfied = json.at("constraint_satisfied").get<bool>();
  if (json.contains("prompt_token_ids")) r.prompt_token_ids = json.at("prompt_token_ids").get<std::vector<int32_t>>();
  if (json.contains("error"))
    r.failure = RequestFailure{json.at("error").at("code").get<std::string>(),
                               json.at("error").at("message").get<std::string>()};
  if (json.contains("logits_hashes"))
    for (const auto& hex : json.at("logits_hashes")) r.logits_hashes.push_back(std::stoull(hex.get<std::string>(), nullptr, 16));
  return r;
}

}  // namespace deepinfer
