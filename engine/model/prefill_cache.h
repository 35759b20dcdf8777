#pragma once
// One prompt's prefill, kept for the next run of the same prompt. The eval harness runs every
// item strict and then under each sparse configuration; the prefill is dense in all of them and
// deterministic, so its KV rows and last-row logits are the same every time. At 4K-8K tokens the
// prefill is most of a run's time on the CPU, so restoring it makes a configuration's run cost
// its decode only. A restored prefill emits no per-layer events: only runs without an observer,
// sparse or MoE statistics use the cache (CpuTransformer::forward checks).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/kv_cache.h"

namespace specula {

class PrefillCache {
 public:
  // Whether `tokens` at positions 0..n-1 is the stored prompt and kv (empty) has its geometry;
  // then appends the rows to kv as provisional (as the forward would) and copies the last logits.
  bool restore(std::span<const int32_t> tokens, std::span<const int32_t> positions, KvCache& kv,
               std::span<float> logits) const;
  // Replaces the stored prompt with this one: kv holds its rows [0, n) (provisional or committed).
  void store(std::span<const int32_t> tokens, std::span<const int32_t> positions, const KvCache& kv,
             std::span<const float> logits);
  int64_t hits() const { return hits_; }

 private:
  std::vector<int32_t> tokens_;
  int64_t n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  std::vector<float> rows_;    // [layer][row][K (n_kv_heads·head_dim), V (n_kv_heads·head_dim)]
  std::vector<float> logits_;  // (vocab)
  mutable int64_t hits_ = 0;
};

}  // namespace specula
