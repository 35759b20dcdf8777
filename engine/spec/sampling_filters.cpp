#include "engine/spec/sampling_filters.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/activation.h"

namespace specula {

std::vector<float> apply_sampling_filters(std::span<const float> logits, const SamplingParams& params) {
  std::vector<float> probs(logits.size());
  apply_sampling_filters(logits, params, probs);
  return probs;
}

void apply_sampling_filters(std::span<const float> logits, const SamplingParams& params, std::span<float> probs) {
  const size_t vocab = logits.size();
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (vocab == 0) return;

  const auto best = static_cast<size_t>(argmax_f32(logits.data(), static_cast<int64_t>(vocab)));
  if (params.temperature <= 0 || !(logits[best] > -INFINITY)) {
    probs[best] = 1.0f;
    return;
  }

  // Softmax in double, shifted by the max so the largest term is exp(0) = 1.
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  const double max_logit = logits[best];
  std::vector<double> weight(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    weight[i] = logits[i] > -INFINITY ? std::exp((static_cast<double>(logits[i]) - max_logit) * inv_t) : 0.0;
  }

  // Candidates by probability, descending; ties keep the lower id first.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto by_weight = [&](int32_t a, int32_t b) { return weight[a] > weight[b] || (weight[a] == weight[b] && a < b); };
  size_t keep = vocab;
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab) keep = static_cast<size_t>(params.top_k);
  const bool use_top_p = params.top_p < 1.0f;
  const bool filtered = keep < vocab || use_top_p;
  if (filtered) {
    if (use_top_p) {
      std::stable_sort(order.begin(), order.end(), by_weight);  // top-p needs the whole kept order
    } else {
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), by_weight);
    }
  }
  // Zero-weight tokens (-inf logits, or underflow) never survive a cut.
  while (filtered && keep > 1 && weight[order[keep - 1]] <= 0) --keep;

  if (use_top_p) {
    double kept_mass = 0;
    for (size_t r = 0; r < keep; ++r) kept_mass += weight[order[r]];
    const double need = static_cast<double>(params.top_p) * kept_mass;
    double running = 0;
    size_t r = 0;
    while (r < keep) {
      running += weight[order[r]];
      ++r;
      if (running >= need) break;
    }
    keep = std::max<size_t>(r, 1);
  }

  double total = 0;
  if (filtered) {
    for (size_t r = 0; r < keep; ++r) total += weight[order[r]];
    for (size_t r = 0; r < keep; ++r) probs[order[r]] = static_cast<float>(weight[order[r]] / total);
  } else {
    for (double w : weight) total += w;
    for (size_t i = 0; i < vocab; ++i) probs[i] = static_cast<float>(weight[i] / total);
  }
}

}  // namespace specula
