// A checkpoint read a tensor at a time (model/checkpoint_tensors.h), as the CUDA backend loads it: everything checked
// when opened, each tensor what the host store holds, the FP8 ones marked as such.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "src/core/check.h"
#include "src/model/checkpoint_tensors.h"
#include "src/model/deepseek/deepseek_config.h"
#include "src/model/weights.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

TEST(CheckpointTensors, EachTensorIsWhatTheHostStoreHolds) {
  for (const char* fixture : {"tiny-v2-bf16", "tiny-v3-fp8", "tiny-v41-fp8", "tiny-v41-engram-fp8", "tiny-v41-dspark"}) {
    const auto dir = testing::fixture_dir(fixture);
    ModelConfig config = load_model_config(dir);
    if (std::string(fixture) == "tiny-v41-engram-fp8") config.v41.engram_shard = {1, 2};  // a rank's rows of the tables
    const CheckpointTensors tensors(config, dir);
    const WeightStore store = WeightStore::load(config, dir, LoadFormat::kSafetensors, 0);
    ASSERT_EQ(tensors.names().size(), store.num_tensors()) << fixture;
    for (const std::string& name : tensors.names()) {
      const Tensor t = tensors.read(name);
      const Tensor& want = store.get(name);
      ASSERT_EQ(t.shape(), want.shape()) << fixture << " " << name;
      EXPECT_EQ(std::memcmp(t.raw_data(), want.raw_data(), want.nbytes()), 0) << fixture << " " << name;
      EXPECT_EQ(tensors.stored_fp8(name), store.stored_as_fp8(name)) << fixture << " " << name;
    }
  }
}

TEST(CheckpointTensors, MarksTheFp8BlocksAndReadsOnlyWhatTheRankWants) {
  const auto dir = testing::fixture_dir("tiny-v3-fp8");
  const ModelConfig config = load_model_config(dir);
  // Layer 1's experts 0-7 only, as an EP rank holding half of them.
  const CheckpointTensors tensors(config, dir, [](const std::string& name) {
    const auto expert = deepseek_routed_expert(name);  // (layer, expert)
    return !expert || (expert->first == 1 && expert->second < 8);
  });
  EXPECT_TRUE(tensors.has("model.layers.1.mlp.experts.3.up_proj.weight"));
  EXPECT_FALSE(tensors.has("model.layers.1.mlp.experts.12.up_proj.weight"));
  EXPECT_FALSE(tensors.has("model.layers.2.mlp.experts.3.up_proj.weight"));
  // The fixture quantises every Linear weight whose sides are multiples of its 16 x 16 blocks.
  EXPECT_TRUE(tensors.stored_fp8("model.layers.1.self_attn.q_b_proj.weight"));
  EXPECT_TRUE(tensors.stored_fp8("model.layers.1.mlp.experts.3.up_proj.weight"));
  EXPECT_FALSE(tensors.stored_fp8("model.layers.1.self_attn.kv_a_proj_with_mqa.weight"));  // 40 rows: kept bf16
  EXPECT_FALSE(tensors.stored_fp8("model.embed_tokens.weight"));
  EXPECT_THROW(tensors.read("model.layers.1.mlp.experts.12.up_proj.weight"), Error);
}

TEST(CheckpointTensors, ADamagedTensorIsFoundWhenOpenedBeforeAnyRead) {
  // A copy of the FP8 fixture whose last layer's output projection goes by another name (the header's key edited
  // in place): opening it names the tensor, where a load a tensor at a time would have uploaded every earlier one.
  const auto src = testing::fixture_dir("tiny-v3-fp8");
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer-checkpoint-tensors-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src / "config.json", dir / "config.json");
  std::ifstream in(src / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"model.layers.2.self_attn.o_proj.weight\"";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, key.size(), "\"model.layers.2.self_attn.o_proX.weight\"");
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  const ModelConfig config = load_model_config(dir);
  try {
    const CheckpointTensors tensors(config, dir);
    ADD_FAILURE() << "opened a checkpoint that lacks a tensor";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.layers.2.self_attn.o_proj.weight'"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
