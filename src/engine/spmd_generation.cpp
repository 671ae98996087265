#include "src/engine/spmd_generation.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <list>
#include <map>
#include <span>
#include <unordered_map>
#include <thread>

#include "src/comm/mailbox.h"
#include "src/engine/block_manager.h"
#include "src/comm/mpi_util.h"
#include "src/moe/expert_parallel.h"

namespace deepinfer {

namespace {

// Tags of the point-to-point messages on the world communicator.
constexpr int kTagHandoffHeader = 101;  // int64 [request_index, num_tokens, num_kv_floats, num_logits_hashes]
constexpr int kTagHandoffTokens = 102;  // int32 tokens
constexpr int kTagHandoffKv = 103;      // float latent KV
constexpr int kTagHandoffHashes = 104;  // uint64 (as int64) logits fingerprints (--logits-hashes), when there are any
constexpr int kTagResult = 201;         // JSON text of a RequestResult
constexpr int kTagDone = 301;           // world rank 0 -> decode ranks: every result is in
constexpr int kTagTokens = 401;         // int64 [request, first, count, tokens...]... of one step (streaming)
constexpr int kTagDrain = 501;          // world rank 0 -> ranks that take requests: drop those not started
constexpr int kTagDropped = 502;        // int64 request indices a rank dropped (possibly none) -> world rank 0

using Clock = std::chrono::steady_clock;

void send_result(const RequestResult& result, Mailbox& mail) {
  auto text = std::make_shared<std::string>(result_to_json(result).dump());
  mail.post(text, text->data(), static_cast<int64_t>(text->size()), DType::kU8, 0, kTagResult);
}

// World rank 0's view of the results and of the decode ranks' load.
class ResultCollector {
 public:
  ResultCollector(Mailbox& mail, int64_t num_requests, int num_decode_ranks,
                  std::function<void(const RequestResult&)> on_result)
      : mail_(mail), results_(num_requests), have_(num_requests, false), active_(num_decode_ranks, 0),
        kv_(num_decode_ranks, 0), on_result_(std::move(on_result)) {}

  void add(RequestResult result) {
    DI_CHECK(result.index >= 0 && result.index < static_cast<int64_t>(results_.size()) && !have_[result.index],
             "unexpected result for request {}", result.index);
    if (auto it = assigned_.find(result.index); it != assigned_.end()) {
      --active_[it->second.first];
      kv_[it->second.first] -= it->second.second;
      assigned_.erase(it);
    }
    have_[result.index] = true;
    ++num_done_;
    if (on_result_) on_result_(result);
    results_[result.index] = std::move(result);
  }
  // A request dropped by a drain: done, without a result.
  void drop(int64_t index) {
    DI_CHECK(index >= 0 && index < static_cast<int64_t>(results_.size()) && !have_[index],
             "unexpected drop of request {}", index);
    have_[index] = true;
    dropped_[index] = true;
    ++num_done_;
  }
  // Receives every result message, and every drain report, that has arrived.
  void poll() {
    while (const std::optional<Mailbox::Arrival> arrival = mail_.probe(kTagResult, DType::kU8)) {
      std::string text(arrival->count, '\0');
      mail_.receive(text.data(), arrival->count, DType::kU8, arrival->source, kTagResult, "a result");
      add(result_from_json(nlohmann::json::parse(text)));
      last_progress_ = Clock::now();
    }
    while (const std::optional<Mailbox::Arrival> arrival = mail_.probe(kTagDropped, DType::kI64)) {
      std::vector<int64_t> indices(arrival->count);
      mail_.receive(indices.data(), arrival->count, DType::kI64, arrival->source, kTagDropped, "dropped requests");
      for (int64_t index : indices) drop(index);
      last_progress_ = Clock::now();
    }
  }
  // The decode rank (index within the decode role) for a prompt of `kv_tokens` tokens.
  int assign(int64_t request_index, int64_t kv_tokens) {
    int best = 0;
    for (int d = 1; d < static_cast<int>(active_.size()); ++d)
      if (active_[d] < active_[best] || (active_[d] == active_[best] && kv_[d] < kv_[best])) best = d;
    ++active_[best];
    kv_[best] += kv_tokens;
    assigned_[request_index] = {best, kv_tokens};
    return best;
  }
  bool complete() const { return num_done_ == static_cast<int64_t>(results_.size()); }
  void wait_complete(double timeout_s, const std::function<void()>& tick) {
    last_progress_ = Clock::now();
    while (!complete()) {
      poll();
      tick();
      if (std::chrono::duration<double>(Clock::now() - last_progress_).count() > timeout_s) {
        spdlog::error("world rank 0 waited {:.0f} s for the results of {} more requests; aborting", timeout_s,
                      results_.size() - num_done_);
        abort_job(kExitRuntimeError);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // The results, in input order, less the requests dropped.
  std::vector<RequestResult> take() {
    std::vector<RequestResult> results;
    for (size_t i = 0; i < results_.size(); ++i)
      if (!dropped_.contains(static_cast<int64_t>(i))) results.push_back(std::move(results_[i]));
    return results;
  }

 private:
  Mailbox& mail_;
  std::vector<RequestResult> results_;
  std::vector<bool> have_;
  std::map<int64_t, bool> dropped_;
  int64_t num_done_ = 0;
  std::vector<int64_t> active_;
  std::vector<int64_t> kv_;
  std::map<int64_t, std::pair<int, int64_t>> assigned_;
  Clock::time_point last_progress_ = Clock::now();
  std::function<void(const RequestResult&)> on_result_;
};

// A drain, world rank 0's word that no more requests start: rank 0 sends it to every rank that takes requests
// (prefill or colocated); each drops the requests it holds that no step has started and tells rank 0 which. Decode
// ranks keep what was handed to them (started work), and the run ends when the rest has finished.
class Drain {
 public:
  Drain(const Topology& topo, Mailbox& mail, std::function<bool()> on_tick)
      : takes_requests_(topo.role() != Role::kDecode), mail_(mail), on_tick_(std::move(on_tick)) {
    const RoleSpec& first = topo.deployment().roles[0];  // the prefill role, or the colocated one
    num_request_ranks_ = first.role == Role::kDecode ? 0 : first.num_ranks;
  }
  // Every turn of a rank's loop, before it steps.
  void poll(Engine& engine, bool is_root) {
    bool now = false;
    if (is_root) {
      now = on_tick_ && on_tick_() && !done_;  // (the tick runs every turn: it also reports progress)
      if (now)
        for (int r = 1; r < num_request_ranks_; ++r) {
          auto word = std::make_shared<int64_t>(1);
          mail_.post(word, word.get(), 1, DType::kI64, r, kTagDrain);
        }
    } else if (!done_ && takes_requests_ && mail_.probe(kTagDrain, DType::kI64, 0)) {
      int64_t word = 0;
      mail_.receive(&word, 1, DType::kI64, 0, kTagDrain, "the drain signal");
      now = true;
    }
    if (!now) return;
    done_ = true;
    if (!takes_requests_) return;
    auto dropped = std::make_shared<std::vector<int64_t>>(engine.drop_unstarted());
    spdlog::info("world rank {}: draining: {} requests not started are dropped", mail_.rank(), dropped->size());
    mail_.post(dropped, dropped->data(), static_cast<int64_t>(dropped->size()), DType::kI64, 0, kTagDropped);
  }

 private:
  bool takes_requests_;
  Mailbox& mail_;
  std::function<bool()> on_tick_;
  int num_request_ranks_ = 0;
  bool done_ = false;
};

// World rank 0's streaming: token updates from any rank, passed on in each request's order (a piece that
// arrives ahead of one before it waits; positions already passed on are dropped: a prefill rank and the decode
// rank both report the first token).
class TokenCollector {
 public:
  TokenCollector(Mailbox& mail, int64_t num_requests, TokenStream on_tokens)
      : mail_(mail), next_(num_requests, 0), pending_(num_requests), on_tokens_(std::move(on_tokens)) {}

  void add(const TokenUpdate& u) {
    DI_CHECK(u.request_index >= 0 && u.request_index < static_cast<int64_t>(next_.size()),
             "a token update for request {}", u.request_index);
    pending_[u.request_index][u.first] = u.tokens;
    auto& waiting = pending_[u.request_index];
    int64_t& next = next_[u.request_index];
    for (auto it = waiting.begin(); it != waiting.end() && it->first <= next; it = waiting.erase(it)) {
      const int64_t end = it->first + static_cast<int64_t>(it->second.size());
      if (end <= next) continue;
      const std::span<const int32_t> fresh(it->second.data() + (next - it->first), static_cast<size_t>(end - next));
      on_tokens_(u.request_index, next, fresh);
      next = end;
    }
  }
  void poll() {
    while (const std::optional<Mailbox::Arrival> arrival = mail_.probe(kTagTokens, DType::kI64)) {
      std::vector<int64_t> words(arrival->count);
      mail_.receive(words.data(), arrival->count, DType::kI64, arrival->source, kTagTokens, "streamed tokens");
      if (words.size() == 1 && words[0] == kStreamEnd) {
        ++ends_;
        continue;
      }
      for (size_t at = 0; at + 3 <= words.size();) {
        TokenUpdate u{words[at], words[at + 1], {}};
        const auto count = static_cast<size_t>(words[at + 2]);
        for (size_t k = 0; k < count; ++k) u.tokens.push_back(static_cast<int32_t>(words[at + 3 + k]));
        at += 3 + count;
        add(u);
      }
    }
  }
  // Every other rank's last message says it streams no more (after all its others: one tag, one order).
  void wait_for_ends(int senders, double timeout_s) {
    const auto start = Clock::now();
    while (ends_ < senders) {
      poll();
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
        spdlog::error("world rank 0 waited {:.0f} s for the token streams of {} more ranks; aborting", timeout_s,
                      senders - ends_);
        abort_job(kExitRuntimeError);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // Once every result is in: what the messages have not brought yet comes from the results.
  void finish(const std::vector<RequestResult>& results) {
    for (const RequestResult& r : results) add({r.index, 0, r.output_token_ids});
  }
  static constexpr int64_t kStreamEnd = -1;

 private:
  Mailbox& mail_;
  std::vector<int64_t> next_;
  std::vector<std::map<int64_t, std::vector<int32_t>>> pending_;
  TokenStream on_tokens_;
  int ends_ = 0;
};

// After a step, the tokens it generated: to the collector on world rank 0, by one message elsewhere.
void stream_tokens(Engine& engine, TokenCollector* tokens, Mailbox& mail) {
  std::vector<TokenUpdate> updates = engine.take_new_tokens();
  if (updates.empty()) return;
  if (tokens != nullptr) {
    for (const TokenUpdate& u : updates) tokens->add(u);
    return;
  }
  auto words = std::make_shared<std::vector<int64_t>>();
  for (const TokenUpdate& u : updates) {
    words->insert(words->end(), {u.request_index, u.first, static_cast<int64_t>(u.tokens.size())});
    words->insert(words->end(), u.tokens.begin(), u.tokens.end());
  }
  mail.post(words, words->data(), static_cast<int64_t>(words->size()), DType::kI64, 0, kTagTokens);
}

// Results go to world rank 0: straight into the collector there, by message elsewhere.
void deliver(std::vector<RequestResult> results, ResultCollector* collector, Mailbox& mail) {
  for (RequestResult& r : results) {
    if (collector != nullptr) collector->add(std::move(r));
    else send_result(r, mail);
  }
}

// Fault injection for the tests: DEEPINFER_FAULT_EXIT_RANK=R makes world rank R die after its first step, the
// way a crashed process does (no finalize), to check that the job ends instead of hanging.
void maybe_die_for_test(int rank, int64_t steps_done) {
  const char* victim = std::getenv("DEEPINFER_FAULT_EXIT_RANK");
  if (victim == nullptr || steps_done != 1 || std::atoi(victim) != rank) return;
  spdlog::error("fault injection: world rank {} exits abruptly (DEEPINFER_FAULT_EXIT_RANK)", rank);
  spdlog::default_logger()->flush();
  std::_Exit(3);
}

int64_t agree_max(Communicator& comm, int64_t value, const char* what) {
  comm.all_reduce_max(&value, 1, DType::kI64, what);
  return value;
}

// What a role adds to the one loop every rank runs (run_role_loop): what comes in before a step, how the ranks
// it steps with agree whether to step and when to stop, and what goes out after the step. The collectives a
// policy calls happen in the same order on every rank of its group, step after step.
class RolePolicy {
 public:
  struct Turn {
    bool step = false;  // run Engine::step() now (a rank with no work of its own still joins its group's step)
    bool done = false;  // every rank this one waits for is finished: leave the loop
  };
  virtual ~RolePolicy() = default;
  virtual void take_in(Engine&) {}
  virtual Turn agree(const Engine& engine) = 0;
  virtual void hand_out(Engine&) {}
  virtual void idle() {}
};

// Prefill: the EP group steps while any of its ranks has a prompt; the role ends when none has. After each step
// the role agrees where its prefilled prompts go (world rank 0 decides, everyone learns) and sends their KV.
class PrefillPolicy final : public RolePolicy {
 public:
  PrefillPolicy(const Topology& topo, Communicator& ep_comm, Communicator& role_comm, ResultCollector* collector,
                Mailbox& mail, RankReport& report)
      : first_decode_rank_(topo.deployment().roles[0].num_ranks), ep_comm_(ep_comm), role_comm_(role_comm),
        collector_(collector), mail_(mail), report_(report) {}

  Turn agree(const Engine& engine) override {
    const int64_t local_work = engine.has_unfinished() ? 1 : 0;
    const int64_t ep_work = agree_max(ep_comm_, local_work, "prefill: EP group has work");
    const int64_t role_work = agree_max(role_comm_, local_work, "prefill: role has work");
    return {ep_work != 0, role_work == 0};
  }

  void hand_out(Engine& engine) override {
    std::vector<PrefilledSequence> handoffs = engine.take_handoffs();
    std::vector<int64_t> counts(role_comm_.size());
    const auto my_count = static_cast<int64_t>(handoffs.size());
    role_comm_.all_gather(&my_count, counts.data(), 1, DType::kI64, "prefill: handoff counts");
    int64_t max_count = 0, total = 0, my_offset = 0;
    for (int r = 0; r < role_comm_.size(); ++r) {
      if (r < role_comm_.rank()) my_offset += counts[r];
      max_count = std::max(max_count, counts[r]);
      total += counts[r];
    }
    if (total == 0) return;
    std::vector<int64_t> mine(2 * max_count, -1), all(2 * max_count * role_comm_.size());
    for (int64_t i = 0; i < my_count; ++i) {
      mine[2 * i] = handoffs[i].request_index;
      mine[2 * i + 1] = static_cast<int64_t>(handoffs[i].tokens.size());
    }
    role_comm_.all_gather(mine.data(), all.data(), 2 * max_count, DType::kI64, "prefill: handoff requests");
    std::vector<int64_t> decisions(total, -1);
    if (collector_ != nullptr) {
      collector_->poll();
      int64_t k = 0;
      for (int r = 0; r < role_comm_.size(); ++r)
        for (int64_t i = 0; i < counts[r]; ++i, ++k)
          decisions[k] = collector_->assign(all[2 * (r * max_count + i)], all[2 * (r * max_count + i) + 1]);
    }
    role_comm_.broadcast(decisions.data(), total, DType::kI64, 0, "prefill: handoff decode ranks");
    for (int64_t i = 0; i < my_count; ++i) {
      auto seq = std::make_shared<PrefilledSequence>(std::move(handoffs[i]));
      const auto num_hashes = static_cast<int64_t>(seq->logits_hashes.size());
      auto header = std::make_shared<std::array<int64_t, 4>>(std::array<int64_t, 4>{
          seq->request_index, static_cast<int64_t>(seq->tokens.size()), static_cast<int64_t>(seq->kv.size()),
          num_hashes});
      const int dest = first_decode_rank_ + static_cast<int>(decisions[my_offset + i]);
      mail_.post(header, header->data(), 4, DType::kI64, dest, kTagHandoffHeader);
      mail_.post(seq, seq->tokens.data(), static_cast<int64_t>(seq->tokens.size()), DType::kI32, dest,
                 kTagHandoffTokens);
      mail_.post(seq, seq->kv.data(), static_cast<int64_t>(seq->kv.size()), DType::kF32, dest, kTagHandoffKv);
      if (num_hashes > 0) mail_.post(seq, seq->logits_hashes.data(), num_hashes, DType::kI64, dest, kTagHandoffHashes);
      report_.handoff_bytes += static_cast<int64_t>(4 * sizeof(int64_t) + seq->tokens.size() * sizeof(int32_t) +
                                                    seq->kv.size() * sizeof(float) + num_hashes * sizeof(uint64_t));
      ++report_.sequences;
    }
  }

 private:
  int first_decode_rank_;
  Communicator& ep_comm_;
  Communicator& role_comm_;
  ResultCollector* collector_;
  Mailbox& mail_;
  RankReport& report_;
};

// Decode: takes in every prefilled sequence whose KV has arrived and admits as many as the cache holds; the EP
// group steps while any of its ranks has work, and ends once world rank 0 has said every result is in.
class DecodePolicy final : public RolePolicy {
 public:
  DecodePolicy(const std::vector<Request>& requests, Communicator& ep_comm, Mailbox& mail, RankReport& report)
      : requests_(requests), ep_comm_(ep_comm), mail_(mail), report_(report) {}

  void take_in(Engine& engine) override {
    while (const std::optional<Mailbox::Arrival> arrival = mail_.probe(kTagHandoffHeader, DType::kI64)) {
      const int source = arrival->source;
      std::array<int64_t, 4> header{};
      mail_.receive(header.data(), 4, DType::kI64, source, kTagHandoffHeader, "handoff header");
      PrefilledSequence seq;
      seq.request_index = header[0];
      seq.tokens.resize(header[1]);
      seq.kv.resize(header[2]);
      seq.logits_hashes.resize(header[3]);
      mail_.receive(seq.tokens.data(), header[1], DType::kI32, source, kTagHandoffTokens, "handoff tokens");
      mail_.receive(seq.kv.data(), header[2], DType::kF32, source, kTagHandoffKv, "handoff KV");
      if (header[3] > 0)
        mail_.receive(seq.logits_hashes.data(), header[3], DType::kI64, source, kTagHandoffHashes, "handoff hashes");
      arrived_.push_back(std::move(seq));
    }
    while (!arrived_.empty() && engine.add_prefilled(requests_[arrived_.front().request_index], arrived_.front())) {
      arrived_.pop_front();
      ++report_.sequences;
    }
    if (!stop_received_ && mail_.probe(kTagDone, DType::kI64, 0)) {
      int64_t ignored = 0;
      mail_.receive(&ignored, 1, DType::kI64, 0, kTagDone, "stop signal");
      stop_received_ = true;
    }
  }

  Turn agree(const Engine& engine) override {
    std::array<int64_t, 2> state = {engine.has_unfinished() || !arrived_.empty() ? 1 : 0, stop_received_ ? 0 : 1};
    ep_comm_.all_reduce_max(state.data(), 2, DType::kI64, "decode: EP group has work / awaits stop");
    return {state[0] != 0, state[0] == 0 && state[1] == 0};
  }

  void idle() override { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }  // the group waits for KV

 private:
  const std::vector<Request>& requests_;
  Communicator& ep_comm_;
  Mailbox& mail_;
  RankReport& report_;
  std::deque<PrefilledSequence> arrived_;
  bool stop_received_ = false;
};

// Colocated: prefill and decode on the same ranks; the EP group steps until none of its ranks has work.
class ColocatedPolicy final : public RolePolicy {
 public:
  explicit ColocatedPolicy(Communicator& ep_comm) : ep_comm_(ep_comm) {}
  Turn agree(const Engine& engine) override {
    const bool any = agree_max(ep_comm_, engine.has_unfinished() ? 1 : 0, "colocated: EP group has work") != 0;
    return {any, !any};
  }

 private:
  Communicator& ep_comm_;
};

// The loop of every role: take in, agree, step (or idle), deliver what finished, hand out.
void run_role_loop(Engine& engine, CausalLm& model, ExpertDispatcher& experts, RolePolicy& role,
                   ResultCollector* collector, bool stream, TokenCollector* tokens, Mailbox& mail, Drain& drain,
                   RankReport& report) {
  for (;;) {
    drain.poll(engine, collector != nullptr);
    role.take_in(engine);
    const RolePolicy::Turn turn = role.agree(engine);
    if (turn.done) break;
    if (turn.step) {
      engine.step();
      experts.after_step(model.experts());
      maybe_die_for_test(mail.rank(), ++report.steps);
    } else {
      role.idle();
    }
    if (stream) stream_tokens(engine, tokens, mail);
    deliver(engine.take_finished(), collector, mail);
    role.hand_out(engine);
    mail.progress();
    if (collector != nullptr) collector->poll();
    if (tokens != nullptr) tokens->poll();
  }
}

}  // namespace

std::vector<int> assign_requests(const std::vector<Request>& requests, int num_ranks, int64_t prefix_block_size) {
  std::vector<int64_t> load(num_ranks, 0);
  std::unordered_map<uint64_t, int> first_rank_of;  // block hash -> the rank its first request went to
  std::vector<int> owner;
  for (const Request& r : requests) {
    const auto n = static_cast<int64_t>(r.prompt_token_ids.size());
    // The chained hashes of its whole blocks short of the last token (what the block manager can match).
    std::vector<uint64_t> hashes;
    for (int64_t i = 0; prefix_block_size > 0 && (i + 1) * prefix_block_size <= n - 1; ++i)
      hashes.push_back(chain_block_hash(hashes.empty() ? 0 : hashes.back(),
                                        std::span<const int32_t>(r.prompt_token_ids)
                                            .subspan(i * prefix_block_size, prefix_block_size)));
    // Tokens each rank would find cached: the longest run of leading blocks first routed there.
    std::vector<int64_t> shared(num_ranks, 0);
    for (size_t i = 0; i < hashes.size(); ++i) {
      const auto found = first_rank_of.find(hashes[i]);
      if (found == first_rank_of.end()) break;
      if (shared[found->second] == static_cast<int64_t>(i) * prefix_block_size)
        shared[found->second] += prefix_block_size;
    }
    int best = 0;
    for (int k = 1; k < num_ranks; ++k)
      if (load[k] + n - shared[k] < load[best] + n - shared[best]) best = k;
    load[best] += n - shared[best];
    for (uint64_t h : hashes) first_rank_of.emplace(h, best);
    owner.push_back(best);
  }
  return owner;
}

EngineOptions rank_engine_options(const CausalLm& model, const Topology& topo, ExpertDispatcher& experts,
                                  const SpmdGenerationOptions& options) {
  const RoleSpec& spec = topo.role_spec();
  EngineOptions engine_options = options.engine;
  engine_options.limits.chunk_tokens = spec.chunk_tokens;
  engine_options.limits.max_running = spec.max_running;
  engine_options.limits.handoff_after_prefill = topo.role() == Role::kPrefill;
  // An EP group of one rank needs no exchange: its experts run on the model's own (device) path.
  engine_options.experts = spec.ep_size > 1 ? &experts : nullptr;
  // Prefill ranks never verify, but with the MTP drafter they run its module over their prompts: its cache layer
  // travels with the handoff (DSpark's draft keys are written by the forward itself: nothing to run there).
  const bool mtp_layer =
      engine_options.speculation.model_drafter && model.draft_module()->kind() == DraftModule::Kind::kMtp;
  if (topo.role() == Role::kPrefill && !mtp_layer) engine_options.speculation = {};
  return engine_options;
}

std::vector<RequestResult> generate_spmd(CausalLm& model, const Topology& topo, Communicator& ep_comm,
                                         Communicator& role_comm, ExpertDispatcher& experts,
                                         const std::vector<Request>& requests, const SpmdGenerationOptions& options,
                                         std::vector<RankReport>* reports) {
  Engine engine(model, rank_engine_options(model, topo, experts, options));
  return generate_spmd(engine, model, topo, ep_comm, role_comm, experts, requests, options, reports);
}

std::vector<RequestResult> generate_spmd(Engine& engine, CausalLm& model, const Topology& topo,
                                         Communicator& ep_comm, Communicator& role_comm, ExpertDispatcher& experts,
                                         const std::vector<Request>& requests, const SpmdGenerationOptions& options,
                                         std::vector<RankReport>* reports) {
  const RoleSpec& spec = topo.role_spec();

  const bool is_root = topo.world_rank() == 0;
  const RoleSpec* decode = topo.deployment().find(Role::kDecode);
  Mailbox mail(topo.world(), options.timeout_s);
  std::unique_ptr<ResultCollector> collector;
  std::unique_ptr<TokenCollector> tokens;
  if (is_root) {
    collector = std::make_unique<ResultCollector>(mail, static_cast<int64_t>(requests.size()),
                                                  decode ? decode->num_ranks : 1, options.on_result);
    if (options.stream_tokens)
      tokens = std::make_unique<TokenCollector>(mail, static_cast<int64_t>(requests.size()), options.on_tokens);
  }

  if (topo.role() != Role::kDecode) {
    const std::vector<int> owner =
        assign_requests(requests, spec.num_ranks, engine.shares_prefixes() ? KvCache::kBlockSize : 0);
    for (size_t i = 0; i < requests.size(); ++i)
      if (owner[i] == topo.placement().rank_in_role) engine.add_request(requests[i]);
  }

  RankReport report;
  report.world_rank = topo.world_rank();
  report.role = static_cast<int64_t>(topo.role());
  std::unique_ptr<RolePolicy> policy;
  switch (topo.role()) {
    case Role::kPrefill:
      policy = std::make_unique<PrefillPolicy>(topo, ep_comm, role_comm, collector.get(), mail, report);
      break;
    case Role::kDecode:
      policy = std::make_unique<DecodePolicy>(requests, ep_comm, mail, report);
      break;
    case Role::kColocated:
      policy = std::make_unique<ColocatedPolicy>(ep_comm);
      break;
  }
  Drain drain(topo, mail, options.on_tick);
  run_role_loop(engine, model, experts, *policy, collector.get(), options.stream_tokens, tokens.get(), mail, drain,
                report);
  if (options.stream_tokens && !is_root) {  // the last of this rank's token messages
    auto end = std::make_shared<int64_t>(TokenCollector::kStreamEnd);
    mail.post(end, end.get(), 1, DType::kI64, 0, kTagTokens);
  }
  if (is_root) {
    collector->wait_complete(options.timeout_s, [&] { drain.poll(engine, true); });
    if (decode != nullptr) {
      auto stop = std::make_shared<int64_t>(1);
      for (int d = 0; d < decode->num_ranks; ++d)
        mail.post(stop, stop.get(), 1, DType::kI64, topo.deployment().roles[0].num_ranks + d, kTagDone);
    }
    if (tokens != nullptr) tokens->wait_for_ends(topo.world_size() - 1, options.timeout_s);
  }
  mail.drain();

  const EngineStats& stats = engine.stats();
  report.prefill_tokens = stats.num_prefill_tokens;
  report.prefix_hit_tokens = engine.prefix_hit_tokens();
  report.prefix_store_tokens = engine.prefix_store_tokens();
  report.prefix_replayed_tokens = engine.prefix_replayed_tokens();
  report.decode_tokens = stats.num_decode_tokens;
  report.replay_rows_below_floor = stats.replay_rows_below_floor;
  report.replay_skipped_layer_rows = stats.replay_skipped_layer_rows;
  report.spec_sequence_steps = stats.speculation.sequence_steps;
  report.spec_drafted = stats.speculation.drafted;
  report.spec_verified = stats.speculation.verified;
  report.spec_accepted = stats.speculation.accepted;
  report.decode_us = std::llround(stats.decode_s * 1e6);
  report.device_idle_steps = stats.device_idle_steps;
  report.device_idle_us = std::llround(stats.device_idle_ms * 1e3);
  if (auto* ep = dynamic_cast<ExpertParallelDispatcher*>(&experts)) {
    report.moe_dispatch_bytes = ep->stats().dispatch_bytes;
    report.moe_combine_bytes = ep->stats().combine_bytes;
  }
  constexpr int kReportFields = sizeof(RankReport) / sizeof(int64_t);
  const std::vector<int64_t> fields = gather_int64_to_root(topo.world(), reinterpret_cast<const int64_t*>(&report),
                                                           kReportFields, 0, options.timeout_s, "the end-of-run reports");
  std::vector<RankReport> all(fields.size() / kReportFields);
  std::memcpy(static_cast<void*>(all.data()), fields.data(), fields.size() * sizeof(int64_t));
  if (reports != nullptr) *reports = std::move(all);
  if (!is_root) return {};
  std::vector<RequestResult> results = collector->take();
  if (tokens != nullptr) tokens->finish(results);
  return results;
}

}  // namespace deepinfer
