// BackendSession's default greedy and top-k forwards: forward() into a host buffer, then a scan.
#include "engine/backend/transformer_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/activation.h"

namespace specula {

Status BackendSession::forward_greedy(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                      const AttentionMask* mask, std::span<int32_t> greedy, LogitRows rows,
                                      const ForwardContext* context) {
  const size_t n_out = rows == LogitRows::All ? tokens.size() : 1;
  if (greedy.size() != n_out) {
    return make_error("forward_greedy: room for " + std::to_string(greedy.size()) + " tokens, the forward gives " +
                      std::to_string(n_out));
  }
  const auto V = static_cast<size_t>(vocab_size());
  std::vector<float> logits(n_out * V);
  if (auto ok = forward(tokens, positions, mask, logits, rows, context); !ok) return ok;
  for (size_t r = 0; r < n_out; ++r) {
    greedy[r] = static_cast<int32_t>(argmax_f32(logits.data() + r * V, static_cast<int64_t>(V)));
  }
  return {};
}

Status BackendSession::last_features(int64_t, std::span<float>) {
  return make_error(
      "the target's final-norm features (for the head drafter) are not supported on this backend; "
      "the head drafter runs on the CPU backend");
}

Status BackendSession::forward_top_k(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                     const AttentionMask* mask, float temperature, std::span<int32_t> ids,
                                     std::span<float> probs, const ForwardContext* context) {
  if (ids.empty() || ids.size() > 64 || probs.size() != ids.size()) {
    return make_error("forward_top_k: " + std::to_string(ids.size()) + " ids and " + std::to_string(probs.size()) +
                      " probabilities; want the same count, 1..64");
  }
  if (!(temperature > 0))
    return make_error("forward_top_k: temperature " + std::to_string(temperature) + " is not > 0");
  const auto V = static_cast<size_t>(vocab_size());
  if (ids.size() > V) return make_error("forward_top_k: more ids than the vocabulary has tokens");
  std::vector<float> logits(V);
  if (auto ok = forward(tokens, positions, mask, logits, LogitRows::Last, context); !ok) return ok;
  // apply_sampling_filters' arithmetic (engine/spec/sampling_filters.cpp) without top-k/top-p.
  const auto best = static_cast<size_t>(argmax_f32(logits.data(), static_cast<int64_t>(V)));
  std::fill(ids.begin(), ids.end(), -1);
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (!(logits[best] > -INFINITY)) {
    ids[0] = static_cast<int32_t>(best);
    probs[0] = 1.0f;
    return {};
  }
  const double inv_t = 1.0 / static_cast<double>(temperature);
  const double max_logit = logits[best];
  std::vector<double> weight(V);
  for (size_t i = 0; i < V; ++i) {
    weight[i] = logits[i] > -INFINITY ? std::exp((static_cast<double>(logits[i]) - max_logit) * inv_t) : 0.0;
  }
  double total = 0;
  for (double w : weight) total += w;
  std::vector<float> q(V);
  for (size_t i = 0; i < V; ++i) q[i] = static_cast<float>(weight[i] / total);
  // NaN logits have weight 0 like -inf ones; they are listed only after every other token.
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  auto rank = [&](int32_t a, int32_t b) {
    const bool nan_a = std::isnan(logits[static_cast<size_t>(a)]), nan_b = std::isnan(logits[static_cast<size_t>(b)]);
    if (nan_a != nan_b) return nan_b;
    return q[static_cast<size_t>(a)] > q[static_cast<size_t>(b)] ||
           (q[static_cast<size_t>(a)] == q[static_cast<size_t>(b)] && a < b);
  };
  const auto k = static_cast<std::ptrdiff_t>(ids.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(), rank);
  for (std::ptrdiff_t j = 0; j < k; ++j) {
    const int32_t id = order[static_cast<size_t>(j)];
    if (std::isnan(logits[static_cast<size_t>(id)])) break;
    ids[static_cast<size_t>(j)] = id;
    probs[static_cast<size_t>(j)] = q[static_cast<size_t>(id)];
  }
  return {};
}

}  // namespace specula
