#include "kernels/cpu/attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/simd.h"

namespace specula {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();
// From this many queries on, a call packs each 16-key tile (half transposed) once and every query
// reads it from L1 (tile_scores); below it each query folds its own keys' partials (span_scores).
// Both give the same bits, so the choice is speed only (3 queries: about even on Zen 4).
constexpr int64_t kTiledQueries = 4;

// Query g's mask row of a span, or nullptr when every row is visible.
inline const uint8_t* mask_of(const KvSpan& span, int64_t g) {
  return span.allowed ? span.allowed + (g / span.queries_per_mask) * span.allowed_stride : nullptr;
}

#if defined(SPECULA_AVX512)
// Spans ahead whose keys and values the scores pass prefetches (see attention_group_avx512): 2
// took a one-thread decode step at 2048 keys from 17.7 to 15.4 ms on Zen 4, 4 did no better.
constexpr size_t kPrefetchSpans = 2;

// Sums each of v[0..16) into one lane: result[i] = Σ lanes of v[i]. Pairs interleave
// (unpack), then 128-bit lanes fold (shuffle_f32x4): ~45 ops instead of 16 full reductions.
// Every lane gets the same tree: ((e0+e2)+(e1+e3)) within each 128-bit lane, then
// (L0+L1)+(L2+L3) across them, which tile_scores below reproduces with keys in lanes.
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

// scores[g·total + j] = scale · q_g·k_j for n rows of keys and a few queries (q_g at q + g·16·NC);
// head_dim = 16·NC. Each query folds a key's 16 lane partials (a chain over the NC chunks) by
// transpose_sum16. Tiles of 16 keys run outermost, so a decode step's GQA group reads each tile
// from L2 once and its other queries find it in L1; a query's arithmetic is the same whatever
// the number of queries.
template <int NC>
void span_scores(const float* q, int64_t n_queries, const float* keys, int64_t n, float scale, float* scores,
                 int64_t total) {
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - j0);
    for (int64_t g = 0; g < n_queries; ++g) {
      __m512 qv[NC];
      for (int c = 0; c < NC; ++c) qv[c] = _mm512_loadu_ps(q + g * 16 * NC + 16 * c);
      __m512 acc[16];
      for (int64_t j = 0; j < 16; ++j) {
        acc[j] = _mm512_setzero_ps();
        if (j >= m) continue;
        const float* k = keys + (j0 + j) * 16 * NC;
        for (int c = 0; c < NC; ++c) acc[j] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + 16 * c), acc[j]);
      }
      const __m512 s = _mm512_mul_ps(transpose_sum16(acc), _mm512_set1_ps(scale));
      _mm512_mask_storeu_ps(scores + g * total + j0, static_cast<__mmask16>((1u << m) - 1), s);
    }
  }
}

// A tile of up to 16 keys (zeros past m), half transposed: kt[16c + 4i + e] holds, in 128-bit
// lane L and position k, dimension 16c + 4L + e of key 4i + k. Two of a 16×16 transpose's four
// shuffle stages (32 shuffles a chunk); tile_scores folds the other two into its sums.
template <int NC>
void pack_key_tile(const float* keys, int64_t m, __m512* kt) {
  for (int c = 0; c < NC; ++c) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = j < m ? _mm512_loadu_ps(keys + j * 16 * NC + 16 * c) : _mm512_setzero_ps();
    for (int i = 0; i < 8; ++i) {  // lane L of t[2i]: r[2i][4L], r[2i+1][4L], r[2i][4L+1], r[2i+1][4L+1]
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
      const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
      const __m512d x = _mm512_castps_pd(t[4 * i + 1]), y = _mm512_castps_pd(t[4 * i + 3]);
      kt[16 * c + 4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      kt[16 * c + 4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
      kt[16 * c + 4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x, y));
      kt[16 * c + 4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x, y));
    }
  }
}

// A query spread to match packed tiles: qs[4c + e] holds q[16c + 4L + e] in all of 128-bit lane L.
template <int NC>
void spread_query(const float* q, __m512* qs) {
  const __m512i lane_base = _mm512_set_epi32(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
  for (int c = 0; c < NC; ++c) {
    const __m512 chunk = _mm512_loadu_ps(q + 16 * c);
    for (int e = 0; e < 4; ++e) {
      qs[4 * c + e] = _mm512_permutexvar_ps(_mm512_add_epi32(lane_base, _mm512_set1_epi32(e)), chunk);
    }
  }
}

// Scores of one spread query against one packed tile. For lane index l = 4L + e of span_scores,
// Y_e = the same fma chain over the NC chunks gives P_l of 4 keys in each 128-bit lane L;
// (Y_0 + Y_2) + (Y_1 + Y_3) is span_scores' in-lane fold and the two shuffle steps at the end its
// cross-lane one, so every score equals span_scores' bit for bit, with 6 shuffles a query and tile
// instead of 30. (Two queries at a time spilled registers and ran slower, on Zen 4 and the Xeon;
// inlined into the packing loop, GCC 12's code ran 25% slower on Zen 4, hence noinline.)
template <int NC>
__attribute__((noinline)) void tile_scores(const __m512* qs, const __m512* kt, int64_t m, float scale, float* scores) {
  const auto chain = [&](int e, __m512(&y)[4]) {  // y[i] = Y_e for keys 4i..4i+3
    for (int i = 0; i < 4; ++i) y[i] = _mm512_setzero_ps();
    for (int c = 0; c < NC; ++c) {
      for (int i = 0; i < 4; ++i) y[i] = _mm512_fmadd_ps(qs[4 * c + e], kt[16 * c + 4 * i + e], y[i]);
    }
  };
  __m512 a[4], b[4], y[4];
  chain(0, a);
  chain(2, y);
  for (int i = 0; i < 4; ++i) a[i] = _mm512_add_ps(a[i], y[i]);
  chain(1, b);
  chain(3, y);
  __m512 s[4];  // lane L, position k: s_L of key 4i + k
  for (int i = 0; i < 4; ++i) s[i] = _mm512_add_ps(a[i], _mm512_add_ps(b[i], y[i]));
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(s[0], s[1], 0x88), _mm512_shuffle_f32x4(s[0], s[1], 0xDD));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(s[2], s[3], 0x88), _mm512_shuffle_f32x4(s[2], s[3], 0xDD));
  const __m512 total = _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
  const auto mask = static_cast<__mmask16>(m >= 16 ? 0xFFFF : (1u << m) - 1);
  _mm512_mask_storeu_ps(scores, mask, _mm512_mul_ps(total, _mm512_set1_ps(scale)));
}

// Scores of every (spread) query over one span: keys packed 16 at a time, each tile then read by
// every query from L1.
template <int NC>
void span_scores_tiled(const __m512* qs, int64_t n_queries, const float* keys, int64_t n, float scale, float* scores,
                       int64_t total) {
  alignas(64) __m512 kt[16 * NC];
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - j0);
    pack_key_tile<NC>(keys + j0 * 16 * NC, m, kt);
    for (int64_t g = 0; g < n_queries; ++g) tile_scores<NC>(qs + g * 4 * NC, kt, m, scale, scores + g * total + j0);
  }
}

// out[g] (+)= Σ_j p[g][j] · v_j over the rows of spans in order, for G queries (probabilities at
// p + g·stride); head_dim = 16·NC. `first`: start the sums at +0 instead of loading out. Each
// (query, dim) is one fma chain over the keys whatever G and the blocking are, so a query's
// result does not depend on which queries share its call.
template <int NC, int G>
void values_rows(const float* p, int64_t stride, std::span<const KvSpan> spans, bool first, float* out) {
  __m512 acc[G][NC];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC; ++c) acc[g][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + g * 16 * NC + 16 * c);
  for (const auto& span : spans) {
    for (int64_t j = 0; j < span.n; ++j) {
      __m512 v[NC];
      for (int c = 0; c < NC; ++c) {
        v[c] = _mm512_loadu_ps(span.values + j * 16 * NC + 16 * c);
        // Keep v in a register: folded into each fma as a memory operand it is loaded G times,
        // which made this loop load-bound (7.4 instead of 5 cycles a key and query on Zen 4).
        __asm__("" : "+v"(v[c]));
      }
      for (int g = 0; g < G; ++g) {
        const __m512 pg = _mm512_set1_ps(p[g * stride + j]);
        for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_fmadd_ps(pg, v[c], acc[g][c]);
      }
    }
    p += span.n;
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + g * 16 * NC + 16 * c, acc[g][c]);
}

// Values in blocks of about kValueBlock keys (a few KB of values, which stay in L1 while every
// group of queries passes over them).
template <int NC>
void values_all(const float* p, int64_t stride, int64_t n_queries, std::span<const KvSpan> spans, float* out) {
  constexpr int kGroup = 16 / NC;  // accumulators that fit in registers
  constexpr int64_t kValueBlock = 64;
  int64_t j0 = 0;
  for (size_t b = 0; b < spans.size();) {
    size_t e = b;
    int64_t keys = 0;
    while (e < spans.size() && keys < kValueBlock) keys += spans[e++].n;
    const auto block = spans.subspan(b, e - b);
    const bool first = b == 0;
    int64_t g = 0;
    for (; g + kGroup <= n_queries; g += kGroup) {
      values_rows<NC, kGroup>(p + g * stride + j0, stride, block, first, out + g * 16 * NC);
    }
    const float* pr = p + g * stride + j0;
    float* o = out + g * 16 * NC;
    switch (n_queries - g) {
      case 3:
        values_rows<NC, 3>(pr, stride, block, first, o);
        break;
      case 2:
        values_rows<NC, 2>(pr, stride, block, first, o);
        break;
      case 1:
        values_rows<NC, 1>(pr, stride, block, first, o);
        break;
      default:
        break;
    }
    j0 += keys;
    b = e;
  }
}

template <int NC>
void attention_group_avx512(const float* q, int64_t n_queries, std::span<const KvSpan> spans, float scale,
                            float* scores, float* out, int64_t total) {
  // Spread queries, (n_queries, 4·NC) vectors when tiled; floats with room to align to 64 bytes.
  thread_local std::vector<float> spread_store;
  __m512* spread = nullptr;
  const bool tiled = n_queries >= kTiledQueries;
  if (tiled) {
    spread_store.resize(static_cast<size_t>(n_queries * 64 * NC + 16));
    const auto address = reinterpret_cast<uintptr_t>(spread_store.data());
    spread = reinterpret_cast<__m512*>((address + 63) & ~uintptr_t{63});
    for (int64_t g = 0; g < n_queries; ++g) spread_query<NC>(q + g * 16 * NC, spread + g * 4 * NC);
  }
  int64_t j0 = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const KvSpan& span = spans[i];
    // A KV cache block is a few KB of its own, so the hardware prefetchers stop at its end:
    // fetch the keys two spans ahead into L1 and their values into L2 for the values pass.
    if (i + kPrefetchSpans < spans.size()) {
      const KvSpan& ahead = spans[i + kPrefetchSpans];
      for (int64_t b = 0; b < ahead.n * 16 * NC; b += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead.keys + b), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(ahead.values + b), _MM_HINT_T1);
      }
    }
    if (tiled) {
      span_scores_tiled<NC>(spread, n_queries, span.keys, span.n, scale, scores + j0, total);
    } else {
      span_scores<NC>(q, n_queries, span.keys, span.n, scale, scores + j0, total);
    }
    if (span.allowed) {
      for (int64_t g = 0; g < n_queries; ++g) {
        const uint8_t* allowed = mask_of(span, g);
        float* s = scores + g * total + j0;
        for (int64_t j = 0; j < span.n; ++j) {
          if (!allowed[j]) s[j] = kMasked;
        }
      }
    }
    j0 += span.n;
  }
  for (int64_t g = 0; g < n_queries; ++g) softmax(scores + g * total, total);
  values_all<NC>(scores, total, n_queries, spans, out);
}
#endif

}  // namespace

void attention_group(const float* q, int64_t n_queries, int64_t head_dim, std::span<const KvSpan> spans, float scale,
                     float* scores, float* out) {
  int64_t total = 0;
  for (const auto& span : spans) total += span.n;
  if (total == 0) {  // nothing to attend to
    std::fill(out, out + n_queries * head_dim, 0.0f);
    return;
  }
#if defined(SPECULA_AVX512)
  if (head_dim == 64) return attention_group_avx512<4>(q, n_queries, spans, scale, scores, out, total);
  if (head_dim == 128) return attention_group_avx512<8>(q, n_queries, spans, scale, scores, out, total);
#endif
  // Scores: keys outer so each key row is read once for the whole group.
  int64_t j0 = 0;
  for (const auto& span : spans) {
    for (int64_t j = 0; j < span.n; ++j) {
      const float* k = span.keys + j * head_dim;
      for (int64_t g = 0; g < n_queries; ++g) {
        const uint8_t* allowed = mask_of(span, g);
        scores[g * total + j0 + j] = !allowed || allowed[j] ? dot_f32(q + g * head_dim, k, head_dim) * scale : kMasked;
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
