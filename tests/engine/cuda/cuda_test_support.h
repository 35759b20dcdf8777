#pragma once
// What the CUDA engine tests share: relative L2 of GPU logits against a reference.
#include <cmath>
#include <vector>

namespace specula::testing {

// ||a - ref|| / ||ref||; a NaN or infinity anywhere gives 1e30 (never within a bound).
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::isfinite(num) ? std::sqrt(num / den) : 1e30;
}

}  // namespace specula::testing
