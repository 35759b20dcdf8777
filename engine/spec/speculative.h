#pragma once
// Speculative generation on any TransformerBackend. After prefill, each round:
//   1. the drafter proposes a tree hanging off the last emitted token t (not yet in the KV);
//   2. ONE target forward runs over [t, node 0, ..., node n-1] under the tree mask, at
//      positions P (t, with P = committed rows) and P + depth (nodes): row 0 gives the
//      distribution after t, row 1 + i the one after node i;
//   3. the acceptance rule picks the accepted path and the correction / bonus token from the
//      target distributions (after apply_sampling_filters);
//   4. kv.commit([0, 1 + path...]) keeps t and the accepted nodes' rows and drops the rest.
// The round emits the path tokens and the correction/bonus token, which is fed next round.
// A round without a tree (no drafter, the controller fell back, nothing to propose, the context
// nearly full) is one plain decode step.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/transformer_backend.h"
#include "engine/core/expected.h"
#include "engine/generate.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/cpu_transformer.h"
#include "engine/observer/observer.h"
#include "engine/sparse/sparse_config.h"
#include "engine/spec/controller.h"
#include "engine/spec/draft_tree.h"
#include "engine/spec/drafters.h"
#include "engine/spec/metrics.h"

namespace specula {

class CpuBackend;

struct SpeculativeOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  int kv_block_size = 16;
  bool stop_at_eos = true;
  TreeShape tree;                 // default: chain:4
  std::string accept = "greedy";  // "greedy" | "sample" | "cascade:T"
  ControllerOptions controller;
  // A controller carried across generate() calls (the items of a benchmark run, a server's
  // requests): it keeps what earlier sequences taught it, and `controller` is then ignored (the
  // carried one has its own options). Null: a fresh controller each call. Must outlive the call.
  // The run's controller metrics count only this call's fallbacks and returns.
  BreakEvenController* carried_controller = nullptr;
  // Receives the run's events (session, prefill, rounds, trees, acceptance, commits, decisions,
  // phase spans); null = none. Must outlive generate(). `session` is the SessionStartEvent the
  // run opens with: the caller fills what only it knows (config_json, model_sha256, device,
  // version); empty model_name / architecture / backend are filled in from the model.
  Observer* observer = nullptr;
  SessionStartEvent session;
  // What verification may drop (engine/sparse/sparse_config.h); strict by default. Applies to
  // verify forwards and plain steps, not to the prefill.
  SparseConfig sparse;
  SpeculativeOptions();
};

struct SpeculativeResult {
  std::vector<int32_t> tokens;  // generated ids (prompt excluded)
  std::string text;
  GenerateTimings timings;
  bool stopped_by_eos = false;
  std::string acceptance;  // the rule's name
  bool lossless = true;    // false for cascade: the output does not follow the target
  std::string drafter;     // drafter name, "none" for plain decoding
  std::vector<RoundRecord> rounds;
  SpeculativeMetrics metrics;
};

// The first index where two token streams differ (a length difference counts at the shorter
// length), or nullopt when they are equal.
struct Divergence {
  int64_t index = 0;
  int32_t speculative_token = -1;  // -1: that stream ended
  int32_t plain_token = -1;
};
std::optional<Divergence> first_divergence(std::span<const int32_t> speculative, std::span<const int32_t> plain);

// Runs the target over the pending token and every tree node in one forward (tree mask,
// positions as above); logits: (1 + tree.size(), vocab). The rows are left provisional.
// With a context, its query_order is filled from the tree (context->sparse->order).
Status verify_forward(CpuTransformer& target, KvCache& kv, int32_t pending, const DraftTree& tree,
                      std::span<float> logits, const ForwardContext* context = nullptr);
Status verify_forward(BackendSession& session, int32_t pending, const DraftTree& tree, std::span<float> logits,
                      const ForwardContext* context = nullptr);
// The same verify, keeping only each row's greedy token (BackendSession::forward_greedy):
// greedy: 1 + tree.size() ids, row 0 after the pending token, row 1 + i after node i.
Status verify_forward_greedy(BackendSession& session, int32_t pending, const DraftTree& tree, std::span<int32_t> greedy,
                             const ForwardContext* context = nullptr);

// One target backend reused across prompts (weights packed or uploaded once). The round loop
// runs on a BackendSession, so the same engine speculates on the CPU or the GPU; the drafters
// run where they were built (engine/spec/drafters.h).
class SpeculativeEngine {
 public:
  // On the CPU. `target` must outlive the engine. threads: 0 = all cores.
  explicit SpeculativeEngine(const Model& target, int threads = 0, Precision precision = Precision::Default);
  // On `backend` (e.g. make_backend(target, {"cuda"})), which must run `target`.
  SpeculativeEngine(const Model& target, std::unique_ptr<TransformerBackend> backend);

  // drafter == nullptr: plain decoding through the same loop. on_token may be null.
  Expected<SpeculativeResult> generate(std::span<const int32_t> prompt, Drafter* drafter,
                                       const SpeculativeOptions& options, const TokenCallback& on_token);

  const Model& model() const { return *model_; }
  TransformerBackend& backend() { return *backend_; }
  // The CPU backend's transformer (prefill cache, threads); null on another backend.
  CpuTransformer* cpu_transformer();
  // Bytes of one KV row of the target (all layers, K and V).
  int64_t kv_row_bytes() const;

 private:
  const Model* model_;
  std::unique_ptr<TransformerBackend> backend_;
  CpuBackend* cpu_ = nullptr;  // backend_, when it is the CPU's
};

}  // namespace specula
