#include "ui/models/layer_stats.h"

#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <unordered_map>

namespace specula::ui {
namespace {

using profiler::LayerSelectionRow;

int64_t popcount(const std::vector<uint8_t>& bits) {
  int64_t n = 0;
  for (uint8_t b : bits) n += std::popcount(b);
  return n;
}

bool in_scope(int64_t round, std::optional<int64_t> scope) { return !scope || *scope == round; }

// The rows of one round, by layer.
std::map<int32_t, std::vector<const LayerSelectionRow*>> by_layer(const std::vector<LayerSelectionRow>& rows) {
  std::map<int32_t, std::vector<const LayerSelectionRow*>> layers;
  for (const auto& r : rows) layers[r.selection.layer].push_back(&r);
  return layers;
}

bool per_query(const LayerSelectionRow& r) { return r.selection.query >= 0; }

}  // namespace

void Grid::add(int row, int col, double value) {
  const size_t i = static_cast<size_t>(row) * cols + col;
  const int64_t n = ++samples[i];
  values[i] = n == 1 ? value : values[i] + (value - values[i]) / static_cast<double>(n);
}

int64_t intersection_count(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += std::popcount(static_cast<uint8_t>(a[i] & b[i]));
  return n;
}

int64_t union_count(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const uint8_t x = i < a.size() ? a[i] : 0;
    const uint8_t y = i < b.size() ? b[i] : 0;
    n += std::popcount(static_cast<uint8_t>(x | y));
  }
  return n;
}

Grid distance_overlap(const SessionData& data, std::optional<int64_t> round) {
  int max_depth = 0;
  for (const auto& [r, nodes] : data.draft_nodes) {
    if (!in_scope(r, round)) continue;
    for (const auto& n : nodes) max_depth = std::max(max_depth, n.depth);
  }
  Grid grid(data.layer_count(), std::max(1, max_depth));
  for (const auto& [r, rows] : data.selections) {
    if (!in_scope(r, round)) continue;
    auto nodes = data.draft_nodes.find(r);
    if (nodes == data.draft_nodes.end()) continue;
    std::unordered_map<int32_t, int32_t> depth_of;
    for (const auto& n : nodes->second) depth_of[n.node] = n.depth;
    for (const auto& [layer, layer_rows] : by_layer(rows)) {
      std::vector<std::pair<int32_t, const LayerSelectionRow*>> queries;  // (depth, row)
      for (const LayerSelectionRow* row : layer_rows) {
        if (!per_query(*row)) continue;
        auto d = depth_of.find(row->selection.query);
        if (d != depth_of.end()) queries.emplace_back(d->second, row);
      }
      for (size_t i = 0; i < queries.size(); ++i) {
        for (size_t j = i + 1; j < queries.size(); ++j) {
          const int distance = std::abs(queries[i].first - queries[j].first);
          if (distance >= grid.cols) continue;
          const auto& a = queries[i].second->selection.block_bits;
          const auto& b = queries[j].second->selection.block_bits;
          const int64_t larger = std::max(popcount(a), popcount(b));
          if (larger == 0) continue;
          grid.add(layer, distance, static_cast<double>(intersection_count(a, b)) / static_cast<double>(larger));
        }
      }
    }
  }
  return grid;
}

Grid layer_jaccard(const SessionData& data, std::optional<int64_t> round) {
  const int layers = data.layer_count();
  Grid grid(layers, layers);
  for (const auto& [r, rows] : data.selections) {
    if (!in_scope(r, round)) continue;
    // (query, group) -> layer -> row
    std::map<std::pair<int32_t, int32_t>, std::map<int32_t, const LayerSelectionRow*>> keyed;
    for (const auto& row : rows) keyed[{row.selection.query, row.selection.group}][row.selection.layer] = &row;
    for (const auto& [key, layer_rows] : keyed) {
      for (const auto& [la, a] : layer_rows) {
        for (const auto& [lb, b] : layer_rows) {
          const int64_t u = union_count(a->selection.block_bits, b->selection.block_bits);
          if (u == 0) continue;
          grid.add(la, lb, static_cast<double>(intersection_count(a->selection.block_bits, b->selection.block_bits)) /
                               static_cast<double>(u));
        }
      }
    }
  }
  return grid;
}

BlockCounts block_counts(const SessionData& data, int64_t round) {
  BlockCounts out;
  out.sink_blocks = data.sparse.sink_blocks;
  out.local_blocks = data.sparse.local_blocks;
  auto it = data.selections.find(round);
  if (it == data.selections.end() || it->second.empty()) {
    out.grid = Grid(data.layer_count(), 0);
    return out;
  }
  int32_t total = 0;
  for (const auto& r : it->second) total = std::max(total, r.selection.total_blocks);
  out.blocks_per_head = data.blocks_per_head(round, total);
  out.grid = Grid(data.layer_count(), static_cast<int>(out.blocks_per_head));
  std::fill(out.grid.values.begin(), out.grid.values.end(), 0.0);
  for (const auto& [layer, rows] : by_layer(it->second)) {
    // The finest rows this layer has: per query, else per group, else the whole tree.
    std::vector<const LayerSelectionRow*> chosen;
    for (int pass = 0; pass < 3 && chosen.empty(); ++pass) {
      for (const LayerSelectionRow* r : rows) {
        const bool q = r->selection.query >= 0;
        const bool g = !q && r->selection.group >= 0;
        if ((pass == 0 && q) || (pass == 1 && g) || (pass == 2 && !q && !g)) chosen.push_back(r);
      }
    }
    out.queries = std::max(out.queries, static_cast<int64_t>(chosen.size()));
    std::vector<int64_t> count(static_cast<size_t>(out.blocks_per_head), 0);
    for (const LayerSelectionRow* r : chosen) {
      std::set<int64_t> blocks;  // a block counts once per query across heads
      for (int32_t id : unpack_block_bits(r->selection.block_bits)) blocks.insert(id % out.blocks_per_head);
      for (int64_t b : blocks) ++count[static_cast<size_t>(b)];
    }
    for (int64_t b = 0; b < out.blocks_per_head; ++b) {
      const size_t i = static_cast<size_t>(layer) * out.grid.cols + static_cast<size_t>(b);
      out.grid.values[i] = static_cast<double>(count[static_cast<size_t>(b)]);
      out.grid.samples[i] = static_cast<int64_t>(chosen.size());
    }
  }
  return out;
}

int Schedule::refresh_count(int layer) const {
  int n = 0;
  for (size_t c = 0; c < rounds.size(); ++c) n += at(layer, static_cast<int>(c)) == LayerMode::kRefresh;
  return n;
}

Schedule layer_schedule(const SessionData& data) {
  Schedule s;
  s.layers = data.layer_count();
  for (const auto& r : data.rounds) s.rounds.push_back(r.round);
  s.modes.assign(static_cast<size_t>(s.layers) * s.rounds.size(), LayerMode::kNone);
  s.anchor.assign(static_cast<size_t>(s.layers), false);
  for (size_t c = 0; c < s.rounds.size(); ++c) {
    auto it = data.selections.find(s.rounds[c]);
    if (it == data.selections.end()) continue;
    for (const auto& row : it->second) {
      const auto& sel = row.selection;
      if (sel.layer < 0 || sel.layer >= s.layers) continue;
      const LayerMode mode = sel.mode == SelectionMode::kReuse ? LayerMode::kReuse : LayerMode::kRefresh;
      s.modes[static_cast<size_t>(sel.layer) * s.rounds.size() + c] = mode;
      if (mode == LayerMode::kRefresh) s.anchor[static_cast<size_t>(sel.layer)] = true;
      if (mode == LayerMode::kReuse && sel.anchor_layer >= 0 && sel.anchor_layer < s.layers) {
        s.anchor[static_cast<size_t>(sel.anchor_layer)] = true;
      }
    }
  }
  return s;
}

std::vector<LayerExperts> expert_stats(const SessionData& data, std::optional<int64_t> round) {
  std::vector<LayerExperts> out(static_cast<size_t>(std::max(0, data.layer_count())));
  std::vector<int64_t> n(out.size(), 0);
  for (const auto& m : data.moe) {
    if (!in_scope(m.round, round) || m.layer < 0 || static_cast<size_t>(m.layer) >= out.size()) continue;
    auto& e = out[static_cast<size_t>(m.layer)];
    e.routed += static_cast<double>(m.routed_experts.size());
    e.skipped += static_cast<double>(m.skipped_experts.size());
    e.total = std::max(e.total, m.total_experts);
    ++n[static_cast<size_t>(m.layer)];
  }
  for (size_t l = 0; l < out.size(); ++l) {
    if (n[l] == 0) continue;
    out[l].routed /= static_cast<double>(n[l]);
    out[l].skipped /= static_cast<double>(n[l]);
  }
  return out;
}

std::vector<LayerFfn> ffn_stats(const SessionData& data, std::optional<int64_t> round) {
  std::vector<LayerFfn> out(static_cast<size_t>(std::max(0, data.layer_count())));
  std::vector<int64_t> n(out.size(), 0);
  std::vector<double> ratio_sum(out.size(), 0.0);
  std::vector<int64_t> ratio_n(out.size(), 0);
  for (const auto& f : data.ffn) {
    if (!in_scope(f.round, round) || f.layer < 0 || static_cast<size_t>(f.layer) >= out.size()) continue;
    const size_t l = static_cast<size_t>(f.layer);
    ++n[l];
    out[l].skipped += f.skipped ? 1.0 : 0.0;
    if (f.total_channels > 0) {
      ratio_sum[l] += f.skipped ? 0.0 : static_cast<double>(f.active_channels) / f.total_channels;
      ++ratio_n[l];
    }
  }
  for (size_t l = 0; l < out.size(); ++l) {
    if (n[l] > 0) out[l].skipped /= static_cast<double>(n[l]);
    if (ratio_n[l] > 0) out[l].active_ratio = ratio_sum[l] / static_cast<double>(ratio_n[l]);
  }
  return out;
}

}  // namespace specula::ui
