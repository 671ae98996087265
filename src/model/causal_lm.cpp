#include "src/model/causal_lm.h"

#include "src/core/check.h"

namespace deepinfer {

std::vector<int32_t> CausalLm::forward_and_sample(const ForwardBatch&, KvCache&, ExpertExecutor*,
                                                  std::span<const SamplingRow>) const {
  DI_CHECK(false, "this backend samples on the host: call forward() and sample its logits");
  return {};
}

}  // namespace deepinfer
