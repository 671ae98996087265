#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <limits>

#include "src/core/error.h"
#include "src/model/model_config.h"
#include "src/model/v41/v41_config.h"

namespace deepinfer {
namespace {

nlohmann::json public_v41() {
  std::ifstream in(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs" / "models" / "deepseek-v4.1-flash.json");
  return nlohmann::json::parse(in);
}

std::string error_of(const nlohmann::json& root) {
  try {
    parse_v41_config(root, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(V41Config, ReadsThePublicConfig) {
  const V41TextConfig c = parse_v41_config(public_v41(), "deepseek-v4.1-flash.json");
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.num_nextn_predict_layers, 3);
  EXPECT_EQ(c.compress_ratios.size(), 43u);
  EXPECT_EQ(c.compress_ratios[2], 2);
  EXPECT_EQ(c.compress_ratios[20], 1);
  EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20}));
  EXPECT_EQ(c.index_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int64_t>{1, 14}));
  EXPECT_EQ(c.candidate_source_layer_id, 20);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.quantization.method, "fp8");
  EXPECT_EQ(c.quantization.block_rows, 32);
  EXPECT_EQ(c.quantization.expert_dtype, "fp4");
  // Bounded replay: the decoder layers from 20 (the first of ratio 1); the compact form drops rows from 21, past
  // layer 20, the last KV source and the candidate source (DeepInfer's consumer range starts at 20).
  EXPECT_EQ(v41_first_decoder_layer(c), 20);
  EXPECT_EQ(v41_first_compact_layer(c), 21);
}

// --num-layers: the public configuration at reduced depth keeps a layer of every kind, renumbered in order.
TEST(V41Config, ReducedDepthKeepsEveryMechanism) {
  const V41TextConfig four = parse_v41_config(v41_at_depth(public_v41(), 4, "flash"), "flash at 4");
  // Kept: 2 (pooled KV + index source), 20 (the candidate source), 24 (index source reading 20's keys), 0 (window).
  EXPECT_EQ(four.num_hidden_layers, 4);
  EXPECT_EQ(four.compress_ratios, (std::vector<int64_t>{0, 2, 1, 1, 0, 0, 0}));
  EXPECT_EQ(four.kv_source_layer_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(four.index_source_layer_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(four.candidate_source_layer_id, 2);
  EXPECT_TRUE(four.engram_layer_ids.empty());  // layers 1 and 14 not kept
  const V41TextConfig six = parse_v41_config(v41_at_depth(public_v41(), 6, "flash"), "flash at 6");
  // ... and 3 (pooled, no source), 21 (ratio 1, no source).
  EXPECT_EQ(six.compress_ratios, (std::vector<int64_t>{0, 2, 2, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(six.candidate_source_layer_id, 3);
  EXPECT_EQ(six.index_source_layer_ids, (std::vector<int64_t>{1, 3, 5}));
  const V41TextConfig all = parse_v41_config(v41_at_depth(public_v41(), 40, "flash"), "flash at 40");
  EXPECT_EQ(all.kv_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20}));
  EXPECT_EQ(all.engram_layer_ids, (std::vector<int64_t>{1, 14}));
  EXPECT_THROW(v41_at_depth(public_v41(), 41, "flash"), InputError);
}

TEST(V41Config, FillsAbsentSchedulesAsTransformersDoes) {
  nlohmann::json root = public_v41();
  auto& text = root["text_config"];
  for (const char* key :
       {"compress_ratios", "kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id"})
    text.erase(key);
  const V41TextConfig released = parse_v41_config(root, "config.json");  // 40 layers: the released schedule
  EXPECT_EQ(released.compress_ratios, parse_v41_config(public_v41(), "config.json").compress_ratios);
  EXPECT_EQ(released.kv_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20}));
  EXPECT_EQ(released.index_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(released.candidate_source_layer_id, 20);

  text["num_hidden_layers"] = 6;  // the pattern scaled: 2 window-only, 2 encoder, 2 decoder layers
  text["num_nextn_predict_layers"] = 1;
  text["engram_layer_ids"] = nlohmann::json::array();
  text["engram_num_embeddings"] = nlohmann::json::array();
  const V41TextConfig tiny = parse_v41_config(root, "config.json");
  EXPECT_EQ(tiny.compress_ratios, (std::vector<int64_t>{0, 0, 2, 2, 1, 1, 0}));
  EXPECT_EQ(tiny.kv_source_layer_ids, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(tiny.index_source_layer_ids, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(tiny.candidate_source_layer_id, 4);

  root = public_v41();
  root["text_config"]["compress_ratios"].erase(42);  // the draft layers' entries are optional (and 0)
  root["text_config"]["candidate_source_layer_id"] = -5;
  const V41TextConfig trimmed = parse_v41_config(root, "config.json");
  EXPECT_EQ(trimmed.compress_ratios.size(), 43u);
  EXPECT_EQ(trimmed.compress_ratios[42], 0);
  EXPECT_EQ(trimmed.candidate_source_layer_id, -1);
}

TEST(V41Config, NamesTheBadKey) {
  nlohmann::json root = public_v41();
  root["text_config"]["compress_ratios"] = std::vector<int64_t>(39, 1);
  EXPECT_NE(error_of(root).find("'compress_ratios' has 39 entries; it needs num_hidden_layers (40) to"),
            std::string::npos);
  root = public_v41();
  root["text_config"]["kv_source_layer_ids"] = {0, 8};
  EXPECT_NE(error_of(root).find("names layer 0, whose compress_ratio is 0 (no compressor)"), std::string::npos);
  root = public_v41();
  root["text_config"]["kv_source_layer_ids"] = {8, 14, 20};
  EXPECT_NE(error_of(root).find("names layer 2, with no KV source at or before it"), std::string::npos);
  root["text_config"]["index_source_layer_ids"] = {8, 14, 20};
  EXPECT_NE(error_of(root).find("leaves layer 2 (compress_ratio 2) with no source"), std::string::npos);
  root = public_v41();
  root["text_config"]["candidate_source_layer_id"] = 3;
  EXPECT_NE(error_of(root).find("'candidate_source_layer_id' = 3 is not one of index_source_layer_ids"),
            std::string::npos);
  root = public_v41();
  root["text_config"]["engram_num_embeddings"] = {1};
  EXPECT_NE(error_of(root).find("has 1 entries for 2 engram layers"), std::string::npos);
  root = public_v41();
  root["text_config"]["o_groups"] = 7;
  EXPECT_NE(error_of(root).find("'o_groups' must divide"), std::string::npos);
  root = public_v41();
  root["quantization_config"]["scale_fmt"] = "e8m0fnu";
  EXPECT_NE(error_of(root).find("scale_fmt 'e8m0fnu' is not supported"), std::string::npos);
  root = public_v41();
  root.erase("text_config");
  EXPECT_NE(error_of(root).find("needs a 'text_config' object"), std::string::npos);
}

// Every size is bounded before any arithmetic with it (issue #52): rows x width that would wrap int64, a vocabulary
// whose prime search would run for minutes, dimensions whose tensors no machine holds; each refused by its key.
TEST(V41Config, BoundsEverySizeBeforeArithmetic) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expected;
  };
  const int64_t two_59 = int64_t{1} << 59, two_62 = int64_t{1} << 62;
  const Case cases[] = {
      {"engram_num_embeddings", {two_59, 384016682},
       "'engram_num_embeddings' holds 576460752303423488, out of range [1, 274877906944]"},
      {"engram_num_embeddings", {two_62, two_62}, "out of range [1, 274877906944]"},
      {"engram_num_embeddings", {std::numeric_limits<int64_t>::max(), 1}, "out of range [1, 274877906944]"},
      {"engram_num_embeddings", {int64_t{1} << 31, 384016682},
       "'engram_num_embeddings' gives layer 1 2147483648 rows of engram_head_dim 256"},
      {"engram_num_embeddings", {0, 384016682}, "holds 0, out of range"},
      {"engram_vocab_size", 1000000000000000, "'engram_vocab_size' = 1000000000000000 is out of range [2, 4294967296]"},
      {"engram_vocab_size", (int64_t{1} << 61) - 1, "is out of range [2, 4294967296]"},
      {"engram_vocab_size", int64_t{1} << 32, "'engram_vocab_size' = 4294967296: engram layer 1's 24 bucket ranges"},
      {"engram_vocab_size", 16000258, "need more than the 384006168 rows its table has"},
      {"engram_layer_ids", {14, 14}, "'engram_layer_ids' names layer 14 twice"},
      {"engram_n_heads", 1024, "'engram_vocab_size' = 16000000: engram layer 1's 3072 bucket ranges"},
      {"hidden_size", int64_t{1} << 31, "'hidden_size' = 2147483648 is out of range [1, 16777216]"},
      {"vocab_size", std::numeric_limits<int32_t>::max(), "'vocab_size' = 2147483647 is out of range [1, 16777216]"},
      {"hidden_size", int64_t{1} << 24,
       "vocab_size (129280) x hidden_size (16777216) make the tensor embed.weight hold more than the 2^38"},
      {"q_lora_rank", int64_t{1} << 24,
       "num_attention_heads (64) x head_dim (512) x q_lora_rank (16777216) make the tensor attn.wq_b.weight"},
      {"o_lora_rank", int64_t{1} << 24,
       "o_lora_rank (16777216) x num_attention_heads (64) x head_dim (512) make the tensor attn.wo_a.weight"},
      {"index_topk", int64_t{1} << 20, "'index_topk' = 1048576 is out of range [1, 65536]"},
      {"max_position_embeddings", int64_t{1} << 40, "'max_position_embeddings' = 1099511627776 is out of range"},
  };
  for (const Case& test : cases) {
    nlohmann::json root = public_v41();
    root["text_config"][test.key] = test.value;
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of(root);
    EXPECT_NE(error.find(test.expected), std::string::npos) << test.key << " = " << test.value << ": " << error;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << test.key;  // no long search
  }
  // More distinct primes than allowed: 5 engram layers of 15 orders x 1024 heads.
  nlohmann::json root = public_v41();
  auto& text = root["text_config"];
  text["engram_layer_ids"] = {1, 2, 3, 4, 5};
  text["engram_num_embeddings"] = {1, 1, 1, 1, 1};
  text["engram_max_ngram_size"] = 16;
  text["engram_n_heads"] = 1024;
  EXPECT_NE(error_of(root).find("15360 bucket ranges ((engram_max_ngram_size - 1) x engram_n_heads): 76800 distinct "
                                "primes, more than the 65536 allowed"), std::string::npos)
      << error_of(root);
  // Both sides of the bounds: at 2^38 values a table is read (not allocated here), one row more is refused.
  root = public_v41();
  root["text_config"]["engram_num_embeddings"] = {int64_t{1} << 30, 384016682};
  EXPECT_EQ(error_of(root), "");
  root["text_config"]["engram_num_embeddings"] = {(int64_t{1} << 30) + 1, 384016682};
  EXPECT_NE(error_of(root).find("gives layer 1 1073741825 rows"), std::string::npos);
  root = public_v41();
  root["text_config"]["vocab_size"] = int64_t{1} << 24;
  root["text_config"]["hidden_size"] = int64_t{1} << 14;
  EXPECT_EQ(error_of(root), "");  // 2^38 values exactly
  root["text_config"]["hidden_size"] = (int64_t{1} << 14) + 1;
  EXPECT_NE(error_of(root).find("vocab_size (16777216) x hidden_size (16385) make the tensor embed.weight"),
            std::string::npos);
}

TEST(V41Config, RegistryFillsTheEngineFields) {
  const ModelConfig c = parse_model_config(public_v41().dump(), "deepseek-v4.1-flash.json");
  EXPECT_EQ(c.model_type, "deepseek_v41");
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.first_k_dense_replace, 0);  // every layer is MoE
  EXPECT_EQ(c.v41.hc_mult, 4);
  EXPECT_TRUE(c.v41.compress_yarn);
  EXPECT_DOUBLE_EQ(c.v41.yarn_factor, 16.0);
  EXPECT_EQ(c.v41.yarn_original_max_position_embeddings, 65536);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-20f);
}

// A key the config leaves out takes transformers' DeepseekV41TextConfig default, one test per key: the rope
// theta of the compressed entries is its own constant, not rope_theta.
TEST(V41Config, AbsentKeysTakeTransformersDefaults) {
  struct Case {
    const char* key;
    double expected;
    double (*read)(const V41TextConfig&);
  };
  const Case cases[] = {
      {"swiglu_limit", 10.0, [](const V41TextConfig& c) { return c.swiglu_limit; }},
      {"rms_norm_eps", 1e-20, [](const V41TextConfig& c) { return c.rms_norm_eps; }},
      {"hc_mult", 4.0, [](const V41TextConfig& c) { return static_cast<double>(c.hc_mult); }},
      {"routed_scaling_factor", 1.5, [](const V41TextConfig& c) { return c.routed_scaling_factor; }},
      {"compress_rope_theta", 160000.0, [](const V41TextConfig& c) { return c.compress_rope_theta; }},
      {"n_shared_experts", 1.0, [](const V41TextConfig& c) { return static_cast<double>(c.n_shared_experts); }},
  };
  for (const Case& test : cases) {
    nlohmann::json root = public_v41();
    auto& text = root["text_config"];
    // A value unlike the default first, so that reading the key is seen to matter.
    const bool integral = std::string(test.key) == "hc_mult" || std::string(test.key) == "n_shared_experts";
    text[test.key] = integral ? nlohmann::json(static_cast<int64_t>(test.expected * 2))
                              : nlohmann::json(test.expected * 2);
    EXPECT_DOUBLE_EQ(test.read(parse_v41_config(root, "config.json")), test.expected * 2) << test.key;
    text.erase(test.key);
    text["rope_theta"] = 12345.0;  // compress_rope_theta must not follow it
    EXPECT_DOUBLE_EQ(test.read(parse_v41_config(root, "config.json")), test.expected) << test.key;
  }
}

}  // namespace
}  // namespace deepinfer
