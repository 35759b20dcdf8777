#pragma once
// What sparse verification may drop, for one run (ARCHITECTURE.md "SparsePolicy"). Presets:
//   strict    nothing (dense verification; bit-identical to plain tree verification)
//   sa        sparse attention: the first query's Quest top-k blocks + sink + local, above L_b
//   sa-reuse  sa, with non-anchor layers reusing the nearest earlier anchor's selection
//   sffn      sparse FFN: channels with |silu(gate)| < tau skip the up and down projections
//   hybrid    sa-reuse + sffn (+ MoE expert skipping on MoE models)
//   smoe      MoE expert skipping (engine/model/moe.h): each verified token skips up to
//             moe_skip_budget of its lowest-weight routed experts, by per-layer thresholds from
//             `specula-cli calibrate-moe` (key moe_calibration); refused on dense models
//   ssv-exact / ssv-approx   SSV grouping: groups of C queries in traversal order, each query
//             attends to its own set and the union is loaded (exact), or the group shares its
//             first query's set (approximate)
// Budget (per KV head), for a committed context of L tokens in blocks of B:
//   L <  L_b:  every block (nothing dropped)
//   L >= L_b:  k = ceil((L_b + eta * (L - L_b)) / B) blocks, sink and local included
// The seed's equation (6) was lost in extraction; its text says eta controls the proportion of
// active blocks, H (KV heads) and B (block size) enter it, and cost must grow smoothly past L_b.
// This rule is continuous at L_b, grows with slope eta past it, and is applied to each of the H
// KV heads. It also reproduces the seed's Table 2: the average context each dataset's reported
// sparsity implies comes out the same (within ~7%) for all three L_b rows, where
// max(L_b, eta * L) / B disagrees by ~1.5x (docs/sparse-verification.md).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/expected.h"
#include "engine/spec/draft_tree.h"

namespace specula {

enum class QueryMode { kFirst, kPerQuery, kGroupUnion, kGroupShared };
std::string_view to_string(QueryMode mode);
Expected<QueryMode> parse_query_mode(std::string_view name);  // first | per-query | group-union | group-shared

struct SparseConfig {
  std::string preset = "strict";
  // Sparse attention.
  bool attention = false;
  int64_t dense_below = 1024;  // L_b, tokens
  double eta = 0.2;            // kept fraction of blocks past L_b, in (0, 1]
  int sink_blocks = 1;
  int local_blocks = 2;
  QueryMode query_mode = QueryMode::kFirst;
  TraversalOrder order = TraversalOrder::kBfs;
  int group_size = 4;                // C, for the group modes
  // Block score: "quest" (the upper bound from the block's key min/max, what a kernel can afford)
  // or "exact" (the largest true q·k in the block, summed over the GQA group: an oracle that reads
  // every key, for measuring how much the bound costs in quality).
  std::string scoring = "quest";
  // How the GQA group's query heads combine into one block score (the selection is per KV head):
  //   "logit-sum"  Σ_g score_g(b), the sum of the heads' bounds (issue 4's wording)
  //   "prob-sum"   Σ_g softmax_b(score_g / sqrt(head_dim)), each head's bound turned into a share
  //                over the blocks first (NSA's group-shared selection sums the heads' attention
  //                probabilities), so a head with large logits cannot outvote the others
  //   "prob-max"   max_g of the same per-head shares: a block any head wants is kept
  // logit-sum stays the default: prob-sum had 24% less KL to dense teacher-forced on held-out
  // texts at 4K, but did no better end to end on the eval table (docs/sparse-eval.md).
  std::string group_score = "logit-sum";
  // Each block chosen by score also brings the next `successor_blocks` blocks, inside the same
  // budget: the draft tokens after the first one continue what the first query found, and
  // that continuation often lies in the following block (passkey: " Remember it." after the key).
  int successor_blocks = 0;
  // The first dense_layers layers attend densely (Quest leaves its first two layers dense: their
  // attention is the least concentrated).
  int dense_layers = 0;
  // Inter-layer reuse: layers that compute a selection (refresh); the others reuse the nearest
  // earlier refresh layer's. Empty = every layer refreshes. Layer 0 always refreshes.
  std::vector<int> anchors;
  std::string calibration;           // file the anchors came from, if any
  // Sparse FFN.
  bool ffn = false;
  double ffn_threshold = 0.05;       // tau on |silu(gate)|
  bool ffn_union = false;            // a channel is kept for every tree node if any node keeps it
  // MoE expert skipping (MoE models only).
  bool moe = false;
  int moe_skip_budget = 0;
  std::string moe_calibration;                     // thresholds file (engine/model/moe_calibration.h)
  std::vector<std::vector<double>> moe_thresholds;  // [layer][s - 1], loaded from moe_calibration

  bool strict() const { return !attention && !ffn && !moe; }
  // Whether layer l reuses (true) or computes its selection; the anchor it reuses.
  bool reuses(int layer) const;
  int anchor_for(int layer) const;

  nlohmann::json to_json() const;
};

Expected<SparseConfig> sparse_preset(std::string_view name);
// A preset (key "preset", default strict) with any field overridden: {"preset": "sa", "eta": 0.1,
// "dense_below": 2048, "sink_blocks": 1, "local_blocks": 2, "query_mode": "group-union",
// "order": "dfs", "group_size": 4, "anchors": [0, 3, 7], "ffn_threshold": 0.05, ...}.
Expected<SparseConfig> sparse_config_from_json(const nlohmann::json& json);
Expected<SparseConfig> load_sparse_config(const std::string& path);
// Range checks against the model: eta in (0, 1], tau >= 0, anchors inside [0, n_layers), ...
Status validate(const SparseConfig& config, int n_layers, bool moe_model);

// Blocks kept per KV head for a committed context of `context_len` tokens (the rule above);
// the total number of blocks when nothing is dropped.
int64_t kept_blocks(const SparseConfig& config, int64_t context_len, int block_size);

}  // namespace specula
