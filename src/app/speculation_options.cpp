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

SpeculationOptions SpeculationCliOptions::engine_options(Drafter* controlled_drafter) const {
  SpeculationOptions options;
  options.num_drafts = num_drafts;
  options.variable_length = variable_length;
  options.drafter = controlled_drafter;
  // The variable-length rule's cost line: two steps at each verify length 0..N first.
  options.cost_warmup_steps = 2 * (num_drafts + 1);
  options.verify_row_quantum = row_quantum;
  options.model_drafter = model_drafter();
  return options;
}

DecodeSpeculation SpeculationCliOptions::decode_bench() const {
  DecodeSpeculation spec;
  spec.num_drafts = num_drafts;
  spec.variable_length = variable_length;
  spec.drafter = controlled();
  spec.row_quantum = row_quantum;
  return spec;
}

}  // namespace deepinfer::app
