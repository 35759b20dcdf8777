#include "engine/sparse/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "kernels/cpu/block_select.h"

namespace specula {
namespace {

std::vector<int32_t> union_of(const std::vector<const std::vector<int32_t>*>& sets) {
  std::vector<int32_t> out;
  for (const auto* s : sets) out.insert(out.end(), s->begin(), s->end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

SparseSelection::SparseSelection(const SparseConfig& config, const KvCache& kv, int n_heads, int64_t rows,
                                 std::span<const int32_t> order, Observer* observer, int64_t round, SparseStats* stats)
    : cfg_(config),
      kv_(kv),
      group_(n_heads / kv.config().n_kv_heads),
      rows_(rows),
      observer_(observer),
      round_(round),
      stats_(stats) {
  const int64_t B = kv.block_size();
  committed_ = kv.committed();
  nb_ = (committed_ + B - 1) / B;
  k_ = kept_blocks(cfg_, committed_, static_cast<int>(B));
  active_ = cfg_.attention && committed_ > 0 && k_ < nb_;
  if (!active_) return;  // dense: only the byte counts are needed (strict runs take this path every step)
  if (static_cast<int64_t>(order.size()) == rows) {
    order_.assign(order.begin(), order.end());
  } else {
    order_.resize(static_cast<size_t>(rows));
    std::iota(order_.begin(), order_.end(), 0);
  }
  const auto H = static_cast<size_t>(kv.config().n_kv_heads);
  sel_.assign(H, std::vector<std::vector<int32_t>>(static_cast<size_t>(rows)));
  scores_.assign(H, std::vector<float>(static_cast<size_t>(nb_)));
}

std::vector<int32_t> SparseSelection::select_one(int layer, int64_t h, const float* q_group, int64_t n_q) {
  std::vector<float>& scores = scores_[static_cast<size_t>(h)];
  const int64_t hd = kv_.config().head_dim, B = kv_.block_size();
  const bool exact = cfg_.scoring == "exact";
  // Largest q·k over the block's committed keys (the oracle), for n queries at q summed.
  const auto exact_score = [&](int64_t b, const float* q, int64_t n) {
    const float* keys = kv_.keys(layer, h, b);  // (B, hd)
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < std::min(B, committed_ - b * B); ++j) {
      float dot = 0.0f;
      for (int64_t g = 0; g < n; ++g) {
        for (int64_t i = 0; i < hd; ++i) dot += q[g * hd + i] * keys[j * hd + i];
      }
      best = std::max(best, dot);
    }
    return best;
  };
  const auto score = [&](int64_t b, const float* q, int64_t n) {
    return exact ? exact_score(b, q, n) : quest_bound(q, n, hd, kv_.key_min(layer, h, b), kv_.key_max(layer, h, b));
  };
  if (cfg_.group_score == "logit-sum") {
    for (int64_t b = 0; b < nb_; ++b) scores[static_cast<size_t>(b)] = score(b, q_group, n_q);
  } else {
    // Each head's scores become a softmax share over the blocks, then the group sums or maxes them.
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const bool sum = cfg_.group_score == "prob-sum";
    std::fill(scores.begin(), scores.end(), 0.0f);
    std::vector<float> head(static_cast<size_t>(nb_));
    for (int64_t g = 0; g < n_q; ++g) {
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t b = 0; b < nb_; ++b) {
        head[static_cast<size_t>(b)] = scale * score(b, q_group + g * hd, 1);
        top = std::max(top, head[static_cast<size_t>(b)]);
      }
      double z = 0;
      for (float& v : head) {
        v = std::exp(v - top);
        z += v;
      }
      for (int64_t b = 0; b < nb_; ++b) {
        const auto p = static_cast<float>(head[static_cast<size_t>(b)] / z);
        float& s = scores[static_cast<size_t>(b)];
        s = sum ? s + p : std::max(s, p);
      }
    }
  }
  if (cfg_.successor_blocks == 0) return select_blocks(scores, k_, cfg_.sink_blocks, cfg_.local_blocks);
  return select_blocks_with_successors(scores, k_, cfg_.sink_blocks, cfg_.local_blocks, cfg_.successor_blocks);
}

void SparseSelection::select(int layer, const float* q, int64_t q_stride) {
  const int64_t H = kv_.config().n_kv_heads, hd = kv_.config().head_dim;
  const int64_t C = cfg_.group_size;
  const bool dense = layer < cfg_.dense_layers;
  // A layer whose anchor attends densely has no selection to reuse: it selects itself.
  const bool reuse = !dense && cfg_.reuses(layer) && cfg_.anchor_for(layer) >= cfg_.dense_layers;
  if (dense) {
    std::vector<int32_t> all(static_cast<size_t>(nb_));
    std::iota(all.begin(), all.end(), 0);
    for (auto& rows : sel_) {
      for (auto& r : rows) r = all;
    }
  } else if (!reuse) {
    for (int64_t h = 0; h < H; ++h) {
      auto& rows = sel_[static_cast<size_t>(h)];
      const auto q_of = [&](int64_t r) { return q + r * q_stride + h * group_ * hd; };
      switch (cfg_.query_mode) {
        case QueryMode::kFirst: {
          const auto s = select_one(layer, h, q_of(0), group_);
          for (auto& r : rows) r = s;
          break;
        }
        case QueryMode::kPerQuery:
        case QueryMode::kGroupUnion:
          for (int64_t r = 0; r < rows_; ++r) rows[static_cast<size_t>(r)] = select_one(layer, h, q_of(r), group_);
          break;
        case QueryMode::kGroupShared:
          for (int64_t g0 = 0; g0 < rows_; g0 += C) {
            const auto s = select_one(layer, h, q_of(order_[static_cast<size_t>(g0)]), group_);
            for (int64_t i = g0; i < std::min(rows_, g0 + C); ++i) rows[static_cast<size_t>(order_[static_cast<size_t>(i)])] = s;
          }
          break;
      }
    }
  }
  // Bytes: what a kernel sharing loads as the mode allows must read, against a dense read.
  const int64_t B = kv_.block_size();
  const auto block_bytes = [&](int32_t b) {
    return std::min<int64_t>(B, committed_ - int64_t{b} * B) * hd * 2 * static_cast<int64_t>(sizeof(float));
  };
  int64_t read = 0;
  for (int64_t h = 0; h < H; ++h) {
    const auto& rows = sel_[static_cast<size_t>(h)];
    std::vector<std::vector<int32_t>> loads;  // what one kernel pass loads, per pass
    if (dense || cfg_.query_mode == QueryMode::kFirst) {
      loads.push_back(rows[0]);
    } else if (cfg_.query_mode == QueryMode::kPerQuery) {
      loads.assign(rows.begin(), rows.end());
    } else {
      for (int64_t g0 = 0; g0 < rows_; g0 += C) {
        std::vector<const std::vector<int32_t>*> members;
        for (int64_t i = g0; i < std::min(rows_, g0 + C); ++i) members.push_back(&rows[static_cast<size_t>(order_[static_cast<size_t>(i)])]);
        loads.push_back(union_of(members));
      }
    }
    for (const auto& blocks : loads) {
      for (int32_t b : blocks) read += block_bytes(b);
    }
    if (!reuse && !dense) {
      // Scoring reads the Quest min/max of every block, or (exact oracle) every committed key.
      read += (cfg_.scoring == "exact" ? committed_ : nb_ * 2) * hd * static_cast<int64_t>(sizeof(float));
    }
  }
  if (stats_) {
    stats_->kv_bytes_read += read;
    stats_->kv_bytes_dense += H * committed_ * hd * 2 * static_cast<int64_t>(sizeof(float));
  }
  observe(layer, reuse, reuse ? cfg_.anchor_for(layer) : layer);
}

void SparseSelection::count_dense_layer() {
  if (!stats_) return;
  const int64_t bytes = kv_.config().n_kv_heads * committed_ * kv_.config().head_dim * 2 * static_cast<int64_t>(sizeof(float));
  stats_->kv_bytes_read += bytes;
  stats_->kv_bytes_dense += bytes;
}

void SparseSelection::observe(int layer, bool reuse, int anchor) {
  if (!observes(observer_, EventKind::kLayerSelection)) return;
  const int64_t H = kv_.config().n_kv_heads;
  // Bit h·nb + b: block b of KV head h (the session's block id for a layer).
  const auto event = [&](int32_t query, int32_t group, const std::function<std::vector<int32_t>(int64_t h)>& blocks_of) {
    LayerSelectionEvent e;
    e.round = round_;
    e.layer = layer;
    e.query = query;
    e.group = group;
    e.mode = reuse ? SelectionMode::kReuse : SelectionMode::kRefresh;
    e.anchor_layer = reuse ? anchor : -1;
    e.total_blocks = static_cast<int32_t>(H * nb_);
    std::vector<int32_t> ids;
    for (int64_t h = 0; h < H; ++h) {
      for (int32_t b : blocks_of(h)) ids.push_back(static_cast<int32_t>(h * nb_ + b));
    }
    e.block_bits = pack_block_bits(ids, e.total_blocks);
    observer_->on_event(e);
  };
  const auto all_rows = [&](int64_t h) {
    std::vector<const std::vector<int32_t>*> members;
    for (const auto& r : sel_[static_cast<size_t>(h)]) members.push_back(&r);
    return union_of(members);
  };
  event(-1, -1, all_rows);
  const bool grouped = cfg_.query_mode == QueryMode::kGroupUnion || cfg_.query_mode == QueryMode::kGroupShared;
  const int64_t C = cfg_.group_size;
  if (grouped) {
    for (int64_t g0 = 0, g = 0; g0 < rows_; g0 += C, ++g) {
      event(-1, static_cast<int32_t>(g), [&](int64_t h) {
        std::vector<const std::vector<int32_t>*> members;
        for (int64_t i = g0; i < std::min(rows_, g0 + C); ++i) {
          members.push_back(&sel_[static_cast<size_t>(h)][static_cast<size_t>(order_[static_cast<size_t>(i)])]);
        }
        return union_of(members);
      });
    }
  }
  if (observes(observer_, EventKind::kQuerySelection)) {
    for (int64_t r = 0; r < rows_; ++r) {
      const int32_t group = grouped ? static_cast<int32_t>(std::find(order_.begin(), order_.end(), r) - order_.begin()) /
                                          static_cast<int32_t>(C)
                                    : -1;
      event(static_cast<int32_t>(r), group, [&](int64_t h) { return sel_[static_cast<size_t>(h)][static_cast<size_t>(r)]; });
    }
  }
}

}  // namespace specula
