#include "engine/spec/speculative.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>
#include <random>

#include "engine/backend/cpu_backend.h"
#include "engine/observer/phase_span.h"
#include "engine/spec/acceptance.h"
#include "engine/spec/sampling_filters.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

TreeShape default_tree() {
  TreeShape shape;
  shape.kind = TreeShape::Kind::kChain;
  shape.branching.assign(4, 1);
  return shape;
}

std::vector<DraftNodeInfo> node_infos(const DraftTree& tree) {
  std::vector<DraftNodeInfo> nodes;
  nodes.reserve(static_cast<size_t>(tree.size()));
  for (DraftNodeId id = 0; id < tree.size(); ++id) {
    const DraftNode& n = tree.node(id);
    nodes.push_back({n.token, n.parent, n.depth, n.draft_prob});
  }
  return nodes;
}

AcceptanceEvent acceptance_event(int64_t round, const AcceptanceResult& accepted) {
  AcceptanceEvent event;
  event.round = round;
  for (const NodeDecision& d : accepted.decisions) {
    event.nodes.push_back({d.node, d.target_prob, d.verdict == NodeVerdict::kAccepted});
  }
  event.accepted_length = 1 + static_cast<int32_t>(accepted.accepted_path.size());
  event.next_token = accepted.next_token;
  event.bonus = accepted.bonus;
  return event;
}

// A DecisionEvent when the controller switched between speculating and plain decoding.
void observe_controller(Observer* observer, int64_t round, const BreakEvenController& controller, int& fallbacks,
                        int& returns) {
  if (controller.fallbacks() == fallbacks && controller.returns() == returns) return;
  const bool fell_back = controller.fallbacks() != fallbacks;
  fallbacks = controller.fallbacks();
  returns = controller.returns();
  if (!observes(observer, EventKind::kDecision)) return;
  const nlohmann::json detail = {{"plain_ms_per_token", controller.plain_ms_per_token()},
                                 {"speculative_ms_per_token", controller.speculative_ms_per_token()},
                                 {"fallbacks", fallbacks},
                                 {"returns", returns}};
  observer->on_event(
      DecisionEvent{round, observer_now_ns(), "controller", fell_back ? "fallback" : "resume", detail.dump()});
}

}  // namespace

SpeculativeOptions::SpeculativeOptions() : tree(default_tree()) {}

std::optional<Divergence> first_divergence(std::span<const int32_t> speculative, std::span<const int32_t> plain) {
  const size_t n = std::min(speculative.size(), plain.size());
  for (size_t i = 0; i < n; ++i) {
    if (speculative[i] != plain[i]) return Divergence{static_cast<int64_t>(i), speculative[i], plain[i]};
  }
  if (speculative.size() == plain.size()) return std::nullopt;
  return Divergence{static_cast<int64_t>(n), n < speculative.size() ? speculative[n] : -1,
                    n < plain.size() ? plain[n] : -1};
}

namespace {

// The verify batch of a round: [pending, node 0, ..., node n-1] at positions P, P + depth, the
// tree mask, and (with a context) the rows in traversal order.
struct VerifyBatch {
  std::vector<int32_t> tokens, positions, order;
  AttentionMask mask;
};

VerifyBatch verify_batch(int32_t P, int32_t pending, const DraftTree& tree, const ForwardContext* context) {
  const int n = tree.size();
  VerifyBatch b;
  b.tokens.resize(static_cast<size_t>(n + 1));
  b.positions.resize(static_cast<size_t>(n + 1));
  std::vector<int> parents(static_cast<size_t>(n + 1));
  b.tokens[0] = pending;
  b.positions[0] = P;
  parents[0] = -1;
  for (DraftNodeId id = 0; id < n; ++id) {
    const DraftNode& node = tree.node(id);
    b.tokens[static_cast<size_t>(id + 1)] = node.token;
    b.positions[static_cast<size_t>(id + 1)] = P + node.depth;
    parents[static_cast<size_t>(id + 1)] = node.parent + 1;  // the root (-1) is the pending token, row 0
  }
  b.mask = AttentionMask::from_parents(parents);
  if (context) {
    // Rows in traversal order: the pending token first, then the nodes (row = id + 1).
    b.order = {0};
    const TraversalOrder traversal = context->sparse ? context->sparse->order : TraversalOrder::kBfs;
    for (DraftNodeId id : tree.traversal(traversal)) b.order.push_back(id + 1);
  }
  return b;
}

ForwardContext with_order(const ForwardContext* context, const VerifyBatch& b) {
  ForwardContext c = *context;
  c.query_order = b.order;
  return c;
}

// The context a verify's forward runs under: the caller's, with the batch's query order; none
// without one.
std::optional<ForwardContext> verify_context(const ForwardContext* context, const VerifyBatch& b) {
  if (!context) return std::nullopt;
  return with_order(context, b);
}

}  // namespace

Status verify_forward(CpuTransformer& target, KvCache& kv, int32_t pending, const DraftTree& tree,
                      std::span<float> logits, const ForwardContext* context) {
  const VerifyBatch b = verify_batch(static_cast<int32_t>(kv.committed()), pending, tree, context);
  const auto c = verify_context(context, b);
  return target.forward(b.tokens, b.positions, &b.mask, kv, logits, LogitRows::All, c ? &*c : nullptr);
}

Status verify_forward(BackendSession& session, int32_t pending, const DraftTree& tree, std::span<float> logits,
                      const ForwardContext* context) {
  const VerifyBatch b = verify_batch(static_cast<int32_t>(session.committed()), pending, tree, context);
  const auto c = verify_context(context, b);
  return session.forward(b.tokens, b.positions, &b.mask, logits, LogitRows::All, c ? &*c : nullptr);
}

Status verify_forward_greedy(BackendSession& session, int32_t pending, const DraftTree& tree, std::span<int32_t> greedy,
                             const ForwardContext* context) {
  const VerifyBatch b = verify_batch(static_cast<int32_t>(session.committed()), pending, tree, context);
  const auto c = verify_context(context, b);
  return session.forward_greedy(b.tokens, b.positions, &b.mask, greedy, LogitRows::All, c ? &*c : nullptr);
}

SpeculativeEngine::SpeculativeEngine(const Model& target, int threads, Precision precision) : model_(&target) {
  auto cpu = std::make_unique<CpuBackend>(target, CpuTransformerOptions{threads, precision});
  cpu_ = cpu.get();
  backend_ = std::move(cpu);
}

SpeculativeEngine::SpeculativeEngine(const Model& target, std::unique_ptr<TransformerBackend> backend)
    : model_(&target), backend_(std::move(backend)), cpu_(dynamic_cast<CpuBackend*>(backend_.get())) {}

CpuTransformer* SpeculativeEngine::cpu_transformer() { return cpu_ ? &cpu_->transformer() : nullptr; }

int64_t SpeculativeEngine::kv_row_bytes() const { return backend_->kv_row_bytes(); }

Expected<SpeculativeResult> SpeculativeEngine::generate(std::span<const int32_t> prompt, Drafter* drafter,
                                                        const SpeculativeOptions& options,
                                                        const TokenCallback& on_token) {
  const ModelConfig& cfg = model_->config;
  const Tokenizer& tokenizer = model_->tokenizer;
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) return make_error("generate: empty prompt");
  if (n_prompt >= cfg.context_length) {
    return make_error("prompt has " + std::to_string(n_prompt) + " tokens, context is " +
                      std::to_string(cfg.context_length));
  }
  if (options.max_tokens < 0)
    return make_error("generate: max_tokens " + std::to_string(options.max_tokens) + " is negative");
  auto rule = make_acceptance_rule(options.accept);
  if (!rule) return rule.error();
  const int max_nodes = drafter ? options.tree.max_nodes() : 0;
  if (drafter && max_nodes > kMaxDraftNodes) {
    return make_error("draft tree " + options.tree.to_string() + " has up to " + std::to_string(max_nodes) +
                      " nodes; at most " + std::to_string(kMaxDraftNodes) + " fit");
  }
  // The pending token and a full tree must fit after the prompt at least once.
  if (drafter && n_prompt + 1 + max_nodes > cfg.context_length) {
    return make_error("draft tree " + options.tree.to_string() + " (" + std::to_string(max_nodes) +
                      " nodes) is larger than the context left after the " + std::to_string(n_prompt) +
                      "-token prompt (" + std::to_string(cfg.context_length - n_prompt - 1) + " positions of " +
                      std::to_string(cfg.context_length) + ")");
  }

  SpeculativeResult result;
  result.acceptance = (*rule)->name();
  result.lossless = (*rule)->lossless();
  result.drafter = drafter ? drafter->name() : "none";
  if (options.max_tokens == 0) return result;
  const bool greedy = result.acceptance == "greedy";
  // Greedy acceptance verifies against the argmax, so the target side is temperature 0; the
  // draft side only ranks candidates (softmax at temperature 1). Lossless sampling needs the same
  // transform on both sides; cascade ignores q.
  SamplingParams target_filters = options.sampling;
  if (greedy) target_filters = SamplingParams{0.0f, 0, 1.0f, options.sampling.seed};
  const bool sample_rule = result.acceptance == "sample";
  DraftRequest request;
  request.shape = options.tree;
  request.filters = sample_rule ? target_filters : SamplingParams{1.0f, 0, 1.0f, 0};
  std::mt19937_64 rng(options.sampling.seed);
  request.rng = &rng;
  request.choice = sample_rule && target_filters.temperature > 0 && options.tree.kind != TreeShape::Kind::kDynamic
                       ? DraftChoice::kSample
                       : DraftChoice::kTopK;

  // A drafter that reads the target's features (the head drafter) gets, each round, the
  // final-norm row that produced the pending token; only the CPU backend keeps those rows.
  const bool wants_feature = drafter && drafter->wants_target_feature();
  if (wants_feature && !backend_->keeps_target_features()) {
    return make_error("drafter " + drafter->name() + " needs the target's final-norm features, which the " +
                      backend_->name() + " backend does not provide; the head drafter runs on the CPU backend");
  }
  std::vector<float> feature(wants_feature ? static_cast<size_t>(cfg.dim) : 0);

  const int64_t max_new = std::min<int64_t>(options.max_tokens, cfg.context_length - n_prompt + 1);
  const int64_t capacity = std::min(cfg.context_length, n_prompt + max_new + max_nodes + 1);
  auto started = backend_->start(options.kv_block_size, capacity);
  if (!started) return started.error();
  BackendSession& kv = **started;  // the target's KV cache for this sequence
  if (drafter) drafter->reset();
  const int64_t draft_rollback_before = drafter ? drafter->stats().rollback_tokens : 0;
  ControllerOptions controller_options = options.controller;
  controller_options.plain_warmup = std::max(controller_options.plain_warmup, backend_->warmup_steps());
  BreakEvenController fresh_controller(controller_options);
  BreakEvenController& controller = options.carried_controller ? *options.carried_controller : fresh_controller;
  if (options.carried_controller) controller.begin_sequence(backend_->warmup_steps());
  const int fallbacks_before = controller.fallbacks(), returns_before = controller.returns();
  const int64_t row_bytes = kv_row_bytes();
  const auto V = static_cast<size_t>(cfg.vocab_size);
  std::vector<float> logits(V);
  std::vector<float> probs, all_logits;  // (rows, V) of the latest verify, kept across rounds
  std::vector<int32_t> row_greedy;       // (rows) of the latest greedy verify

  auto choose = [&](std::span<const float> row) -> int32_t {
    const auto p = apply_sampling_filters(row, target_filters);
    return sample_index(std::span<const float>(p), rng);
  };
  // At temperature 0 the target's next token is its argmax, picked where the forward ran
  // (forward_greedy), so no (vocab) row comes back to the host.
  const bool greedy_target = !(target_filters.temperature > 0);
  // One token after the last of `tokens`: the argmax, or a draw through the filters.
  auto forward_next = [&](std::span<const int32_t> tokens, std::span<const int32_t> at, const ForwardContext* context,
                          int32_t& next) -> Status {
    if (greedy_target) return kv.forward_greedy(tokens, at, nullptr, {&next, 1}, LogitRows::Last, context);
    if (auto s = kv.forward(tokens, at, nullptr, logits, LogitRows::Last, context); !s) return s;
    next = choose(logits);
    return {};
  };

  // The feature of logits row `row` of the forward just run, for the next draft; none when the
  // backend has none for it (a prefill restored from the prefill cache): that round drafts nothing.
  auto take_feature = [&](int64_t row) {
    if (!wants_feature) return;
    request.target_feature = {};
    if (kv.last_features(row, feature)) request.target_feature = feature;
  };

  Observer* const observer = options.observer;
  if (observes(observer, EventKind::kSessionStart)) {
    SessionStartEvent session = options.session;
    session.time_ns = observer_now_ns();
    if (session.wall_time_ns == 0) {
      session.wall_time_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
    }
    if (session.model_name.empty()) session.model_name = cfg.name;
    if (session.architecture.empty()) session.architecture = cfg.architecture;
    if (session.backend.empty()) session.backend = backend_->name();
    observer->on_event(session);
  }

  std::vector<int32_t> sequence(prompt.begin(), prompt.end());
  std::vector<int32_t> positions(static_cast<size_t>(n_prompt));
  std::iota(positions.begin(), positions.end(), 0);
  auto start = Clock::now();
  const int64_t prefill_start_ns = observer_now_ns();
  nvtx_push("prefill");
  const ForwardContext prefill_context{observer, -1, nullptr, {}, nullptr};
  int32_t pending = -1;
  const Status prefilled = forward_next(prompt, positions, &prefill_context, pending);
  nvtx_pop();
  if (!prefilled) return prefilled.error();
  take_feature(0);
  kv.commit_all();
  result.timings.prefill_tokens = static_cast<int>(n_prompt);
  result.timings.prefill_seconds = ms_since(start) / 1e3;
  if (observes(observer, EventKind::kPrefill)) {
    observer->on_event(PrefillEvent{prefill_start_ns, observer_now_ns(), static_cast<int32_t>(n_prompt)});
  }
  int seen_fallbacks = fallbacks_before;
  int seen_returns = returns_before;

  // Emits one token; false when generation ends with it.
  bool done = false;
  auto emit = [&](int32_t token) {
    result.tokens.push_back(token);
    sequence.push_back(token);
    if (options.stop_at_eos && tokenizer.is_end_of_generation(token)) {
      result.stopped_by_eos = true;
      done = true;
      return;
    }
    const std::string bytes = tokenizer.token_bytes(token);
    result.text += bytes;
    if (on_token && !on_token(token, bytes)) done = true;
    if (static_cast<int64_t>(result.tokens.size()) >= max_new) done = true;
  };

  start = Clock::now();
  emit(pending);
  while (!done) {
    RoundRecord round;
    const auto round_index = static_cast<int64_t>(result.rounds.size());
    const auto P = static_cast<int32_t>(kv.committed());
    SparseStats sparse_stats;
    const ForwardContext trace{observer, round_index, &options.sparse, {}, &sparse_stats};
    if (observes(observer, EventKind::kRoundBegin)) {
      observer->on_event(RoundBeginEvent{round_index, observer_now_ns(), P});
    }
    DraftTree tree;
    const bool room = P + 1 + max_nodes <= kv.capacity();
    if (drafter && room && controller.speculate()) {
      PhaseSpan span(observer, "draft", round_index);
      auto drafted = drafter->draft(sequence, request);
      if (!drafted) return drafted.error();
      tree = std::move(*drafted);
      round.draft_ms = span.end();
      if (!tree.empty() && observes(observer, EventKind::kDraftTree)) {
        observer->on_event(DraftTreeEvent{round_index, drafter->name(), node_infos(tree)});
      }
    }
    std::vector<int32_t> emitted;
    if (tree.empty()) {
      const auto t0 = Clock::now();
      PhaseSpan span(observer, "decode", round_index);
      int32_t next = -1;
      if (auto s = forward_next({&pending, 1}, {&P, 1}, &trace, next); !s) return s.error();
      take_feature(0);
      kv.commit_all();
      emitted.push_back(next);
      span.end();
      round.plain_ms = ms_since(t0);
      if (round.draft_ms > 0) {
        controller.record_speculative(1, round.draft_ms, round.plain_ms);  // a declined draft still cost its time
      } else {
        controller.record_plain(round.plain_ms);
      }
    } else {
      const auto t0 = Clock::now();
      const int n = tree.size();
      const size_t rows = static_cast<size_t>(n + 1);
      Expected<AcceptanceResult> accepted = AcceptanceResult{};
      std::optional<PhaseSpan> accept_span;
      if (greedy) {
        // Only each row's argmax comes back: the greedy rule needs nothing else.
        row_greedy.resize(rows);
        {
          PhaseSpan span(observer, "verify", round_index);
          if (auto s = verify_forward_greedy(kv, pending, tree, row_greedy, &trace); !s) return s.error();
        }
        accept_span.emplace(observer, "accept", round_index);
        accepted = accept_greedy_tokens(tree, row_greedy);
      } else {
        probs.resize(rows * V);
        all_logits.resize(rows * V);
        const std::span<float> verify_logits(all_logits.data(), rows * V);
        {
          PhaseSpan span(observer, "verify", round_index);
          if (auto s = verify_forward(kv, pending, tree, verify_logits, &trace); !s) return s.error();
        }
        accept_span.emplace(observer, "accept", round_index);
        for (size_t r = 0; r < rows; ++r) {
          apply_sampling_filters(std::span<const float>(all_logits.data() + r * V, V), target_filters,
                                 std::span<float>(probs.data() + r * V, V));
        }
        accepted = (*rule)->accept(tree, TargetProbs{probs, static_cast<int>(V)}, rng);
      }
      if (!accepted) {
        kv.rollback();
        return accepted.error();
      }
      accept_span->end();
      // The correction / bonus token came from the last accepted node's row (row 0: the pending token's).
      take_feature(accepted->accepted_path.empty() ? 0 : accepted->accepted_path.back() + 1);
      if (observes(observer, EventKind::kAcceptance)) observer->on_event(acceptance_event(round_index, *accepted));
      PhaseSpan commit_span(observer, "commit", round_index);
      std::vector<int> keep = {0};
      for (DraftNodeId id : accepted->accepted_path) keep.push_back(id + 1);
      if (auto s = kv.commit(keep); !s) return s.error();
      commit_span.end();
      emitted = accepted->emitted_tokens(tree);
      round.speculative = true;
      round.tree_nodes = n;
      round.tree_depth = tree.max_depth();
      round.accepted = static_cast<int>(accepted->accepted_path.size());
      round.rollback_tokens = n - round.accepted;
      round.rejected_kv_bytes = round.rollback_tokens * row_bytes;
      round.verify_ms = ms_since(t0);
      controller.record_speculative(static_cast<int>(emitted.size()), round.draft_ms, round.verify_ms);
    }
    round.kv_bytes_read = sparse_stats.kv_bytes_read;
    round.kv_bytes_dense = sparse_stats.kv_bytes_dense;
    round.ffn_active = sparse_stats.ffn_active;
    round.ffn_total = sparse_stats.ffn_total;
    round.moe_routed = sparse_stats.moe_routed;
    round.moe_skipped = sparse_stats.moe_skipped;
    observe_controller(observer, round_index, controller, seen_fallbacks, seen_returns);
    for (int32_t token : emitted) {
      if (done) break;
      emit(token);
      ++round.emitted;
    }
    pending = emitted.back();
    if (observes(observer, EventKind::kCommit)) {
      CommitEvent commit{round_index, {}, round.rollback_tokens, round.rejected_kv_bytes};
      commit.tokens.assign(emitted.begin(), emitted.begin() + round.emitted);
      observer->on_event(std::move(commit));
    }
    if (observes(observer, EventKind::kRoundEnd)) {
      observer->on_event(RoundEndEvent{round_index, observer_now_ns(), round.speculative, 1 + round.accepted,
                                       round.emitted, round.kv_bytes_read, round.kv_bytes_dense});
    }
    result.rounds.push_back(round);
  }
  const double decode_seconds = result.tokens.size() > 1 ? ms_since(start) / 1e3 : 0.0;
  result.timings.decode_tokens = static_cast<int>(result.tokens.size()) - 1;
  result.timings.decode_seconds = decode_seconds;
  result.metrics = summarize_rounds(result.rounds, static_cast<int>(result.tokens.size()), decode_seconds);
  result.metrics.controller_fallbacks = controller.fallbacks() - fallbacks_before;
  result.metrics.controller_returns = controller.returns() - returns_before;
  if (drafter) result.metrics.draft_rollback_tokens = drafter->stats().rollback_tokens - draft_rollback_before;
  if (observes(observer, EventKind::kSessionEnd)) {
    observer->on_event(SessionEndEvent{observer_now_ns(), to_json(result.metrics).dump()});
  }
  return result;
}

}  // namespace specula
