#include "src/app/commands.h"

#include "src/core/check.h"

namespace deepinfer::app {

void SpeculationCliOptions::check(bool batch_invariant) const {
  DI_INPUT_CHECK(num_drafts > 0 || !variable_length, "--spec-varlen needs --nextn N (N > 0)");
  DI_INPUT_CHECK(num_drafts > 0 || reference_path.empty(), "--draft-reference needs --nextn N (N > 0)");
  DI_INPUT_CHECK(!batch_invariant || !variable_length,
                 "--batch-invariant refuses --spec-varlen: its verify lengths depend on the batch (a fixed --nextn "
                 "is allowed)");
}

}  // namespace deepinfer::app
