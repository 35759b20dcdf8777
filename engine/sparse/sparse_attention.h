#pragma once
// Block selection for one sparse verify forward (the CPU reference the CUDA kernels are checked
// against). Per layer and KV head, every new row (row 0 = the pending token, the "first draft
// token" of the paper; rows 1.. = tree nodes) gets the committed blocks it attends to:
//   first         row 0's query selects for all rows (the paper's default)
//   per-query     each row selects its own
//   group-union   rows in traversal order form groups of C; each row attends to its own set,
//                 the group loads the union (SSV exact)
//   group-shared  each group uses its first row's set (SSV approximate)
// Reuse layers take their anchor's selection. The new rows themselves are always attended
// densely under the tree mask. Every decision is emitted as observer events, and the bytes read
// are counted against a dense read.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/observer/observer.h"
#include "engine/sparse/sparse_config.h"

namespace specula {

// Accumulated over a forward (and by the loop over a run).
struct SparseStats {
  int64_t kv_bytes_read = 0;   // unique committed KV blocks loaded (K and V) + Quest metadata read
  int64_t kv_bytes_dense = 0;  // the same forward reading every committed row
  int64_t ffn_active = 0;      // channels kept, summed over layers and rows
  int64_t ffn_total = 0;
  int64_t moe_routed = 0;      // (token, expert) pairs the MoE routers chose, over layers
  int64_t moe_skipped = 0;     // of those, pairs the expert-skip rule dropped
  void add(const SparseStats& o) {
    kv_bytes_read += o.kv_bytes_read;
    kv_bytes_dense += o.kv_bytes_dense;
    ffn_active += o.ffn_active;
    ffn_total += o.ffn_total;
    moe_routed += o.moe_routed;
    moe_skipped += o.moe_skipped;
  }
};

class SparseSelection {
 public:
  // rows: new rows in this forward; order: those rows in traversal order (empty: 0..rows-1).
  SparseSelection(const SparseConfig& config, const KvCache& kv, int n_heads, int64_t rows,
                  std::span<const int32_t> order, Observer* observer, int64_t round, SparseStats* stats);

  // False when nothing is dropped (strict, no committed context, or under the budget): the
  // forward then reads everything, exactly as dense verification does.
  bool active() const { return active_; }
  int64_t kept_per_head() const { return k_; }
  int64_t committed_blocks() const { return nb_; }

  // Selects (refresh) or reuses layer l's blocks. q: row r's query heads at q + r·q_stride.
  void select(int layer, const float* q, int64_t q_stride);
  // Ascending committed block ids row r reads on KV head h (after select()).
  const std::vector<int32_t>& blocks(int64_t h, int64_t r) const { return sel_[static_cast<size_t>(h)][static_cast<size_t>(r)]; }

  // Counts a dense layer (no selection) into the stats.
  void count_dense_layer();

 private:
  std::vector<int32_t> select_one(int layer, int64_t h, const float* q_group, int64_t n_q);
  void observe(int layer, bool reuse, int anchor);

  const SparseConfig& cfg_;
  const KvCache& kv_;
  int group_;  // query heads per KV head
  int64_t rows_, nb_ = 0, k_ = 0, committed_ = 0;
  std::vector<int32_t> order_;
  Observer* observer_;
  int64_t round_;
  SparseStats* stats_;
  bool active_ = false;
  std::vector<std::vector<std::vector<int32_t>>> sel_;  // [kv head][row] -> blocks
  std::vector<std::vector<float>> scores_;              // scratch per KV head
};

}  // namespace specula
