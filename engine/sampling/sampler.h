#pragma once
// Token sampling: greedy (temperature 0), temperature, top-k and top-p, seeded and
// reproducible (std::mt19937_64; the same seed gives the same tokens on every machine).
#include <cstdint>
#include <random>
#include <span>

namespace specula {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy argmax
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t sample(std::span<const float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace specula
