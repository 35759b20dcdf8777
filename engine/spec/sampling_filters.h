#pragma once
// The one place logits become a sampling distribution for speculative decoding. Draft and
// target must go through the same transform (temperature, top-k, top-p), or lossless
// verification compares distributions the sampler never draws from.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling/sampler.h"

namespace specula {

// logits (vocab) -> probabilities (vocab), summing to 1.
//  - temperature <= 0: one-hot at the argmax (ties: lowest id).
//  - else softmax(logits / temperature); then top_k > 0 keeps the k most probable tokens
//    (ties: lower id first); then top_p < 1 keeps the smallest most-probable prefix of what is
//    left, renormalised, whose mass reaches top_p (always at least one token). Survivors are
//    renormalised; everything else is exactly 0.
// -inf logits get probability 0. Empty logits give an empty vector.
std::vector<float> apply_sampling_filters(std::span<const float> logits, const SamplingParams& params);
// The same into probs (logits.size() floats), allocating nothing at temperature <= 0: what a
// greedy verify does for every row of a tree.
void apply_sampling_filters(std::span<const float> logits, const SamplingParams& params, std::span<float> probs);

// Uniform double in [0, 1) from the top 53 bits of one draw: the same on every platform,
// unlike std::uniform_real_distribution whose algorithm is implementation-defined.
inline double uniform_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Draws an index with probability weights[i] / sum(weights); weights need not be normalised.
// Returns -1 when no weight is positive.
template <class T>
int32_t sample_index(std::span<const T> weights, std::mt19937_64& rng) {
  double total = 0;
  for (T w : weights) total += w > 0 ? static_cast<double>(w) : 0.0;
  if (!(total > 0)) return -1;
  const double target = uniform_unit(rng) * total;
  double running = 0;
  int32_t last_positive = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    running += static_cast<double>(weights[i]);
    last_positive = static_cast<int32_t>(i);
    if (target < running) return last_positive;
  }
  return last_positive;  // rounding left target == total: the last positive entry
}

}  // namespace specula
