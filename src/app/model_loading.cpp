#include "src/app/model_loading.h"

#include "src/core/check.h"

namespace deepinfer::app {

std::unique_ptr<DeepseekModel> load_model(const ModelOptions& options) {
  const std::filesystem::path path(options.model_path);
  DI_INPUT_CHECK(std::filesystem::exists(path), "--model '{}' does not exist", path.string());
  ModelConfig config = load_model_config(path);
  WeightStore weights = WeightStore::load(config, path, parse_load_format(options.load_format), options.seed);
  return std::make_unique<DeepseekModel>(std::move(config), std::move(weights));
}

void require_single_rank(MPI_Comm world, const char* command) {
  int size = 1;
  MPI_Comm_size(world, &size);
  DI_INPUT_CHECK(size == 1, "'{}' runs on one rank for now (got {}); launch it with mpirun -np 1 or without mpirun",
                 command, size);
}

}  // namespace deepinfer::app
