#include "kernels/cpu/attention.h"

#include <algorithm>
#include <limits>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/simd.h"

namespace specula {
namespace {

#if defined(SPECULA_AVX512)
// Sums each of v[0..16) into one lane: result[i] = Σ lanes of v[i]. Pairs interleave
// (unpack), then 128-bit lanes fold (shuffle_f32x4): ~45 ops instead of 16 full reductions.
inline __m512 transpose_sum16(const __m512 v[16]) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// scores[j] = scale · q·k_j for n rows of keys; head_dim = 16·NC.
template <int NC>
void span_scores(const float* q, const float* keys, int64_t n, float scale, float* scores) {
  __m512 qv[NC];
  for (int c = 0; c < NC; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - j0);
    __m512 acc[16];
    for (int64_t j = 0; j < 16; ++j) {
      acc[j] = _mm512_setzero_ps();
      if (j >= m) continue;
      const float* k = keys + (j0 + j) * 16 * NC;
      for (int c = 0; c < NC; ++c) acc[j] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + 16 * c), acc[j]);
    }
    const __m512 s = _mm512_mul_ps(transpose_sum16(acc), _mm512_set1_ps(scale));
    _mm512_mask_storeu_ps(scores + j0, static_cast<__mmask16>((1u << m) - 1), s);
  }
}

// out[g] += Σ_j p[g][j] · v_j for G queries (probabilities at p + g·stride); head_dim = 16·NC.
template <int NC, int G>
void span_values(const float* p, int64_t stride, const float* values, int64_t n, float* out) {
  __m512 acc[G][NC];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_loadu_ps(out + g * 16 * NC + 16 * c);
  for (int64_t j = 0; j < n; ++j) {
    __m512 v[NC];
    for (int c = 0; c < NC; ++c) v[c] = _mm512_loadu_ps(values + j * 16 * NC + 16 * c);
    for (int g = 0; g < G; ++g) {
      const __m512 pg = _mm512_set1_ps(p[g * stride + j]);
      for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_fmadd_ps(pg, v[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + g * 16 * NC + 16 * c, acc[g][c]);
}

template <int NC>
void values_all(const float* p, int64_t stride, int64_t n_queries, const float* values, int64_t n, float* out) {
  constexpr int kGroup = 16 / NC;  // accumulators that fit in registers
  int64_t g = 0;
  for (; g + kGroup <= n_queries; g += kGroup)
    span_values<NC, kGroup>(p + g * stride, stride, values, n, out + g * 16 * NC);
  for (; g < n_queries; ++g) span_values<NC, 1>(p + g * stride, stride, values, n, out + g * 16 * NC);
}

// Register-blocked path for head_dim 64 or 128; false when it does not apply.
bool attention_group_avx512(const float* q, int64_t n_queries, int64_t head_dim, std::span<const KvSpan> spans,
                            float scale, float* scores, float* out, int64_t total) {
  if (head_dim != 64 && head_dim != 128) return false;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  int64_t j0 = 0;
  for (const auto& span : spans) {
    for (int64_t g = 0; g < n_queries; ++g) {
      float* s = scores + g * total + j0;
      if (head_dim == 64) {
        span_scores<4>(q + g * head_dim, span.keys, span.n, scale, s);
      } else {
        span_scores<8>(q + g * head_dim, span.keys, span.n, scale, s);
      }
      if (span.allowed) {
        const uint8_t* allowed = span.allowed + g * span.allowed_stride;
        for (int64_t j = 0; j < span.n; ++j) {
          if (!allowed[j]) s[j] = kMasked;
        }
      }
    }
    j0 += span.n;
  }
  for (int64_t g = 0; g < n_queries; ++g) softmax(scores + g * total, total);
  std::fill(out, out + n_queries * head_dim, 0.0f);
  j0 = 0;
  for (const auto& span : spans) {
    if (head_dim == 64) {
      values_all<4>(scores + j0, total, n_queries, span.values, span.n, out);
    } else {
      values_all<8>(scores + j0, total, n_queries, span.values, span.n, out);
    }
    j0 += span.n;
  }
  return true;
}
#endif

}  // namespace

void attention_group(const float* q, int64_t n_queries, int64_t head_dim, std::span<const KvSpan> spans, float scale,
                     float* scores, float* out) {
  int64_t total = 0;
  for (const auto& span : spans) total += span.n;
#if defined(SPECULA_AVX512)
  if (attention_group_avx512(q, n_queries, head_dim, spans, scale, scores, out, total)) return;
#endif
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  // Scores: keys outer so each key row is read once for the whole group.
  int64_t j0 = 0;
  for (const auto& span : spans) {
    for (int64_t j = 0; j < span.n; ++j) {
      const float* k = span.keys + j * head_dim;
      for (int64_t g = 0; g < n_queries; ++g) {
        const bool visible = span.allowed == nullptr || span.allowed[g * span.allowed_stride + j] != 0;
        scores[g * total + j0 + j] = visible ? dot_f32(q + g * head_dim, k, head_dim) * scale : kMasked;
      }
    }
    j0 += span.n;
  }
  for (int64_t g = 0; g < n_queries; ++g) softmax(scores + g * total, total);
  std::fill(out, out + n_queries * head_dim, 0.0f);
  j0 = 0;
  for (const auto& span : spans) {
    for (int64_t j = 0; j < span.n; ++j) {
      const float* v = span.values + j * head_dim;
      for (int64_t g = 0; g < n_queries; ++g) {
        const float p = scores[g * total + j0 + j];
        if (p != 0.0f) axpy_f32(p, v, out + g * head_dim, head_dim);
      }
    }
    j0 += span.n;
  }
}

}  // namespace specula
