#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/activation.h"

namespace specula {
namespace {

// Uniform in [0, 1) from the top 53 bits: unlike std::uniform_real_distribution, the same
// on every standard library.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(argmax_f32(logits.data(), static_cast<int64_t>(logits.size())));
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) return -1;
  if (!(params_.temperature > 0.0f)) return argmax(logits);
  const auto V = static_cast<int64_t>(logits.size());
  const float inv_t = 1.0f / params_.temperature;
  const int64_t k = params_.top_k > 0 ? std::min<int64_t>(params_.top_k, V) : V;
  const double top_p = std::clamp(static_cast<double>(params_.top_p), 0.0, 1.0);

  // Candidates sorted by logit (ties: lower id first), only as many as needed: the top k,
  // and for top-p a prefix that grows until it holds the nucleus. With neither, no sort: the
  // inverse-CDF walk below goes in id order.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const float max_logit = logits[static_cast<size_t>(argmax(logits))];
  double total = 0.0;  // softmax denominator over the top k
  if (k < V) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
    order.resize(static_cast<size_t>(k));
  }
  for (int32_t id : order) total += std::exp(static_cast<double>((logits[id] - max_logit) * inv_t));
  int64_t sorted = k < V ? k : 0;
  int64_t keep = static_cast<int64_t>(order.size());
  if (top_p < 1.0) {
    for (int64_t want = std::min<int64_t>(64, keep);; want = std::min<int64_t>(want * 8, keep)) {
      if (sorted < want) {
        std::partial_sort(order.begin() + sorted, order.begin() + want, order.end(), better);
        sorted = want;
      }
      double cumulative = 0.0;
      int64_t i = 0;
      for (; i < want; ++i) {
        cumulative += std::exp(static_cast<double>((logits[order[i]] - max_logit) * inv_t)) / total;
        if (cumulative >= top_p) break;
      }
      if (i < want) {
        keep = i + 1;
        break;
      }
      if (want == keep) break;  // rounding: the whole candidate set
    }
  }
  double mass = 0.0;
  for (int64_t i = 0; i < keep; ++i) mass += std::exp(static_cast<double>((logits[order[i]] - max_logit) * inv_t));
  double target = uniform01(rng_) * mass;
  for (int64_t i = 0; i < keep; ++i) {
    target -= std::exp(static_cast<double>((logits[order[i]] - max_logit) * inv_t));
    if (target < 0.0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(keep - 1)];
}

}  // namespace specula
