// A checkpoint read a tensor at a time (model/checkpoint_tensors.h), as the CUDA backend loads it: everything checked
// when opened, each tensor what the host store holds, the FP8 ones marked as such.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <string>

#include "src/core/check.h"
#include "src/model/checkpoint_tensors.h"
#include "src/model/deepseek/deepseek_config.h"
#include "src/model/safetensors.h"
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

// A copy of the FP8 V3 fixture with `edit` applied to its safetensors header (a same-length replacement, so the
// offsets stay valid) and, where `drop_quantization`, its config.json without quantization_config. Returns the
// InputError opening and reading it gives ("" if none).
// `data_edit`, when given, changes the file's bytes after the header edit (the tensor data).
std::string open_edited_copy(const std::string& from, const std::string& to, bool drop_quantization = false,
                             const std::function<void(std::string&)>& data_edit = nullptr) {
  const auto src = testing::fixture_dir("tiny-v3-fp8");
  // A directory of this test's own: ctest runs each test in a process of its own, side by side.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("deepinfer-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
                    std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src / "config.json"));
  if (drop_quantization) config.erase("quantization_config");
  std::ofstream(dir / "config.json") << config.dump();
  std::ifstream in(src / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(from.size(), to.size());
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  if (data_edit) data_edit(bytes);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  std::string error;
  try {
    const CheckpointTensors tensors(load_model_config(dir), dir);
    for (const std::string& name : tensors.names()) tensors.read(name);
  } catch (const InputError& e) {
    error = e.what();
  }
  std::filesystem::remove_all(dir);
  return error;
}

TEST(CheckpointTensors, ADamagedTensorIsFoundWhenOpenedBeforeAnyRead) {
  // The last layer's output projection under another name: opening names it, where a load a tensor at a time would
  // have uploaded every earlier one first.
  const std::string error =
      open_edited_copy("\"model.layers.2.self_attn.o_proj.weight\"", "\"model.layers.2.self_attn.o_proX.weight\"");
  EXPECT_NE(error.find("missing tensor 'model.layers.2.self_attn.o_proj.weight'"), std::string::npos) << error;
}

TEST(CheckpointTensors, ScalesOfTheWrongShapeAreNamedWhenOpened) {
  // An expert's gate_proj [32, 64] in 16 x 16 blocks has [2, 4] scales; transposed, the error names them, the
  // tensor and the config's blocks.
  const std::string key = "\"model.layers.1.mlp.experts.3.gate_proj.weight_scale_inv\": {\"dtype\": \"F32\", \"shape\": ";
  const std::string error = open_edited_copy(key + "[2, 4]", key + "[4, 2]");
  EXPECT_NE(error.find("the scales of 'model.layers.1.mlp.experts.3.gate_proj.weight' "
                       "('model.layers.1.mlp.experts.3.gate_proj.weight_scale_inv') are f32 [4, 2]"), std::string::npos)
      << error;
  EXPECT_NE(error.find("shape [2, 4] (a scale per 16 x 16 block (config.json's weight_block_size))"), std::string::npos)
      << error;
}

TEST(CheckpointTensors, Fp8WeightsWithScalesNeedTheirQuantizationConfig) {
  // Without quantization_config the codes would be read as values, their scales ignored: refused.
  const std::string error = open_edited_copy("\"dtype\"", "\"dtype\"", /*drop_quantization=*/true);
  EXPECT_NE(error.find("is FP8 e4m3 with scales beside it"), std::string::npos) << error;
  EXPECT_NE(error.find("config.json has no quantization_config"), std::string::npos) << error;
}

TEST(CheckpointTensors, AValueThatIsNotFiniteIsRefusedByName) {
  // The final norm's first value made NaN (in whatever form it is stored): every logit would be NaN, token 0 sampled.
  const SafetensorsFile file(testing::fixture_dir("tiny-v3-fp8") / "model.safetensors");
  const SafetensorsFile::Entry& norm = file.entries().at("model.norm.weight");
  uint64_t header = 0;
  {
    std::ifstream in(testing::fixture_dir("tiny-v3-fp8") / "model.safetensors", std::ios::binary);
    in.read(reinterpret_cast<char*>(&header), 8);
  }
  const std::string error = open_edited_copy("\"dtype\"", "\"dtype\"", false, [&](std::string& bytes) {
    const size_t at = 8 + header + norm.begin;
    if (norm.dtype == DType::kF32) bytes.replace(at, 4, std::string("\x00\x00\xc0\x7f", 4));  // a quiet NaN
    else bytes.replace(at, 2, std::string("\xc0\x7f", 2));                                 // bf16 / fp16 NaN
  });
  EXPECT_NE(error.find("tensor 'model.norm.weight' is not finite at 1 of its values (the first at index 0"),
            std::string::npos) << error;
}

}  // namespace
}  // namespace deepinfer
