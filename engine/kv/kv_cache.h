#pragma once
// Paged KV cache for one sequence: fixed-size blocks of `block_size` token rows (default 16,
// 8..128), per layer and KV head, with Quest metadata (element-wise min and max of the keys
// of every block, post-RoPE) kept current on every write.
//
// Rows [0, committed) are the committed context. Rows appended beyond it are provisional
// (draft-tree nodes during verification): commit(accepted) moves the accepted provisional
// rows, in order, to the end of the committed context and drops the rest; rollback() drops
// all of them. Block min/max is recomputed for every block either touches, so it always
// covers exactly the rows present.
//
// Storage per block, for each (layer, KV head): keys (block_size, head_dim), values
// (block_size, head_dim), key_min (head_dim), key_max (head_dim), all f32. Blocks are
// allocated as the sequence grows and kept for reuse.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/expected.h"
#include "engine/model/model_config.h"

namespace specula {

struct KvCacheConfig {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t capacity = 0;  // max rows, committed + provisional (usually the context length)
  int block_size = 16;   // tokens per block, 8..128
};

class KvCache {
 public:
  static constexpr int kMinBlockSize = 8;
  static constexpr int kMaxBlockSize = 128;

  static Expected<KvCache> create(const KvCacheConfig& config);
  // Geometry from the model; capacity = max_tokens, or the context length when 0.
  static Expected<KvCache> for_model(const ModelConfig& model, int block_size = 16, int64_t max_tokens = 0);

  const KvCacheConfig& config() const { return config_; }
  int block_size() const { return config_.block_size; }
  int64_t capacity() const { return config_.capacity; }
  int64_t committed() const { return committed_; }
  int64_t provisional() const { return provisional_; }
  int64_t size() const { return committed_ + provisional_; }                                   // rows present
  int64_t n_blocks() const { return (size() + config_.block_size - 1) / config_.block_size; }  // blocks in use

  // Reserves n provisional rows after the current ones (for every layer) and returns the
  // index of the first. Error when size() + n would exceed the capacity.
  Expected<int64_t> append_provisional(int64_t n);
  // Stores one row of `layer`: k and v are (n_kv_heads, head_dim). `row` must be present
  // (< size()); rows of a block must be written in increasing order after it was
  // (re)started, which is how append_provisional + a forward pass use it.
  void write(int64_t layer, int64_t row, const float* k, const float* v);

  // Keeps provisional rows accepted[0], accepted[1], ... (indices relative to the first
  // provisional row, distinct) as committed rows committed(), committed()+1, ...; drops the rest.
  Status commit(std::span<const int> accepted_rows);
  void commit_all();  // every provisional row, in order
  void rollback();    // drops every provisional row
  void clear();       // drops everything
  // Drops every provisional row and the committed rows past `rows` (0..committed()): the cache as
  // it stood with `rows` committed rows (a drafter's committed path, dropped after the round).
  Status truncate(int64_t rows);

  // Views of block `block` (rows [block·B, block·B + B)) of (layer, KV head). Rows beyond
  // size() hold stale data.
  const float* keys(int64_t layer, int64_t head, int64_t block) const { return slot(layer, head, block); }
  const float* values(int64_t layer, int64_t head, int64_t block) const { return slot(layer, head, block) + kv_len(); }
  const float* key_min(int64_t layer, int64_t head, int64_t block) const {
    return slot(layer, head, block) + 2 * kv_len();
  }
  const float* key_max(int64_t layer, int64_t head, int64_t block) const {
    return key_min(layer, head, block) + config_.head_dim;
  }
  // One row's key / value of (layer, head), row in [0, size()).
  const float* key_row(int64_t layer, int64_t head, int64_t row) const;
  const float* value_row(int64_t layer, int64_t head, int64_t row) const;

 private:
  explicit KvCache(const KvCacheConfig& config) : config_(config) {}
  int64_t kv_len() const { return config_.block_size * config_.head_dim; }
  int64_t slot_floats() const { return 2 * kv_len() + 2 * config_.head_dim; }
  float* slot(int64_t layer, int64_t head, int64_t block) const {
    return blocks_[block].get() + (layer * config_.n_kv_heads + head) * slot_floats();
  }
  void ensure_blocks(int64_t rows);
  void move_row(int64_t from, int64_t to);                         // all layers and heads
  void recompute_min_max(int64_t block_begin, int64_t block_end);  // over rows present

  KvCacheConfig config_;
  int64_t committed_ = 0;
  int64_t provisional_ = 0;
  std::vector<std::unique_ptr<float[]>> blocks_;
};

}  // namespace specula
