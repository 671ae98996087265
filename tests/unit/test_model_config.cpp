#include <gtest/gtest.h>

#include <cmath>

#include "src/core/error.h"
#include "src/model/model_config.h"
#include "src/model/rope.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

std::filesystem::path model_file(const std::string& name) {
  return std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs" / "models" / name;
}

std::string error_of(const std::string& json) {
  try {
    parse_model_config(json, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ReadsThePublicShapes) {
  const ModelConfig v2 = load_model_config(model_file("deepseek-v2-lite.json"));
  EXPECT_EQ(v2.model_type, "deepseek_v2");
  EXPECT_EQ(v2.q_lora_rank, 0);  // null: one q_proj
  EXPECT_EQ(v2.n_routed_experts, 64);
  EXPECT_EQ(v2.num_experts_per_tok, 6);
  EXPECT_EQ(v2.group_score, GroupScore::kNone);
  EXPECT_EQ(v2.kv_entry_dim(), 576);
  EXPECT_FALSE(v2.is_moe_layer(0));  // first_k_dense_replace 1
  EXPECT_TRUE(v2.is_moe_layer(1));
  EXPECT_TRUE(v2.rope.yarn);
  // mscale_all_dim 0.707 at factor 40: scale = 192^-0.5 * (0.1 * 0.707 * ln 40 + 1)^2
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(v2.softmax_scale(), m * m / std::sqrt(192.0), 1e-6);

  const ModelConfig v3 = load_model_config(model_file("deepseek-v3.json"));
  EXPECT_EQ(v3.scoring, RouterScoring::kSigmoid);
  EXPECT_EQ(v3.group_score, GroupScore::kTop2Sum);
  EXPECT_TRUE(v3.has_correction_bias);
  EXPECT_EQ(v3.n_group, 8);
  EXPECT_EQ(v3.num_nextn_predict_layers, 1);
  EXPECT_FALSE(v3.is_moe_layer(2));  // first_k_dense_replace 3
  EXPECT_TRUE(v3.is_moe_layer(3));
}

TEST(ModelConfig, ReadsTransformersRopeParameters) {
  const ModelConfig c = load_model_config(testing::fixture_dir("tiny-v3-fp32"));
  EXPECT_TRUE(c.rope.yarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 64);
  const RotaryTable table(c);
  // mscale 1.0 / mscale_all_dim 0.707 -> attention factor (0.1 ln4 + 1) / (0.0707 ln4 + 1)
  EXPECT_NEAR(table.attention_factor(), (0.1 * std::log(4.0) + 1) / (0.0707 * std::log(4.0) + 1), 1e-6);
  // The fastest frequency is extrapolated (unchanged), the slowest interpolated (divided by the factor).
  EXPECT_FLOAT_EQ(table.inv_freq().front(), 1.0f);
  EXPECT_NEAR(table.inv_freq().back(), std::pow(10000.0, -6.0 / 8.0) / 4.0, 1e-7);
}

TEST(ModelConfig, RejectsBadConfigsNamingTheKey) {
  const std::string v3 = R"({"model_type": "deepseek_v3", "vocab_size": 10, "hidden_size": 8,
      "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "kv_lora_rank": 4,
      "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 4, "max_position_embeddings": 16)";
  EXPECT_EQ(error_of(v3 + "}"), "");
  EXPECT_NE(error_of(R"({"model_type": "llama"})")
                .find("unknown model_type 'llama' (known: deepseek_v2, deepseek_v3, deepseek_v41)"),
            std::string::npos);
  EXPECT_NE(error_of(v3 + R"(, "num_hidden_layers": 0})").find("'num_hidden_layers' = 0 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of(v3 + R"(, "qk_rope_head_dim": 3})").find("'qk_rope_head_dim' must be even"), std::string::npos);
  EXPECT_NE(error_of(v3 + R"(, "n_routed_experts": 8, "moe_intermediate_size": 4, "num_experts_per_tok": 9})")
                .find("'num_experts_per_tok' = 9 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of(v3 + R"(, "n_routed_experts": 8, "moe_intermediate_size": 4, "num_experts_per_tok": 2,
      "n_group": 3})").find("does not divide"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "deepseek_v2", "vocab_size": 10})").find("'hidden_size' is missing"),
            std::string::npos);
  EXPECT_NE(error_of("{not json").find("malformed JSON"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
