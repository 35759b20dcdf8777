#include "kernels/cpu/rope.h"

#include <cmath>

namespace specula {

void rope_table(int64_t position, int64_t head_dim, float theta, float* cos_sin) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // float throughout, like transformers' default rope: inv_freq = 1 / theta^(2i/d); angle = pos · inv_freq.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float inv_freq = 1.0f / std::pow(theta, exponent);
    const float angle = static_cast<float>(position) * inv_freq;
    cos_sin[2 * i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void rope_apply(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, RopePairing pairing) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = pairing == RopePairing::Adjacent ? 2 * i : i;
      const int64_t b = pairing == RopePairing::Adjacent ? 2 * i + 1 : i + half;
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x1 * c + x0 * s;
    }
  }
}

}  // namespace specula
