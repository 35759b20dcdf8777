// kernels/cuda/shared_kv_attention against attention_at's one-pair-a-block kernel (the same bits,
// which is what keeps a verify row equal to its decode step) and against attention in double over
// the cache's bf16 rows, on random caches (fresh seed per run): head_dim 64 and 128, GQA groups of
// 3, 4 and 1, 2-65 rows as chains and random trees, with and without a mask, a sparse block
// visibility, splits, partial last blocks, and provisional rows between the committed and the new
// ones left as NaN, which neither kernel may read.
#include "kernels/cuda/shared_kv_attention.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/prefill_attention.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using testing::download;
using testing::upload;

using SharedKvAttentionTest = testing::GpuRandomTest;

uint16_t to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }
float bf_value(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }

struct Shape {
  int64_t heads, kv_heads, hd;
};

struct Case {
  int64_t T, committed, first_new;
  std::vector<uint8_t> mask;     // T x T, empty: causal j ≤ t
  std::vector<uint8_t> visible;  // (T, kv_heads, committed blocks), empty: all committed rows
};

// Relative L2 of got (T, heads·hd) against attention in double over the rows each (t, h) sees.
double reference_error(const Shape& s, const Case& c, const std::vector<float>& q, int64_t ld,
                       const std::vector<uint16_t>& keys, const std::vector<uint16_t>& values,
                       const std::vector<int32_t>& table, int64_t B, float scale, const std::vector<float>& got) {
  const int64_t group = s.heads / s.kv_heads, nb = (c.committed + B - 1) / B;
  auto slot = [&](int64_t r, int64_t g) { return ((table[r / B] * s.kv_heads + g) * B + r % B) * s.hd; };
  double num = 0, den = 0;
  for (int64_t t = 0; t < c.T; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      std::vector<int64_t> rows;
      for (int64_t r = 0; r < c.committed; ++r)
        if (c.visible.empty() || c.visible[(t * s.kv_heads + g) * nb + r / B]) rows.push_back(r);
      for (int64_t j = 0; j < c.T; ++j)
        if (c.mask.empty() ? j <= t : c.mask[t * c.T + j] != 0) rows.push_back(c.first_new + j);
      std::vector<double> w;
      double m = -INFINITY;
      for (int64_t r : rows) {
        double d = 0;
        for (int64_t k = 0; k < s.hd; ++k)
          d += double(q[t * ld + h * s.hd + k]) * scale * bf_value(keys[slot(r, g) + k]);
        w.push_back(d);
        m = std::max(m, d);
      }
      double z = 0;
      for (auto& x : w) z += (x = std::exp(x - m));
      for (int64_t k = 0; k < s.hd; ++k) {
        double ref = 0;
        for (size_t n = 0; n < rows.size(); ++n) ref += w[n] / z * bf_value(values[slot(rows[n], g) + k]);
        const double e = got[(t * s.heads + h) * s.hd + k] - ref;
        num += e * e;
        den += ref * ref;
      }
    }
  }
  return std::sqrt(num / den);
}

// Every (shape, split, T, kind) case: both kernels on the same random cache and queries.
void check_cases(testing::GpuRandomTest& rng, const std::vector<Shape>& shapes,
                 const std::vector<int64_t>& row_counts) {
  auto random = [&](size_t n, float scale) { return rng.random(n, scale); };
  const int64_t B = 16, blocks = 48, rows = blocks * B;  // 768 rows
  std::vector<int32_t> table(blocks);
  for (int64_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>((i * 29 + 7) % blocks);  // a permutation
  std::mt19937 pick(static_cast<uint32_t>(random(1, 1e6f)[0] + 1e6f));  // shapes, from the run's seed
  int64_t cases = 0;
  double worst = 0;
  for (const Shape& s : shapes) {
    const int64_t qd = s.heads * s.hd, ld = qd + 7 * 8;  // a row stride past the heads, as the qkv buffer's
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
    const int64_t maxT = 65;
    for (bool split_on : {false, true}) {
      AttentionSplit split;
      if (split_on) {  // 64-row splits over the cache's rows (attention_split_for's layout)
        split.splits = static_cast<int>(rows / 64);
        split.rows_per_split = 64;
        split.partial_floats_per_pair = split.splits * (s.hd + 2);
        ASSERT_EQ(cudaMalloc(&split.partial, maxT * s.heads * split.partial_floats_per_pair * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&split.counters, maxT * s.heads * 4), cudaSuccess);
        ASSERT_EQ(cudaMemset(split.counters, 0, maxT * s.heads * 4), cudaSuccess);
      }
      testing::DevicePagedKv cache(blocks, s.kv_heads, B, s.hd, table);
      float *out_one = nullptr, *out_shared = nullptr;
      ASSERT_EQ(cudaMalloc(&out_one, maxT * qd * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&out_shared, maxT * qd * 4), cudaSuccess);
      for (int64_t T : row_counts) {
        for (int kind = 0; kind < 4;
             ++kind) {  // 0: chain, no mask; 1: random tree; 2: tree + sparse; 3: chain + sparse
          Case c;
          c.T = T;
          c.committed = std::uniform_int_distribution<int64_t>(1, rows - T - 3)(pick);
          c.first_new = c.committed + (c.committed % 3 == 0 ? 0 : 3);  // provisional rows in between
          if (c.first_new + T > rows) c.first_new = c.committed;
          if (kind == 1 || kind == 2) {
            c.mask.assign(static_cast<size_t>(T * T), 0);
            for (int64_t j = 0; j < T; ++j) {
              if (j > 0) {
                const int64_t parent = static_cast<int64_t>(pick() % j);
                for (int64_t a = 0; a < T; ++a) c.mask[j * T + a] = c.mask[parent * T + a];
              }
              c.mask[j * T + j] = 1;
            }
          }
          const int64_t nb = (c.committed + B - 1) / B;
          if (kind >= 2) {
            c.visible.assign(static_cast<size_t>(T * s.kv_heads * nb), 0);
            for (auto& v : c.visible) v = pick() % 4 == 0;  // a quarter of the blocks, per row and KV head
          }
          // The cache: committed and new rows random bf16, every other row NaN (the fill).
          std::vector<uint16_t> keys(static_cast<size_t>(cache.n_kv), 0x7fc0), values = keys;
          const auto kr = random(static_cast<size_t>((c.committed + T) * s.kv_heads * s.hd), 2.0f);
          const auto vr = random(kr.size(), 2.0f);
          for (int64_t n = 0; n < c.committed + T; ++n) {
            const int64_t r = n < c.committed ? n : c.first_new + (n - c.committed);
            for (int64_t g = 0; g < s.kv_heads; ++g) {
              for (int64_t k = 0; k < s.hd; ++k) {
                const size_t at = static_cast<size_t>(((table[r / B] * s.kv_heads + g) * B + r % B) * s.hd + k);
                const size_t from = static_cast<size_t>((n * s.kv_heads + g) * s.hd + k);
                keys[at] = to_bf16(kr[from]);
                values[at] = to_bf16(vr[from]);
              }
            }
          }
          ASSERT_EQ(cudaMemcpy(cache.kv.keys, keys.data(), keys.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(cache.kv.values, values.data(), values.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
          const auto q = random(static_cast<size_t>(T * ld), 2.0f);
          float* q_dev = upload(q);
          int32_t* step = upload(std::vector<int32_t>{int32_t(c.committed), int32_t(c.first_new)});
          uint8_t* mask_dev = c.mask.empty() ? nullptr : upload(c.mask);
          uint8_t* visible_dev = c.visible.empty() ? nullptr : upload(c.visible);
          ASSERT_EQ(cudaMemset(out_one, 0xff, maxT * qd * 4), cudaSuccess);  // NaN: every output must be written
          ASSERT_EQ(cudaMemset(out_shared, 0xff, maxT * qd * 4), cudaSuccess);
          set_shared_kv_attention(false);
          attention_at(q_dev, ld, T, s.heads, cache.kv, step, mask_dev, scale, out_one, nullptr, split, visible_dev);
          set_shared_kv_attention(true);
          // Every other case with the other register budget (head_dim 64: ptxas's own; 128: held to
          // 3 blocks an SM, with spills): the same arithmetic.
          set_shared_kv_attention_min_blocks(cases % 2 == 0 ? 0 : s.hd == 64 ? 1 : 3);
          ASSERT_TRUE(shared_kv_attention_at(q_dev, ld, T, s.heads, cache.kv, step, mask_dev, scale, out_shared,
                                             nullptr, split, visible_dev));
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const auto a = download(out_one, static_cast<size_t>(T * qd));
          const auto b = download(out_shared, static_cast<size_t>(T * qd));
          // Unmasked launches of kPrefillMinRows rows go to prefill_attention (tensor cores) in
          // attention_at: no one-pair kernel to compare with there.
          const bool one_pair = !(c.mask.empty() && c.visible.empty() && T >= kPrefillMinRows);
          if (one_pair) {
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
                << "outputs differ: heads " << s.heads << "/" << s.kv_heads << ", hd " << s.hd << ", T " << T
                << ", kind " << kind << ", committed " << c.committed << ", split " << split_on;
          }
          const double err = reference_error(s, c, q, ld, keys, values, table, B, scale, b);
          ASSERT_LT(err, 1e-4) << "against double: hd " << s.hd << ", T " << T << ", kind " << kind;
          worst = std::max(worst, err);
          cudaFree(q_dev);
          cudaFree(step);
          cudaFree(mask_dev);
          cudaFree(visible_dev);
          cases += one_pair;
        }
      }
      if (split_on) {  // every launch left the counters at zero (the next one, or a graph replay, needs it)
        const auto counters = download(split.counters, static_cast<size_t>(maxT * s.heads));
        for (int32_t n : counters) ASSERT_EQ(n, 0);
        cudaFree(split.partial);
        cudaFree(split.counters);
      }
      cudaFree(out_one);
      cudaFree(out_shared);
    }
  }
  set_shared_kv_attention_min_blocks(0);
  std::printf("%lld cases the same bits as the one-pair kernel; worst rel L2 to double %.2e\n",
              static_cast<long long>(cases), worst);
}

TEST_F(SharedKvAttentionTest, EqualsOnePairKernelAndMatchesCpu) {
  check_cases(*this, {{9, 3, 64}, {8, 2, 128}, {4, 4, 64}, {12, 3, 128}}, {2, 3, 5, 8, 9, 17, 24, 40, 61, 65});
}

// A few cases, for compute-sanitizer (memcheck and racecheck run it; the full test is slow there).
TEST_F(SharedKvAttentionTest, SmallCases) { check_cases(*this, {{9, 3, 64}, {8, 2, 128}}, {5, 61}); }

TEST_F(SharedKvAttentionTest, RefusesWhatItDoesNotTake) {
  PagedKvLayer kv;
  kv.n_kv_heads = 2;
  kv.head_dim = 96;
  EXPECT_FALSE(shared_kv_attention_at(nullptr, 0, 4, 4, kv, nullptr, nullptr, 1.0f, nullptr, nullptr, {}, nullptr));
  kv.head_dim = 64;
  EXPECT_FALSE(shared_kv_attention_at(nullptr, 0, 1, 4, kv, nullptr, nullptr, 1.0f, nullptr, nullptr, {}, nullptr));
  EXPECT_FALSE(shared_kv_attention_at(nullptr, 0, 4, 5, kv, nullptr, nullptr, 1.0f, nullptr, nullptr, {}, nullptr));
}

}  // namespace
}  // namespace specula::cuda
