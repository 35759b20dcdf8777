// kernels/cuda/decode_attention against the two launches it replaces (rope_append_decode_at +
// attention_at, or rope_append_at + masked attention_at for several rows: the same bits) and against a double-precision
// CPU attention over the cache it leaves, on random rows (fresh seed per run), both RoPE pairings, head_dim 64 and 128,
// with and without splits, over decode steps that cross blocks and splits.
#include "kernels/cuda/decode_attention.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/model_ops.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using testing::download;
using testing::upload;

using DecodeAttentionTest = testing::GpuRandomTest;

float bf_value(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }

using Cache = testing::DevicePagedKv;

// Relative L2 of the GPU output against attention in double over the cache's bf16 rows
// [0, committed) and first_new, with the query rotated in double.
double reference_error(const std::vector<float>& row, const std::vector<float>& got, int64_t heads, int64_t kv_heads,
                       int64_t hd, int32_t position, float theta, bool adjacent, const Cache& cache, int64_t committed,
                       int64_t first_new, float scale) {
  const auto keys = download(cache.kv.keys, static_cast<size_t>(cache.n_kv));
  const auto values = download(cache.kv.values, static_cast<size_t>(cache.n_kv));
  const auto table =
      download(cache.kv.block_table, static_cast<size_t>(cache.n_kv / (kv_heads * cache.kv.block_size * hd)));
  const int64_t B = cache.kv.block_size, group = heads / kv_heads;
  auto slot = [&](int64_t r, int64_t g) { return ((table[r / B] * kv_heads + g) * B + r % B) * hd; };
  std::vector<int64_t> visible;
  for (int64_t r = 0; r < committed; ++r) visible.push_back(r);
  visible.push_back(first_new);
  double num = 0, den = 0;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / group;
    std::vector<double> q(static_cast<size_t>(hd));
    for (int64_t i = 0; i < hd / 2; ++i) {
      const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + hd / 2;
      const float inv_freq =
          1.0f / static_cast<float>(std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd)));
      const double ang = static_cast<float>(static_cast<float>(position) * inv_freq);
      q[a] = row[h * hd + a] * std::cos(ang) - row[h * hd + b] * std::sin(ang);
      q[b] = row[h * hd + b] * std::cos(ang) + row[h * hd + a] * std::sin(ang);
    }
    std::vector<double> s;
    for (int64_t r : visible) {
      double d = 0;
      for (int64_t k = 0; k < hd; ++k) d += q[k] * scale * bf_value(keys[slot(r, g) + k]);
      s.push_back(d);
    }
    const double m = *std::max_element(s.begin(), s.end());
    double z = 0;
    for (auto& v : s) z += (v = std::exp(v - m));
    for (int64_t k = 0; k < hd; ++k) {
      double ref = 0;
      for (size_t n = 0; n < visible.size(); ++n) ref += s[n] / z * bf_value(values[slot(visible[n], g) + k]);
      const double e = got[h * hd + k] - ref;
      num += e * e;
      den += ref * ref;
    }
  }
  return std::sqrt(num / den);
}

TEST_F(DecodeAttentionTest, EqualsRopeAppendThenAttentionAndMatchesCpu) {
  const int64_t heads = 6, kv_heads = 2, B = 16, blocks = 10, steps = 150;
  const float theta = 10000.0f;
  const std::vector<int32_t> table = {3, 7, 0, 9, 1, 5, 2, 8, 4, 6};
  for (int64_t hd : {64, 128}) {
    for (bool adjacent : {false, true}) {
      for (bool split_on : {false, true}) {
        const int64_t qd = heads * hd, kvd = kv_heads * hd, ld = qd + 2 * kvd;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // Splits of 32 rows: 1 to 5 of them hold rows over the steps (the others return at once).
        AttentionSplit split;
        if (split_on) {
          split.splits = 5;
          split.rows_per_split = 32;
          split.partial_floats_per_pair = split.splits * (hd + 2);
          ASSERT_EQ(cudaMalloc(&split.partial, heads * split.partial_floats_per_pair * 4), cudaSuccess);
          ASSERT_EQ(cudaMalloc(&split.counters, heads * 4), cudaSuccess);
          ASSERT_EQ(cudaMemset(split.counters, 0, heads * 4), cudaSuccess);
        }
        Cache old_cache(blocks, kv_heads, B, hd, table), new_cache(blocks, kv_heads, B, hd, table);
        float *q_old = nullptr, *q_new = nullptr, *out_old = nullptr, *out_new = nullptr;
        int32_t *step = nullptr, *pos = nullptr;
        ASSERT_EQ(cudaMalloc(&q_old, ld * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&q_new, ld * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&out_old, qd * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&out_new, qd * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&step, 8), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&pos, 4), cudaSuccess);
        double worst = 0;
        for (int64_t r = 0; r < steps; ++r) {
          // The last step leaves 3 provisional rows of large values between committed and the
          // new row: neither path may see them.
          const bool gap = r == steps - 1;
          const int64_t committed = gap ? r - 3 : r, first_new = r;
          const auto row = random(ld, 2.0f);
          const int32_t st[2] = {int32_t(committed), int32_t(first_new)};
          const int32_t p = int32_t(r * 5 + 2);  // positions need not equal rows
          ASSERT_EQ(cudaMemcpy(q_old, row.data(), ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(q_new, row.data(), ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(step, st, 8, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemset(out_new, 0xff, qd * 4), cudaSuccess);  // NaN: every element must be written
          if (gap) {
            // Rows r-3..r-1 in both caches: values 50x the others (keys too), as an append.
            auto loud = random(3 * ld, 100.0f);
            float* dl = upload(loud);
            const int32_t gst[2] = {int32_t(committed), int32_t(committed)};
            int32_t* gstep = upload(std::vector<int32_t>(gst, gst + 2));
            kv_append_at(old_cache.kv, dl, ld, qd, qd + kvd, 3, gstep, nullptr);
            kv_append_at(new_cache.kv, dl, ld, qd, qd + kvd, 3, gstep, nullptr);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            cudaFree(dl);
            cudaFree(gstep);
          }
          rope_append_decode_at(q_old, heads, kv_heads, hd, pos, theta, adjacent, old_cache.kv, qd + kvd, step,
                                nullptr);
          attention_at(q_old, ld, 1, heads, old_cache.kv, step, nullptr, scale, out_old, nullptr, split);
          ASSERT_TRUE(decode_attention_at(q_new, heads, qd + kvd, pos, theta, adjacent, new_cache.kv, step, scale,
                                          out_new, split, nullptr));
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const auto a = download(out_old, static_cast<size_t>(qd)), b = download(out_new, static_cast<size_t>(qd));
          for (int64_t i = 0; i < qd; ++i) {
            ASSERT_FALSE(std::isnan(b[i])) << "unwritten output " << i << " step " << r;
            ASSERT_EQ(a[i], b[i]) << "output " << i << ", step " << r << ", hd " << hd << ", adjacent " << adjacent
                                  << ", split " << split_on;
          }
          if (r % 7 == 0 || r % 32 == 31 || r % 32 == 0 || gap) {
            const double err = reference_error(row, b, heads, kv_heads, hd, p, theta, adjacent, new_cache, committed,
                                               first_new, scale);
            worst = std::max(worst, err);
            // The reference reads the same bf16 cache; f32 arithmetic (and powf) differ only.
            ASSERT_LT(err, 1e-4) << "step " << r << ", hd " << hd << ", adjacent " << adjacent << ", split "
                                 << split_on;
          }
        }
        std::printf("hd %lld adjacent %d split %d: worst rel L2 against the CPU %.2e\n", static_cast<long long>(hd),
                    adjacent, split_on, worst);
        // The caches and their block min/max are the same bits (rows 0..steps-1: 150 of 160).
        EXPECT_EQ(download(old_cache.kv.keys, old_cache.n_kv), download(new_cache.kv.keys, new_cache.n_kv));
        EXPECT_EQ(download(old_cache.kv.values, old_cache.n_kv), download(new_cache.kv.values, new_cache.n_kv));
        const auto min_a = download(old_cache.kv.key_min, old_cache.n_meta);
        const auto min_b = download(new_cache.kv.key_min, new_cache.n_meta);
        const auto max_a = download(old_cache.kv.key_max, old_cache.n_meta);
        const auto max_b = download(new_cache.kv.key_max, new_cache.n_meta);
        for (size_t i = 0; i < min_a.size(); ++i) {
          if (std::isnan(min_a[i]) && std::isnan(min_b[i])) continue;  // the one block without rows
          ASSERT_EQ(min_a[i], min_b[i]) << "key_min " << i;
          ASSERT_EQ(max_a[i], max_b[i]) << "key_max " << i;
        }
        if (split_on) {  // every launch left the counters at zero
          const auto counters = download(split.counters, static_cast<size_t>(heads));
          for (int32_t c : counters) ASSERT_EQ(c, 0);
          cudaFree(split.partial);
          cudaFree(split.counters);
        }
        cudaFree(q_old);
        cudaFree(q_new);
        cudaFree(out_old);
        cudaFree(out_new);
        cudaFree(step);
        cudaFree(pos);
      }
    }
  }
}

// The several-row kernel against rope_append_at (no min/max) + attention_at with the same mask:
// outputs and cache rows the same bits, for T = 2..16 new rows as a chain (no mask, and as a
// mask) and as a random tree, over contexts that start in different splits, with provisional
// rows between the committed ones and the new ones in some cases.
TEST_F(DecodeAttentionTest, TreeRowsEqualRopeAppendThenMaskedAttention) {
  const int64_t heads = 9, kv_heads = 3, B = 16, blocks = 10, rows = blocks * B;
  const float theta = 10000.0f;
  const std::vector<int32_t> table = {3, 7, 0, 9, 1, 5, 2, 8, 4, 6};
  std::mt19937 pick(static_cast<uint32_t>(random(1, 1e6f)[0] + 1e6f));  // tree shapes, from the run's seed
  int64_t cases = 0;
  for (int64_t hd : {64, 128}) {
    for (bool adjacent : {false, true}) {
      for (bool split_on : {false, true}) {
        const int64_t qd = heads * hd, kvd = kv_heads * hd, ld = qd + 2 * kvd, maxT = 16;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        AttentionSplit split;
        if (split_on) {  // 5 splits of 32 rows cover the 160 rows
          split.splits = 5;
          split.rows_per_split = 32;
          split.partial_floats_per_pair = split.splits * (hd + 2);
          ASSERT_EQ(cudaMalloc(&split.partial, maxT * heads * split.partial_floats_per_pair * 4), cudaSuccess);
          ASSERT_EQ(cudaMalloc(&split.counters, maxT * heads * 4), cudaSuccess);
          ASSERT_EQ(cudaMemset(split.counters, 0, maxT * heads * 4), cudaSuccess);
        }
        Cache old_cache(blocks, kv_heads, B, hd, table), new_cache(blocks, kv_heads, B, hd, table);
        {  // every row of both caches random (the same), as appends
          float* fill = upload(random(rows * ld, 2.0f));
          int32_t* zero = upload(std::vector<int32_t>{0, 0});
          kv_append_at(old_cache.kv, fill, ld, qd, qd + kvd, rows, zero, nullptr);
          kv_append_at(new_cache.kv, fill, ld, qd, qd + kvd, rows, zero, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          cudaFree(fill);
          cudaFree(zero);
        }
        float *q_old = nullptr, *out_old = nullptr, *out_new = nullptr;
        ASSERT_EQ(cudaMalloc(&q_old, maxT * ld * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&out_old, maxT * qd * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&out_new, maxT * qd * 4), cudaSuccess);
        for (int64_t T = 2; T <= maxT; ++T) {
          for (int kind = 0; kind < 3; ++kind) {  // 0: chain without a mask, 1: chain mask, 2: random tree
            // Two of four context lengths (first split, middle ones, last) per (T, kind), in turn.
            const int64_t lengths[4] = {1, 30, 77, 130};
            for (int64_t committed : {lengths[(T + kind) % 4], lengths[(T + kind + 2) % 4]}) {
              const int64_t gap = committed % 2 == 0 ? 2 : 0;  // provisional rows neither path may see
              const int64_t first_new = committed + gap;
              if (first_new + T > rows) continue;
              std::vector<uint8_t> mask(static_cast<size_t>(T * T), 0);
              std::vector<int32_t> pos(static_cast<size_t>(T));
              std::vector<int64_t> depth(static_cast<size_t>(T), 0);
              for (int64_t j = 0; j < T; ++j) {
                const int64_t parent = j == 0 ? -1 : kind == 2 ? static_cast<int64_t>(pick() % j) : j - 1;
                if (parent >= 0) {
                  depth[j] = depth[parent] + 1;
                  for (int64_t a = 0; a < T; ++a) mask[j * T + a] = mask[parent * T + a];
                }
                mask[j * T + j] = 1;
                pos[j] = static_cast<int32_t>(committed + 3 + depth[j]);
              }
              const auto row = random(T * ld, 2.0f);
              float* q_new = upload(row);
              ASSERT_EQ(cudaMemcpy(q_old, row.data(), T * ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
              int32_t* pos_dev = upload(pos);
              int32_t* step = upload(std::vector<int32_t>{int32_t(committed), int32_t(first_new)});
              uint8_t* mask_dev = nullptr;
              if (kind > 0) {
                ASSERT_EQ(cudaMalloc(&mask_dev, T * T), cudaSuccess);
                ASSERT_EQ(cudaMemcpy(mask_dev, mask.data(), T * T, cudaMemcpyHostToDevice), cudaSuccess);
              }
              ASSERT_EQ(cudaMemset(out_new, 0xff, maxT * qd * 4), cudaSuccess);  // NaN: all must be written
              rope_append_at(q_old, ld, T, heads, kv_heads, hd, pos_dev, theta, adjacent, old_cache.kv, qd + kvd, step,
                             false, nullptr);
              attention_at(q_old, ld, T, heads, old_cache.kv, step, mask_dev, scale, out_old, nullptr, split);
              ASSERT_TRUE(tree_decode_attention_at(q_new, ld, T, heads, qd + kvd, pos_dev, theta, adjacent,
                                                   new_cache.kv, step, mask_dev, scale, out_new, split, nullptr));
              ASSERT_EQ(cudaGetLastError(), cudaSuccess);
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
              const auto a = download(out_old, static_cast<size_t>(T * qd));
              const auto b = download(out_new, static_cast<size_t>(T * qd));
              ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
                  << "outputs differ: T " << T << ", kind " << kind << ", committed " << committed << ", hd " << hd
                  << ", adjacent " << adjacent << ", split " << split_on;
              const auto ka = download(old_cache.kv.keys, old_cache.n_kv);
              const auto kb = download(new_cache.kv.keys, new_cache.n_kv);
              const auto va = download(old_cache.kv.values, old_cache.n_kv);
              const auto vb = download(new_cache.kv.values, new_cache.n_kv);
              ASSERT_EQ(std::memcmp(ka.data(), kb.data(), ka.size() * 2), 0) << "keys differ: T " << T;
              ASSERT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 2), 0) << "values differ: T " << T;
              cudaFree(q_new);
              cudaFree(pos_dev);
              cudaFree(step);
              cudaFree(mask_dev);
              ++cases;
            }
          }
        }
        if (split_on) {  // every launch left the counters at zero
          const auto counters = download(split.counters, static_cast<size_t>(maxT * heads));
          for (int32_t c : counters) ASSERT_EQ(c, 0);
          cudaFree(split.partial);
          cudaFree(split.counters);
        }
        cudaFree(q_old);
        cudaFree(out_old);
        cudaFree(out_new);
      }
    }
  }
  std::printf("%lld cases the same bits\n", static_cast<long long>(cases));
}

TEST_F(DecodeAttentionTest, RefusesOtherHeadSizes) {
  PagedKvLayer kv;
  kv.n_kv_heads = 2;
  kv.head_dim = 96;
  EXPECT_FALSE(decode_attention_at(nullptr, 4, 0, nullptr, 10000.0f, false, kv, nullptr, 1.0f, nullptr, {}, nullptr));
  EXPECT_FALSE(tree_decode_attention_at(nullptr, 0, 4, 4, 0, nullptr, 10000.0f, false, kv, nullptr, nullptr, 1.0f,
                                        nullptr, {}, nullptr));
  kv.head_dim = 64;
  EXPECT_FALSE(decode_attention_at(nullptr, 5, 0, nullptr, 10000.0f, false, kv, nullptr, 1.0f, nullptr, {}, nullptr));
  EXPECT_FALSE(tree_decode_attention_at(nullptr, 0, 17, 4, 0, nullptr, 10000.0f, false, kv, nullptr, nullptr, 1.0f,
                                        nullptr, {}, nullptr));
}

}  // namespace
}  // namespace specula::cuda
