#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace specula {

Expected<KvCache> KvCache::create(const KvCacheConfig& config) {
  if (config.block_size < kMinBlockSize || config.block_size > kMaxBlockSize) {
    return make_error("KV cache: block size " + std::to_string(config.block_size) + " is out of range (" +
                      std::to_string(kMinBlockSize) + ".." + std::to_string(kMaxBlockSize) + ")");
  }
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 || config.capacity <= 0) {
    return make_error("KV cache: layers, KV heads, head dim and capacity must be positive (got " +
                      std::to_string(config.n_layers) + ", " + std::to_string(config.n_kv_heads) + ", " +
                      std::to_string(config.head_dim) + ", " + std::to_string(config.capacity) + ")");
  }
  return KvCache(config);
}

Expected<KvCache> KvCache::for_model(const ModelConfig& model, int block_size, int64_t max_tokens) {
  if (max_tokens < 0) return make_error("KV cache: max_tokens " + std::to_string(max_tokens) + " is negative");
  KvCacheConfig config;
  config.n_layers = model.n_layers;
  config.n_kv_heads = model.n_kv_heads;
  config.head_dim = model.head_dim;
  config.capacity = max_tokens > 0 ? max_tokens : model.context_length;
  config.block_size = block_size;
  return create(config);
}

void KvCache::ensure_blocks(int64_t rows) {
  const int64_t need = (rows + config_.block_size - 1) / config_.block_size;
  const auto floats = static_cast<size_t>(config_.n_layers * config_.n_kv_heads * slot_floats());
  while (static_cast<int64_t>(blocks_.size()) < need) blocks_.push_back(std::make_unique<float[]>(floats));
}

Expected<int64_t> KvCache::append_provisional(int64_t n) {
  if (n < 0) return make_error("KV cache: cannot append " + std::to_string(n) + " rows");
  if (size() + n > config_.capacity) {
    return make_error("KV cache full: " + std::to_string(size()) + " + " + std::to_string(n) +
                      " tokens exceed the capacity of " + std::to_string(config_.capacity));
  }
  const int64_t first = size();
  ensure_blocks(first + n);
  provisional_ += n;
  return first;
}

const float* KvCache::key_row(int64_t layer, int64_t head, int64_t row) const {
  return keys(layer, head, row / config_.block_size) + (row % config_.block_size) * config_.head_dim;
}

const float* KvCache::value_row(int64_t layer, int64_t head, int64_t row) const {
  return values(layer, head, row / config_.block_size) + (row % config_.block_size) * config_.head_dim;
}

void KvCache::write(int64_t layer, int64_t row, const float* k, const float* v) {
  const int64_t B = config_.block_size, D = config_.head_dim;
  const int64_t block = row / B, in_block = row % B;
  for (int64_t h = 0; h < config_.n_kv_heads; ++h) {
    float* base = slot(layer, h, block);
    const float* kh = k + h * D;
    std::memcpy(base + in_block * D, kh, static_cast<size_t>(D) * sizeof(float));
    std::memcpy(base + kv_len() + in_block * D, v + h * D, static_cast<size_t>(D) * sizeof(float));
    float* lo = base + 2 * kv_len();
    float* hi = lo + D;
    if (in_block == 0) {  // first row of the block (re)starts its bounds
      std::memcpy(lo, kh, static_cast<size_t>(D) * sizeof(float));
      std::memcpy(hi, kh, static_cast<size_t>(D) * sizeof(float));
    } else {
      for (int64_t d = 0; d < D; ++d) {
        lo[d] = std::min(lo[d], kh[d]);
        hi[d] = std::max(hi[d], kh[d]);
      }
    }
  }
}

void KvCache::move_row(int64_t from, int64_t to) {
  const int64_t B = config_.block_size, D = config_.head_dim;
  const auto bytes = static_cast<size_t>(D) * sizeof(float);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (int64_t h = 0; h < config_.n_kv_heads; ++h) {
      const float* src = slot(l, h, from / B);
      float* dst = slot(l, h, to / B);
      std::memcpy(dst + (to % B) * D, src + (from % B) * D, bytes);
      std::memcpy(dst + kv_len() + (to % B) * D, src + kv_len() + (from % B) * D, bytes);
    }
  }
}

void KvCache::recompute_min_max(int64_t block_begin, int64_t block_end) {
  const int64_t B = config_.block_size, D = config_.head_dim, rows = size();
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t n = std::clamp<int64_t>(rows - b * B, 0, B);
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      for (int64_t h = 0; h < config_.n_kv_heads; ++h) {
        float* base = slot(l, h, b);
        float* lo = base + 2 * kv_len();
        float* hi = lo + D;
        // An empty block gets an empty interval (+inf, -inf): no key can score against it.
        std::fill(lo, lo + D, std::numeric_limits<float>::infinity());
        std::fill(hi, hi + D, -std::numeric_limits<float>::infinity());
        for (int64_t r = 0; r < n; ++r) {
          const float* key = base + r * D;
          for (int64_t d = 0; d < D; ++d) {
            lo[d] = std::min(lo[d], key[d]);
            hi[d] = std::max(hi[d], key[d]);
          }
        }
      }
    }
  }
}

Status KvCache::commit(std::span<const int> accepted_rows) {
  const int64_t n = static_cast<int64_t>(accepted_rows.size());
  std::vector<uint8_t> seen(static_cast<size_t>(provisional_), 0);
  for (int row : accepted_rows) {
    if (row < 0 || row >= provisional_) {
      return make_error("KV cache commit: row " + std::to_string(row) + " is not provisional (0.." +
                        std::to_string(provisional_ - 1) + ")");
    }
    if (seen[row]) return make_error("KV cache commit: row " + std::to_string(row) + " accepted twice");
    seen[row] = 1;
  }
  const int64_t old_end = size();
  // Rows move only towards the front; in increasing order a move never overwrites a row
  // still to be read. Otherwise go through a copy of the provisional region.
  bool increasing = true;
  for (int64_t i = 1; i < n; ++i) increasing &= accepted_rows[i] > accepted_rows[i - 1];
  if (increasing) {
    for (int64_t i = 0; i < n; ++i) {
      if (accepted_rows[i] != i) move_row(committed_ + accepted_rows[i], committed_ + i);
    }
  } else {
    // Stage the accepted rows after the provisional region, then move them into place.
    ensure_blocks(old_end + n);
    for (int64_t i = 0; i < n; ++i) move_row(committed_ + accepted_rows[i], old_end + i);
    for (int64_t i = 0; i < n; ++i) move_row(old_end + i, committed_ + i);
  }
  const int64_t first_block = committed_ / config_.block_size;
  committed_ += n;
  provisional_ = 0;
  const int64_t end_block = (old_end + config_.block_size - 1) / config_.block_size;
  recompute_min_max(first_block, end_block);
  return {};
}

void KvCache::commit_all() {
  committed_ += provisional_;
  provisional_ = 0;  // rows stay where they are; bounds already cover them
}

void KvCache::rollback() {
  if (provisional_ > 0) (void)truncate(committed_);  // cannot fail: committed_ is in range
}

Status KvCache::truncate(int64_t rows) {
  if (rows < 0 || rows > committed_) {
    return make_error("KV truncate: " + std::to_string(rows) + " rows outside 0.." + std::to_string(committed_));
  }
  const int64_t old_end = size();
  committed_ = rows;
  provisional_ = 0;
  recompute_min_max(rows / config_.block_size, (old_end + config_.block_size - 1) / config_.block_size);
  return {};
}

void KvCache::clear() {
  committed_ = 0;
  provisional_ = 0;
}

}  // namespace specula
