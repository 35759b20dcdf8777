#include "kernels/cpu/rmsnorm.h"

#include <cmath>

#include "kernels/cpu/simd.h"

namespace specula {

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  // The sum of squares in double: n is in the thousands and the result feeds every logit.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
  int64_t i = 0;
#if defined(SPECULA_AVX512)
  const __m512 s = _mm512_set1_ps(scale);
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), s), _mm512_loadu_ps(weight + i)));
  }
#endif
  for (; i < n; ++i) out[i] = (x[i] * scale) * weight[i];
}

}  // namespace specula
