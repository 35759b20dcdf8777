#include "engine/model/prefill_cache.h"

#include <algorithm>

namespace specula {
namespace {

bool from_zero(std::span<const int32_t> positions) {
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

}  // namespace

bool PrefillCache::restore(std::span<const int32_t> tokens, std::span<const int32_t> positions, KvCache& kv,
                           std::span<float> logits) const {
  const auto& c = kv.config();
  if (tokens_.empty() || kv.size() != 0 || !from_zero(positions) || logits.size() != logits_.size() ||
      c.n_layers != n_layers_ || c.n_kv_heads != n_kv_heads_ || c.head_dim != head_dim_ ||
      !std::equal(tokens.begin(), tokens.end(), tokens_.begin(), tokens_.end())) {
    return false;
  }
  const auto n = static_cast<int64_t>(tokens_.size());
  if (!kv.append_provisional(n)) return false;
  const int64_t kvd = n_kv_heads_ * head_dim_;
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int64_t r = 0; r < n; ++r) {
      const float* row = rows_.data() + (l * n + r) * 2 * kvd;
      kv.write(l, r, row, row + kvd);
    }
  }
  std::copy(logits_.begin(), logits_.end(), logits.begin());
  ++hits_;
  return true;
}

void PrefillCache::store(std::span<const int32_t> tokens, std::span<const int32_t> positions, const KvCache& kv,
                         std::span<const float> logits) {
  tokens_.clear();
  if (!from_zero(positions) || kv.size() < static_cast<int64_t>(tokens.size())) return;
  const auto& c = kv.config();
  n_layers_ = c.n_layers;
  n_kv_heads_ = c.n_kv_heads;
  head_dim_ = c.head_dim;
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t kvd = n_kv_heads_ * head_dim_;
  rows_.resize(static_cast<size_t>(n_layers_ * n * 2 * kvd));
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int64_t r = 0; r < n; ++r) {
      float* row = rows_.data() + (l * n + r) * 2 * kvd;
      for (int64_t h = 0; h < n_kv_heads_; ++h) {
        std::copy_n(kv.key_row(l, h, r), head_dim_, row + h * head_dim_);
        std::copy_n(kv.value_row(l, h, r), head_dim_, row + kvd + h * head_dim_);
      }
    }
  }
  logits_.assign(logits.begin(), logits.end());
  tokens_.assign(tokens.begin(), tokens.end());
}

}  // namespace specula
