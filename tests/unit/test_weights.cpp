// Loading: a missing or mis-shaped tensor is named; shards load; dummy weights are reproducible.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "src/model/architectures.h"
#include "src/model/row_shard.h"
#include "src/model/safetensors.h"
#include "src/model/weights.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

// A copy of a fixture checkpoint with `edit` applied to its tensors, in a fresh temporary directory.
std::filesystem::path edited_checkpoint(const std::string& fixture, const std::string& tag,
                                        const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  const auto src = testing::fixture_dir(fixture);
  const auto dst = std::filesystem::temp_directory_path() / ("deepinfer-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dst);
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(src / "config.json", dst / "config.json");
  const ModelConfig config = load_model_config(src);
  const SafetensorsCheckpoint checkpoint(src);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const TensorSpec& spec : find_architecture(config.model_type)->tensor_specs(config))
    tensors.emplace_back(spec.name, checkpoint.read(spec.name));
  edit(tensors);
  write_safetensors(dst / "model.safetensors", tensors);
  return dst;
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    WeightStore::load(load_model_config(dir), dir, LoadFormat::kSafetensors, 0);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Weights, RoundTripThroughOurWriterLoadsCleanly) {
  const auto dir = edited_checkpoint("tiny-v3-bf16", "same", [](auto&) {});
  EXPECT_EQ(load_error(dir), "");
  const WeightStore a = WeightStore::load(load_model_config(dir), dir, LoadFormat::kSafetensors, 0);
  const auto fixture = testing::fixture_dir("tiny-v3-bf16");  // sharded, with an index
  const WeightStore b = WeightStore::load(load_model_config(fixture), fixture, LoadFormat::kSafetensors, 0);
  const Tensor& ta = a.get("model.layers.3.shared_head.head.weight");  // an MTP tensor
  const Tensor& tb = b.get("model.layers.3.shared_head.head.weight");
  ASSERT_EQ(ta.shape(), tb.shape());
  EXPECT_EQ(std::memcmp(ta.raw_data(), tb.raw_data(), ta.nbytes()), 0);
  std::filesystem::remove_all(dir);
}

TEST(Weights, MissingTensorIsNamed) {
  const auto dir = edited_checkpoint("tiny-v3-fp32", "missing", [](auto& tensors) {
    std::erase_if(tensors, [](const auto& t) { return t.first == "model.layers.1.mlp.gate.e_score_correction_bias"; });
  });
  EXPECT_NE(load_error(dir).find("missing tensor 'model.layers.1.mlp.gate.e_score_correction_bias' (expected shape [16])"),
            std::string::npos)
      << load_error(dir);
  std::filesystem::remove_all(dir);
}

TEST(Weights, WrongShapeIsNamed) {
  const auto dir = edited_checkpoint("tiny-v2-fp32", "shape", [](auto& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "model.layers.0.self_attn.kv_b_proj.weight") tensor = Tensor::zeros({8, 8});
  });
  EXPECT_NE(load_error(dir).find("tensor 'model.layers.0.self_attn.kv_b_proj.weight' has shape [8, 8], expected [128, 32]"),
            std::string::npos)
      << load_error(dir);
  std::filesystem::remove_all(dir);
}

TEST(Weights, DummyWeightsAreSeededAndShaped) {
  const Tensor a = make_dummy_tensor("model.layers.0.mlp.up_proj.weight", {64, 256}, 7);
  const Tensor b = make_dummy_tensor("model.layers.0.mlp.up_proj.weight", {64, 256}, 7);
  const Tensor c = make_dummy_tensor("model.layers.0.mlp.up_proj.weight", {64, 256}, 8);
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
  EXPECT_NE(std::memcmp(a.raw_data(), c.raw_data(), a.nbytes()), 0);
  double sum_sq = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) sum_sq += a.data<float>()[i] * a.data<float>()[i];
  EXPECT_NEAR(sum_sq / a.numel(), 1.0 / 256.0, 0.1 / 256.0);  // N(0, 1/fan_in)
  const Tensor norm = make_dummy_tensor("model.norm.weight", {4096}, 7);
  double mean = 0.0;
  for (int64_t i = 0; i < norm.numel(); ++i) mean += norm.data<float>()[i];
  EXPECT_NEAR(mean / norm.numel(), 1.0, 0.02);
}

TEST(Weights, ConfigFileNeedsDummyFormat) {
  const auto config_file = std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json";
  const ModelConfig config = load_model_config(config_file);
  EXPECT_THROW(WeightStore::load(config, config_file, LoadFormat::kSafetensors, 0), InputError);
  const WeightStore store = WeightStore::load(config, config_file, LoadFormat::kAuto, 0);  // auto: dummy
  EXPECT_GT(store.num_parameters(), 1000);
}

TEST(Weights, IntegerTensorIsRefusedByName) {
  const auto dir = edited_checkpoint("tiny-v2-fp32", "int32", [](auto& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "model.norm.weight") tensor = Tensor::zeros(tensor.shape(), DType::kI32);
  });
  EXPECT_NE(load_error(dir).find("tensor 'model.norm.weight' is stored as i32; the model needs floating point"),
            std::string::npos)
      << load_error(dir);
  std::filesystem::remove_all(dir);
}

// transformers saves DeepSeek-V3 with num_nextn_predict_layers = 1 but without the MTP layer's tensors.
TEST(Weights, CheckpointWithoutMtpTensorsLoadsTheMainModel) {
  const ModelConfig config = load_model_config(testing::fixture_dir("tiny-v3-bf16"));
  ASSERT_EQ(config.num_nextn_predict_layers, 1);
  const std::string mtp_prefix = fmt::format("model.layers.{}.", config.num_hidden_layers);
  const auto dir = edited_checkpoint("tiny-v3-bf16", "no-mtp", [&](auto& tensors) {
    std::erase_if(tensors, [&](const auto& t) { return t.first.starts_with(mtp_prefix); });
  });
  EXPECT_EQ(load_error(dir), "");
  const WeightStore stripped = WeightStore::load(load_model_config(dir), dir, LoadFormat::kSafetensors, 0);
  const auto fixture = testing::fixture_dir("tiny-v3-bf16");
  const WeightStore full = WeightStore::load(config, fixture, LoadFormat::kSafetensors, 0);
  EXPECT_EQ(stripped.data_or_null(mtp_prefix + "eh_proj.weight"), nullptr);
  EXPECT_NE(full.data_or_null(mtp_prefix + "eh_proj.weight"), nullptr);
  int64_t main_tensors = 0;
  for (const TensorSpec& spec : find_architecture(config.model_type)->tensor_specs(config)) {
    if (spec.name.starts_with(mtp_prefix)) continue;
    ++main_tensors;
    const Tensor& a = stripped.get(spec.name);
    const Tensor& b = full.get(spec.name);
    ASSERT_EQ(a.shape(), b.shape()) << spec.name;
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << spec.name;
  }
  EXPECT_EQ(static_cast<int64_t>(stripped.num_tensors()), main_tensors);
  std::filesystem::remove_all(dir);
}

TEST(Weights, HalfAnMtpLayerIsADamagedCheckpoint) {
  const ModelConfig config = load_model_config(testing::fixture_dir("tiny-v3-bf16"));
  const std::string missing = fmt::format("model.layers.{}.eh_proj.weight", config.num_hidden_layers);
  const auto dir = edited_checkpoint("tiny-v3-bf16", "half-mtp", [&](auto& tensors) {
    std::erase_if(tensors, [&](const auto& t) { return t.first == missing; });
  });
  EXPECT_NE(load_error(dir).find("missing tensor '" + missing + "'"), std::string::npos) << load_error(dir);
  std::filesystem::remove_all(dir);
}

// A shard that is a directory or a named pipe is refused by name, at once (a pipe nobody writes would block).
TEST(Weights, ShardThatIsNotARegularFileIsRefused) {
  const auto src = testing::fixture_dir("tiny-v2-fp32");
  for (const char* kind : {"directory", "named pipe"}) {
    const auto dir = std::filesystem::temp_directory_path() / fmt::format("deepinfer-shard-{}-{}", ::getpid(),
                                                                         kind[0]);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(src / "config.json", dir / "config.json");
    if (kind[0] == 'd') std::filesystem::create_directory(dir / "model.safetensors");
    else ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
    EXPECT_NE(load_error(dir).find(fmt::format("is not a regular file ({})", kind == std::string("directory")
                                                                                 ? "a directory" : "a named pipe")),
              std::string::npos)
        << load_error(dir);
    std::filesystem::remove_all(dir);
  }
}

// A table split across ranks (model/row_shard.h): the parts cover the rows once, each row's holder is its owner.
TEST(Weights, RowShardPartsCoverEveryRowOnce) {
  for (const int64_t rows : {int64_t{1}, int64_t{7}, int64_t{4078}, int64_t{384006168}}) {
    for (const int64_t parts : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{64}}) {
      int64_t next = 0;
      for (int64_t p = 0; p < parts; ++p) {
        const RowShard shard{p, parts};
        EXPECT_EQ(shard.first(rows), next) << rows << " rows, part " << p << " of " << parts;
        if (shard.count(rows) > 0) {
          EXPECT_EQ(shard.owner(shard.first(rows), rows), p);
          EXPECT_EQ(shard.owner(shard.first(rows) + shard.count(rows) - 1, rows), p);
        }
        next += shard.count(rows);
      }
      EXPECT_EQ(next, rows);
    }
  }
}

// Each rank loads only its part of the engram tables, and those rows are the whole table's, for the FP8
// checkpoint (codes and scales read by rows) and for dummy weights.
TEST(Weights, EngramTablePartsAreTheWholeTablesRows) {
  const std::string table = "layers.1.engram.embed.weight";
  for (const bool dummy : {false, true}) {
    const auto dir = testing::fixture_dir("tiny-v41-engram-fp8");
    const LoadFormat format = dummy ? LoadFormat::kDummy : LoadFormat::kSafetensors;
    ModelConfig config = load_model_config(dir);
    const Tensor whole = WeightStore::load(config, dir, format, 5).take(table);
    const int64_t rows = whole.size(0), dim = whole.numel() / rows;
    for (int64_t p = 0; p < 3; ++p) {
      config.v41.engram_shard = {p, 3};
      WeightStore part_store = WeightStore::load(config, dir, format, 5);
      const Tensor part = part_store.take(table);
      const int64_t first = config.v41.engram_shard.first(rows), count = config.v41.engram_shard.count(rows);
      ASSERT_EQ(part.shape(), (Shape{count, dim})) << "part " << p;
      EXPECT_EQ(std::memcmp(part.raw_data(), whole.data<float>() + first * dim, part.nbytes()), 0)
          << (dummy ? "dummy" : "checkpoint") << " part " << p;
      EXPECT_EQ(part_store.get("embed.weight").numel(), WeightStore::load(config, dir, format, 5).get("embed.weight").numel());
    }
  }
}

}  // namespace
}  // namespace deepinfer
