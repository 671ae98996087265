// Offline generation across a deployment (every rank calls it; collective over the world):
//  - requests are shared among the prefill (or colocated) ranks, each to the rank with the fewest prompt
//    tokens so far (ties to the lower rank), in input order;
//  - prefill ranks step in lockstep (their MoE layers exchange tokens in their EP group; the role agrees each
//    step on the decode rank of every prompt just prefilled) and send each prompt's first token and latent KV
//    to that decode rank, chosen by world rank 0 as the one with the fewest active sequences, then the least
//    KV, then the lowest rank;
//  - decode ranks admit sequences as their KV arrives, step in lockstep with their EP group (idle ranks run
//    empty steps while any peer has work) and send each finished result to world rank 0;
//  - colocated ranks do both phases on their own requests;
//  - world rank 0 collects every result and, once all are in, tells the decode ranks to stop.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/comm/topology.h"
#include "src/engine/engine.h"

namespace deepinfer {

// A request's output tokens as they are generated, in order: `tokens` at output positions [first, ...).
using TokenStream = std::function<void(int64_t request_index, int64_t first, std::span<const int32_t> tokens)>;

struct SpmdGenerationOptions {
  // Every rank's engine as the job sets it (cache, prefix cache and store, replay, hashes, echo, overlap, speculation,
  // structured output); each rank's role then gives its limits (chunk, running, handoff), its expert dispatcher, and
  // to prefill ranks speculation only where they run the MTP layer over their prompts (rank_engine_options).
  EngineOptions engine;
  double timeout_s = 600.0;  // longest wait for any message or exchange
  // Streaming: every rank sends world rank 0 the tokens it generates after each step (the same on every rank);
  // rank 0 calls `on_tokens` with each request's tokens in order as they arrive, the last ones at the latest with
  // the request's result.
  bool stream_tokens = false;
  TokenStream on_tokens;  // world rank 0's
  // World rank 0's: each result as it reaches rank 0 (before generate_spmd returns them all), so that a job can
  // write it at once.
  std::function<void(const RequestResult&)> on_result;
  // World rank 0's, called every turn of its loop: true asks the run to drain — the ranks holding requests no
  // step has started drop them (they are not among the results: generate_spmd's `dropped` lists them) and the run
  // ends once the others have finished.
  std::function<bool()> on_tick;
};

// What one rank did, for the summary world rank 0 prints.
struct RankReport {
  int64_t world_rank = 0;
  int64_t role = 0;  // static_cast of Role
  int64_t steps = 0;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  int64_t moe_dispatch_bytes = 0;
  int64_t moe_combine_bytes = 0;
  int64_t handoff_bytes = 0;  // KV and tokens sent to decode ranks
  int64_t sequences = 0;      // handed off (prefill) or finished (decode, colocated)
  int64_t prefix_hit_tokens = 0;  // prompt tokens taken from the prefix cache, not computed
  int64_t prefix_store_tokens = 0;  // of them, read from the --kv-store directory
  int64_t replay_rows_below_floor = 0;    // bounded replay: prompt rows the decoder layers need not compute
  int64_t replay_skipped_layer_rows = 0;  // compact form: (row, layer) pairs dropped
  int64_t prefix_replayed_tokens = 0;     // of the hit tokens, recomputed by SWA replay (window state not stored)
  // Speculative decoding (SpeculationStats): (sequence, verify step) pairs, drafts proposed, verified, accepted.
  int64_t spec_sequence_steps = 0, spec_drafted = 0, spec_verified = 0, spec_accepted = 0;
  // Time in decode steps (us), and the device's idle time before its steps (CUDA; EngineStats::device_idle_ms).
  int64_t decode_us = 0, device_idle_steps = 0, device_idle_us = 0;
};

// Which prefill/colocated rank (index within its role) serves each request, decided alike on every rank (so world
// rank 0's routing needs no message): in order, each request goes to the rank where it costs least, a rank's cost
// being the prompt tokens routed to it so far plus this request's tokens it would compute. With the prefix cache
// on (prefix_block_size > 0), a rank that was routed a request sharing this one's leading whole blocks (matched by
// their chained hashes, as the block manager names them) computes only the rest; otherwise every rank computes it
// whole (least-loaded routing).
std::vector<int> assign_requests(const std::vector<Request>& requests, int num_ranks, int64_t prefix_block_size = 0);

// Returns every result, in input order, on world rank 0; an empty vector elsewhere. `experts` is this rank's
// expert-parallel dispatcher over its EP group. Fills `reports` (one per world rank) on world rank 0. After a drain
// (SpmdGenerationOptions::on_tick) the requests dropped have no result.
std::vector<RequestResult> generate_spmd(CausalLm& model, const Topology& topo, Communicator& ep_comm,
                                         Communicator& role_comm, ExpertDispatcher& experts,
                                         const std::vector<Request>& requests, const SpmdGenerationOptions& options,
                                         std::vector<RankReport>* reports);

// The engine a rank of `topo` generates with: its role's chunk and running limits, the prefill role's handoff,
// the EP dispatcher where its group has more than one rank, the prefix cache options, speculation where the rank
// drafts or verifies (`model`'s draft module says which).
EngineOptions rank_engine_options(const CausalLm& model, const Topology& topo, ExpertDispatcher& experts,
                                  const SpmdGenerationOptions& options);
// The same run on an engine the caller keeps, built from rank_engine_options, so that what it caches (the prefix
// cache's blocks) serves later calls too: generate's waves of continued conversations. The requests of every
// call must outlive the engine; its statistics (and so the reports) count every call so far.
std::vector<RequestResult> generate_spmd(Engine& engine, CausalLm& model, const Topology& topo,
                                         Communicator& ep_comm, Communicator& role_comm, ExpertDispatcher& experts,
                                         const std::vector<Request>& requests, const SpmdGenerationOptions& options,
                                         std::vector<RankReport>* reports);

}  // namespace deepinfer
