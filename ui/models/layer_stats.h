#pragma once
// The per-layer numbers behind the heatmaps, the refresh/reuse schedule and the expert/FFN
// bars, computed from a loaded session. Pure functions over SessionData (no Qt), tested guiless.
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "ui/models/session_data.h"

namespace specula::ui {

// rows x cols of values; NaN where nothing was measured. samples counts what each mean averages.
struct Grid {
  int rows = 0;
  int cols = 0;
  std::vector<double> values;
  std::vector<int64_t> samples;
  Grid() = default;
  Grid(int r, int c) : rows(r), cols(c), values(static_cast<size_t>(r) * c, std::nan("")), samples(values.size(), 0) {}
  double at(int row, int col) const { return values[static_cast<size_t>(row) * cols + col]; }
  int64_t samples_at(int row, int col) const { return samples[static_cast<size_t>(row) * cols + col]; }
  void add(int row, int col, double value);  // running mean
};

// |a ∩ b| and |a ∪ b| of two block bitsets (LSB-first bytes; the shorter is zero-extended).
int64_t intersection_count(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);
int64_t union_count(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// (a) rows = layers, cols = tree distance |depth_i - depth_j| (0 = two nodes at the same depth):
// the mean overlap |S_i ∩ S_j| / max(|S_i|, |S_j|) of the blocks two draft nodes' queries
// retrieved (the seed's Figure 2), over every pair of per-query selections of the round, or of
// every round when round is empty. Needs per-query rows (recorded at level full).
Grid distance_overlap(const SessionData& data, std::optional<int64_t> round);

// (b) rows, cols = layers: the mean Jaccard |S_a ∩ S_b| / |S_a ∪ S_b| of the two layers'
// selections for the same query (or group, or whole tree), over the round or every round.
Grid layer_jaccard(const SessionData& data, std::optional<int64_t> round);

// (c) rows = layers, cols = block index within a KV head: how many queries read each block in
// the round (a block counts once per query whatever the head). Uses the per-query rows, else the
// group rows, else the whole-tree row.
struct BlockCounts {
  Grid grid;
  int64_t blocks_per_head = 0;
  int64_t queries = 0;  // the most queries any layer had
  int sink_blocks = 0;  // [0, sink) are sink blocks
  int local_blocks = 0; // [blocks_per_head - local, blocks_per_head) are local blocks
};
BlockCounts block_counts(const SessionData& data, int64_t round);

// Refresh/reuse per layer and round: rows = layers, cols = rounds (in data.rounds order).
enum class LayerMode : int8_t { kNone = 0, kRefresh = 1, kReuse = 2 };
struct Schedule {
  int layers = 0;
  std::vector<int64_t> rounds;  // column -> round id
  std::vector<LayerMode> modes; // layers x rounds, row-major
  std::vector<bool> anchor;     // per layer: refreshed in some round, or the anchor of a reuse
  LayerMode at(int layer, int column) const { return modes[static_cast<size_t>(layer) * rounds.size() + column]; }
  int refresh_count(int layer) const;
};
Schedule layer_schedule(const SessionData& data);

// Per layer, for one round or averaged over the rounds that recorded the layer.
struct LayerExperts {
  double routed = 0;   // experts that ran
  double skipped = 0;  // experts the router chose but the policy skipped
  int total = 0;       // experts in the layer
};
struct LayerFfn {
  double active_ratio = std::nan("");  // active / total channels
  double skipped = 0;                   // fraction of rounds whose whole FFN was skipped
};
std::vector<LayerExperts> expert_stats(const SessionData& data, std::optional<int64_t> round);
std::vector<LayerFfn> ffn_stats(const SessionData& data, std::optional<int64_t> round);

}  // namespace specula::ui
