#pragma once
// A synthetic speculative run, emitted as observer events with known values, for the recorder
// tests: round r drafts a chain of (r % 4) + 2 nodes, accepts the first r % 3 of them, and
// every layer selects blocks {layer, layer + 1, ..., layer + 3} out of 16.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/observer/observer.h"

namespace specula::testing {

inline constexpr int kSyntheticLayers = 3;

inline int synthetic_tree_nodes(int64_t round) { return static_cast<int>(round % 4) + 2; }
inline int synthetic_accepted(int64_t round) { return static_cast<int>(round % 3); }
inline int32_t synthetic_token(int64_t round, int node) { return static_cast<int32_t>(1000 + round * 10 + node); }

inline void emit_session_start(Observer& o, int64_t t0, const std::string& config_json = "") {
  SessionStartEvent e;
  e.time_ns = t0;
  e.wall_time_ns = 1'700'000'000'000'000'000;
  e.config_json = config_json.empty() ? R"({"tree":"chain:4","accept":"greedy"})" : config_json;
  e.model_name = "tiny-llama";
  e.model_sha256 = std::string(64, 'a');
  e.architecture = "llama";
  e.backend = "cpu";
  e.device = "test cpu";
  e.version = "0.1.0";
  o.on_event(e);
}

// Emits every event of one round. t is advanced by the round's duration (1000 ns per step).
inline void emit_round_events(Observer& o, int64_t round, int64_t& t, bool end_round = true) {
  const int n = synthetic_tree_nodes(round);
  const int accepted = synthetic_accepted(round);
  o.on_event(RoundBeginEvent{round, t, 100 + round});
  DraftTreeEvent tree;
  tree.round = round;
  tree.drafter = "ngram";
  for (int i = 0; i < n; ++i) tree.nodes.push_back({synthetic_token(round, i), i - 1, i + 1, 0.5f});
  o.on_event(tree);
  o.on_event(CpuSpanEvent{"draft", t, t + 1000, round, -1});
  for (int layer = 0; layer < kSyntheticLayers; ++layer) {
    LayerSelectionEvent sel;
    sel.round = round;
    sel.layer = layer;
    sel.mode = layer == 0 ? SelectionMode::kRefresh : SelectionMode::kReuse;
    sel.anchor_layer = layer == 0 ? -1 : 0;
    sel.total_blocks = 16;
    sel.block_bits = pack_block_bits({layer, layer + 1, layer + 2, layer + 3}, 16);
    o.on_event(sel);
    LayerSelectionEvent per_query = sel;  // full level only
    per_query.query = 0;
    o.on_event(per_query);
    o.on_event(FfnStatsEvent{round, layer, 100 + layer, 256, false});
    o.on_event(MoeStatsEvent{round, layer, 8, {1, 5}, {layer}});
    o.on_event(CpuSpanEvent{"verify", t + 1000 + layer * 100, t + 1100 + layer * 100, round, layer});
  }
  AcceptanceEvent acc;
  acc.round = round;
  for (int i = 0; i <= accepted && i < n; ++i) acc.nodes.push_back({i, 0.25f * static_cast<float>(i + 1), i < accepted});
  acc.accepted_length = 1 + accepted;
  acc.next_token = 7;
  acc.bonus = false;
  o.on_event(acc);
  CommitEvent commit;
  commit.round = round;
  for (int i = 0; i < accepted; ++i) commit.tokens.push_back(synthetic_token(round, i));
  commit.tokens.push_back(7);
  commit.rollback_tokens = n - accepted;
  commit.rejected_kv_bytes = (n - accepted) * 4096;
  o.on_event(commit);
  if (round % 5 == 0) o.on_event(DecisionEvent{round, t, "controller", "keep", R"({"gain":1.2})"});
  if (end_round) o.on_event(RoundEndEvent{round, t + 2000, true, 1 + accepted, accepted + 1});
  t += 3000;
}

}  // namespace specula::testing
