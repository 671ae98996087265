// The routed experts a rank holds, kept apart from the model that routes tokens to them. An MoE block hands
// its routed rows to run_routed_experts over the store (after a dispatch, under expert parallelism); EPLB
// moves experts between ranks through export_weights / import_weights / drop. Each backend stores experts
// in its own form (host fp32, device bf16); the exchange format is one: gate [I, H], up [I, H], down [H, I]
// as host fp32, one after the other (3 * I * H floats).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer {

class ExpertDispatcher;

class ExpertStore {
 public:
  struct Dims {
    int64_t num_moe_layers = 0;
    int64_t num_experts = 0;  // logical routed experts per MoE layer
    int64_t hidden = 0;
    int64_t intermediate = 0;
  };
  explicit ExpertStore(Dims dims) : dims_(dims) {}
  virtual ~ExpertStore() = default;

  int64_t num_moe_layers() const { return dims_.num_moe_layers; }
  int64_t num_experts() const { return dims_.num_experts; }
  int64_t hidden() const { return dims_.hidden; }
  int64_t intermediate() const { return dims_.intermediate; }
  int64_t expert_floats() const { return 3 * intermediate() * hidden(); }

  virtual bool holds(int64_t moe_layer, int64_t expert) const = 0;
  // out [n, hidden] = expert(x [n, hidden]), host fp32. The expert must be held.
  virtual void compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const = 0;
  virtual std::vector<float> export_weights(int64_t moe_layer, int64_t expert) const = 0;
  virtual void import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) = 0;
  // Frees an expert this rank no longer holds.
  virtual void drop(int64_t moe_layer, int64_t expert) = 0;

 protected:
  // (moe_layer, expert) as a flat index, checked against the dimensions.
  size_t index(int64_t moe_layer, int64_t expert) const;

 private:
  Dims dims_;
};

// The routed part of an MoE layer over host rows:
//   y[r] += sum over k with ids[r, k] >= 0 of weights[r, k] * expert_of(ids[r, k])(x[r])
// where expert_of(i) = expert_of_id[i], or i itself when expert_of_id is empty (ids are logical experts).
// Experts run in ascending id order, each once over all its rows, so the sum order depends only on the ids.
// pairs: y [rows, top_k, hidden] gets each entry's own output, unweighted, at (r, k) instead (weights unused).
void run_routed_experts(const ExpertStore& store, int64_t moe_layer, const float* x, const int32_t* ids,
                        const float* weights, int64_t rows, int64_t top_k, std::span<const int32_t> expert_of_id,
                        float* y, bool pairs = false);

// An MoE layer's routed part on the host, as every CPU backend runs it: out [num_tokens, hidden] += the routed
// experts' weighted outputs, over the local store, or dispatched to the group, computed there and combined.
// entry_order (--batch-invariant): each token's entries added in k order (the dispatcher's pair outputs), so that
// the bits do not depend on which ranks hold the experts; otherwise in expert order, per destination rank.
void add_routed_experts(const ExpertStore& store, ExpertDispatcher* dispatcher, int64_t moe_layer, const float* x,
                        const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, int64_t top_k,
                        float* out, bool entry_order);

}  // namespace deepinfer
