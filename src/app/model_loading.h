// Loading the model named by --model/--load-format/--seed, shared by the commands that run one.
#pragma once

#include <memory>

#include "src/app/commands.h"
#include "src/model/deepseek_model.h"

namespace deepinfer::app {

std::unique_ptr<DeepseekModel> load_model(const ModelOptions& options);

// Commands that do not yet run across ranks say so instead of silently running N copies.
void require_single_rank(MPI_Comm world, const char* command);

}  // namespace deepinfer::app
