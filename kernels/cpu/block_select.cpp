#include "kernels/cpu/block_select.h"

#include <algorithm>
#include <numeric>

namespace specula {

float quest_bound(const float* q, int64_t n_queries, int64_t head_dim, const float* kmin, const float* kmax) {
  float total = 0.0f;
  for (int64_t g = 0; g < n_queries; ++g) {
    const float* qg = q + g * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) total += std::max(qg[i] * kmax[i], qg[i] * kmin[i]);
  }
  return total;
}

std::vector<int32_t> select_blocks(std::span<const float> scores, int64_t k, int64_t sink, int64_t local) {
  const auto n = static_cast<int64_t>(scores.size());
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  if (k >= n) return all;
  std::vector<uint8_t> chosen(static_cast<size_t>(n), 0);
  int64_t count = 0;
  const auto take = [&](int64_t b) {
    if (b >= 0 && b < n && !chosen[static_cast<size_t>(b)]) {
      chosen[static_cast<size_t>(b)] = 1;
      ++count;
    }
  };
  for (int64_t b = 0; b < sink; ++b) take(b);
  for (int64_t b = n - local; b < n; ++b) take(b);
  std::vector<int32_t> rest;
  for (int64_t b = 0; b < n; ++b) {
    if (!chosen[static_cast<size_t>(b)]) rest.push_back(static_cast<int32_t>(b));
  }
  const int64_t want = std::max<int64_t>(0, std::min<int64_t>(k - count, static_cast<int64_t>(rest.size())));
  std::partial_sort(rest.begin(), rest.begin() + want, rest.end(), [&](int32_t a, int32_t b) {
    const float sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    return sa > sb || (sa == sb && a < b);
  });
  for (int64_t i = 0; i < want; ++i) take(rest[static_cast<size_t>(i)]);
  std::vector<int32_t> out;
  for (int64_t b = 0; b < n; ++b) {
    if (chosen[static_cast<size_t>(b)]) out.push_back(static_cast<int32_t>(b));
  }
  return out;
}

std::vector<int32_t> select_blocks_with_successors(std::span<const float> scores, int64_t k, int64_t sink,
                                                   int64_t local, int64_t successors) {
  const auto n = static_cast<int64_t>(scores.size());
  std::vector<uint8_t> chosen(static_cast<size_t>(n), 0);
  int64_t count = 0;
  const auto take = [&](int64_t b) {
    if (b >= 0 && b < n && count < std::max(k, sink + local) && !chosen[static_cast<size_t>(b)]) {
      chosen[static_cast<size_t>(b)] = 1;
      ++count;
    }
  };
  for (int64_t b = 0; b < sink; ++b) take(b);
  for (int64_t b = n - local; b < n; ++b) take(b);
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)]; });
  for (int32_t b : order) {
    if (count >= k) break;
    for (int64_t i = 0; i <= successors; ++i) take(b + i);  // b itself may already be a successor
  }
  std::vector<int32_t> out;
  for (int64_t b = 0; b < n; ++b) {
    if (chosen[static_cast<size_t>(b)]) out.push_back(static_cast<int32_t>(b));
  }
  return out;
}

}  // namespace specula
