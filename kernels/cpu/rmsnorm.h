#pragma once
// RMSNorm: out[i] = x[i] / sqrt(mean(x²) + eps) · weight[i]   (x, weight, out: (n); out may alias x)
#include <cstdint>

namespace specula {

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);

}  // namespace specula
