// kernels/cuda/model_ops against plain CPU references on random inputs (fresh seed per run).
#include "kernels/cuda/model_ops.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/sparse_verify.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

float bf_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
uint16_t bf16_bits_of(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

using testing::download;
using testing::upload;

using ModelOpsTest = testing::GpuRandomTest;

// The cache's bf16 block min/max equal, bit for bit, the min/max the CPU takes over the keys the
// cache holds (rows [0, rows), logical block b at physical table[b]).
void expect_min_max_of_cached_keys(const testing::DevicePagedKv& cache, const std::vector<int32_t>& table,
                                   int64_t rows) {
  const PagedKvLayer& kv = cache.kv;
  const int64_t B = kv.block_size, hd = kv.head_dim, heads = kv.n_kv_heads;
  const auto keys = download(kv.keys, cache.n_kv);
  const auto kmin = download(kv.key_min, cache.n_meta), kmax = download(kv.key_max, cache.n_meta);
  for (int64_t b = 0; b * B < rows; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t block = table[b] * heads + h;
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t r = b * B; r < std::min(rows, (b + 1) * B); ++r) {
          const float k = __bfloat162float(__ushort_as_bfloat16(keys[(block * B + r % B) * hd + d]));
          lo = std::min(lo, k);
          hi = std::max(hi, k);
        }
        ASSERT_EQ(kmin[block * hd + d], bf16_bits_of(lo)) << "block " << b << " head " << h << " dim " << d;
        ASSERT_EQ(kmax[block * hd + d], bf16_bits_of(hi)) << "block " << b << " head " << h << " dim " << d;
      }
}

// rmsnorm_rows at the widths of each of its kernels: 576 and 2048 (3 and 8 values a thread,
// held in registers), 4100 (17, the 32-value kernel's guards) and 8200 (past 8192: the loop),
// rows read at a padded stride.
TEST_F(ModelOpsTest, RmsNormMatchesCpuAtEveryWidth) {
  for (const int64_t dim : {576, 2048, 4100, 8200}) {
    const int64_t T = 3, ld_x = dim + 12;
    auto x = random(T * ld_x, 3.0f), w = random(dim, 1.5f);
    float* dx = upload(x);
    float* dw = upload(w);
    float* dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, T * dim * 4), cudaSuccess);
    rmsnorm_rows(dx, ld_x, dw, T, dim, 1e-5f, dout, nullptr);
    const auto out = download(dout, T * dim);
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[t * ld_x + i]) * x[t * ld_x + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int64_t i = 0; i < dim; ++i) {
        const double ref = x[t * ld_x + i] * inv * w[i];
        worst = std::max(worst, std::abs(out[t * dim + i] - ref) / (std::abs(ref) + 1e-3));
      }
    }
    EXPECT_LT(worst, 1e-4) << "rmsnorm, dim " << dim;
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dout);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// rmsnorm_rows: RmsNormMatchesCpuAtEveryWidth above.
TEST_F(ModelOpsTest, SwiGluAndRopeMatchCpu) {
  const int64_t T = 5, ffn = 1536, heads = 9, kv_heads = 3, hd = 64;
  double worst = 0;
  float* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dout, T * ffn * 4), cudaSuccess);
  auto gu = random(T * 2 * ffn, 4.0f);
  float* dgu = upload(gu);
  swiglu_rows(dgu, T, ffn, dout, nullptr);
  auto out = download(dout, T * ffn);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < ffn; ++i) {
      const double g = gu[t * 2 * ffn + i], u = gu[t * 2 * ffn + ffn + i];
      const double ref = g / (1 + std::exp(-g)) * u;
      worst = std::max(worst, std::abs(out[t * ffn + i] - ref) / (std::abs(ref) + 1e-3));
    }
  EXPECT_LT(worst, 1e-4) << "swiglu";

  for (bool adjacent : {true, false}) {
    const int64_t ld = (heads + 2 * kv_heads) * hd;
    auto q = random(T * ld, 2.0f);
    std::vector<int32_t> positions = {0, 7, 100, 4095, 12345};
    float* dq = upload(q);
    int32_t* dpos = upload(positions);
    rope_in_place(dq, ld, T, heads, kv_heads, hd, dpos, 10000.0f, adjacent, nullptr);
    auto got = download(dq, T * ld);
    worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads + 2 * kv_heads; ++h)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + hd / 2;
          const int64_t base = t * ld + h * hd;
          double ra = q[base + a], rb = q[base + b];
          if (h < heads + kv_heads) {
            const double ang = positions[t] * std::pow(10000.0, -2.0 * i / hd);
            ra = q[base + a] * std::cos(ang) - q[base + b] * std::sin(ang);
            rb = q[base + b] * std::cos(ang) + q[base + a] * std::sin(ang);
          }
          worst = std::max({worst, std::abs(got[base + a] - ra), std::abs(got[base + b] - rb)});
        }
    // float angle = pos · inv_freq in f32: ~1e-3 absolute at position 12345.
    EXPECT_LT(worst, 1e-2) << "rope adjacent=" << adjacent;
    cudaFree(dq);
    cudaFree(dpos);
  }
  cudaFree(dgu);
  cudaFree(dout);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Paged KV (shuffled block table) + append + min/max + masked attention against a CPU
// reference over the bf16-rounded keys and values.
TEST_F(ModelOpsTest, PagedAppendMinMaxAndMaskedAttentionMatchCpu) {
  const int64_t kv_heads = 2, group = 3, heads = kv_heads * group, hd = 128, B = 16;
  const int64_t committed = 37, T = 6, blocks = 4;
  const int64_t ld = (heads + 2 * kv_heads) * hd, qd = heads * hd, kvd = kv_heads * hd;
  std::vector<int32_t> table = {2, 0, 3, 1};
  testing::DevicePagedKv cache(blocks, kv_heads, B, hd, table);  // NaN until written
  const PagedKvLayer& kv = cache.kv;
  // Committed rows then T new rows, written as two appends.
  const int64_t rows = committed + T;
  auto all = random(rows * ld, 1.5f);
  float* dall = upload(all);
  // Steps {committed, first_new}: the committed rows as one append, then the new rows.
  const std::vector<int32_t> steps = {0, 0, int32_t(committed), int32_t(committed)};
  int32_t* dsteps = upload(steps);
  kv_append_at(kv, dall, ld, qd, qd + kvd, committed, dsteps, nullptr);
  kv_append_at(kv, dall + committed * ld, ld, qd, qd + kvd, T, dsteps + 2, nullptr);
  kv_update_min_max(kv, 0, (rows + B - 1) / B, rows, nullptr);
  std::vector<uint8_t> mask(T * T);
  std::bernoulli_distribution coin(0.5);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) mask[i * T + j] = (i == j) || coin(rng_);
  uint8_t* dmask = upload(mask);
  float* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dout, T * qd * 4), cudaSuccess);
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = dall + committed * ld;
  // Split over blocks: 3 splits of 32 rows (the third gets none of the 43), launched twice to
  // check that the counters come back to zero.
  AttentionSplit split;
  split.splits = 3;
  split.rows_per_split = 32;
  split.partial_floats_per_pair = 3 * (hd + 2);
  ASSERT_EQ(cudaMalloc(&split.partial, T * heads * split.partial_floats_per_pair * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&split.counters, T * heads * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(split.counters, 0, T * heads * 4), cudaSuccess);
  for (int variant = 0; variant < 6; ++variant) {
    const bool use_mask = variant % 2 == 0;
    attention_at(q, ld, T, heads, kv, dsteps + 2, use_mask ? dmask : nullptr, scale, dout, nullptr,
                 variant < 2 ? AttentionSplit{} : split);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto out = download(dout, T * qd);
    double num = 0, den = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / group;
        std::vector<int64_t> idx;
        for (int64_t r = 0; r < committed + T; ++r) {
          if (r >= committed) {
            const int64_t j = r - committed;
            if (use_mask ? !mask[t * T + j] : j > t) continue;
          }
          idx.push_back(r);
        }
        const auto ref = testing::reference_attention_row(&all[(committed + t) * ld + h * hd], hd, scale, idx, all, ld,
                                                          qd + g * hd, qd + kvd + g * hd);
        for (int64_t k = 0; k < hd; ++k) {
          const double got = out[t * qd + h * hd + k];
          num += (got - ref[k]) * (got - ref[k]);
          den += ref[k] * ref[k];
        }
      }
    const double err = std::sqrt(num / den);
    std::printf("attention (mask=%d, split=%d) rel L2 %.2e\n", use_mask, variant >= 2, err);
    // The reference reads the same bf16 keys and values; only f32 arithmetic differs.
    EXPECT_LT(err, 1e-4);
  }
  // Block min/max over the rows present, per (block, head, dim): the bf16 bits of the CPU's f32
  // min/max of the bf16 keys, exactly (a min of bf16 values is one of them, so bf16 holds it).
  auto kmin = download(kv.key_min, cache.n_meta), kmax = download(kv.key_max, cache.n_meta);
  for (int64_t b = 0; b * B < rows; ++b)
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t k = 0; k < hd; ++k) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t r = b * B; r < std::min(rows, (b + 1) * B); ++r) {
          lo = std::min(lo, bf_round(all[r * ld + qd + g * hd + k]));
          hi = std::max(hi, bf_round(all[r * ld + qd + g * hd + k]));
        }
        const int64_t m = (table[b] * kv_heads + g) * hd + k;
        ASSERT_EQ(kmin[m], bf16_bits_of(lo)) << "block " << b << " head " << g << " dim " << k;
        ASSERT_EQ(kmax[m], bf16_bits_of(hi)) << "block " << b << " head " << g << " dim " << k;
      }
  cudaFree(dall);
  cudaFree(dmask);
  cudaFree(dsteps);
  cudaFree(dout);
  cudaFree(split.partial);
  cudaFree(split.counters);
}

// The decode step's fused launch gives the same bits as the three launches it replaces, over
// decode steps that cross block boundaries, for both RoPE pairings and two head sizes.
TEST_F(ModelOpsTest, FusedDecodeRopeAppendEqualsTheSeparateLaunches) {
  for (int64_t hd : {64, 128}) {
    for (bool adjacent : {false, true}) {
      const int64_t heads = 6, kv_heads = 2, B = 16, blocks = 3, steps = 40;
      const int64_t qd = heads * hd, kvd = kv_heads * hd, ld = qd + 2 * kvd;
      const std::vector<int32_t> table = {1, 2, 0};
      testing::DevicePagedKv separate_cache(blocks, kv_heads, B, hd, table, 0, 0),
          fused_cache(blocks, kv_heads, B, hd, table, 0, 0), deferred_cache(blocks, kv_heads, B, hd, table, 0, 0);
      PagedKvLayer &separate = separate_cache.kv, &fused = fused_cache.kv, &deferred = deferred_cache.kv;
      float *qa = nullptr, *qb = nullptr;
      int32_t *step = nullptr, *pos = nullptr;
      ASSERT_EQ(cudaMalloc(&qa, ld * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&qb, ld * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&step, 2 * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&pos, 4), cudaSuccess);
      for (int64_t r = 0; r < steps; ++r) {
        const auto row = random(ld, 2.0f);
        const int32_t st[2] = {int32_t(r), int32_t(r)};
        const int32_t p = int32_t(r * 7 + 3);  // positions need not equal rows
        ASSERT_EQ(cudaMemcpy(qa, row.data(), ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(qb, row.data(), ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(step, st, 8, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice), cudaSuccess);
        rope_in_place(qa, ld, 1, heads, kv_heads, hd, pos, 10000.0f, adjacent, nullptr);
        kv_append_at(separate, qa, ld, qd, qd + kvd, 1, step, nullptr);
        kv_update_min_max_at(separate, 1, step, nullptr);
        rope_append_decode_at(qb, heads, kv_heads, hd, pos, 10000.0f, adjacent, fused, qd + kvd, step, nullptr);
        ASSERT_EQ(cudaMemcpy(qb, row.data(), ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
        rope_append_decode_at(qb, heads, kv_heads, hd, pos, 10000.0f, adjacent, deferred, qd + kvd, step, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto a = download(qa, qd), b = download(qb, qd);  // the rotated queries
        ASSERT_EQ(a, b) << "queries, step " << r << " hd " << hd << " adjacent " << adjacent;
      }
      {  // then 5 rows at once (a tree verify): rope_append_at against the three launches
        const int64_t T = 5;
        const auto rows = random(T * ld, 2.0f);
        const std::vector<int32_t> st = {int32_t(steps), int32_t(steps)}, ps = {300, 301, 301, 302, 302};
        float *ra = nullptr, *rb = nullptr;
        ASSERT_EQ(cudaMalloc(&ra, T * ld * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&rb, T * ld * 4), cudaSuccess);
        int32_t* pos_t = upload(ps);
        ASSERT_EQ(cudaMemcpy(ra, rows.data(), T * ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(rb, rows.data(), T * ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(step, st.data(), 8, cudaMemcpyHostToDevice), cudaSuccess);
        rope_in_place(ra, ld, T, heads, kv_heads, hd, pos_t, 10000.0f, adjacent, nullptr);
        kv_append_at(separate, ra, ld, qd, qd + kvd, T, step, nullptr);
        kv_update_min_max_at(separate, T, step, nullptr);
        rope_append_at(rb, ld, T, heads, kv_heads, hd, pos_t, 10000.0f, adjacent, fused, qd + kvd, step, true, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto a = download(ra, T * ld), b = download(rb, T * ld);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t c = 0; c < qd; ++c) ASSERT_EQ(a[t * ld + c], b[t * ld + c]) << "query " << t << "," << c;
        }
        // Without the min/max update: the same rows and queries, the metadata as it was before
        // (the 40 single rows'), and kv_update_min_max_at afterwards gives the fused result.
        const size_t n_meta = blocks * kv_heads * hd;
        const auto min_before = download(deferred.key_min, n_meta), max_before = download(deferred.key_max, n_meta);
        ASSERT_EQ(cudaMemcpy(rb, rows.data(), T * ld * 4, cudaMemcpyHostToDevice), cudaSuccess);
        rope_append_at(rb, ld, T, heads, kv_heads, hd, pos_t, 10000.0f, adjacent, deferred, qd + kvd, step, false,
                       nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(download(rb, T * ld), b);
        EXPECT_EQ(download(deferred.key_min, n_meta), min_before);
        EXPECT_EQ(download(deferred.key_max, n_meta), max_before);
        EXPECT_NE(download(fused.key_max, n_meta), max_before);  // the 5 rows did move the maxima
        kv_update_min_max_at(deferred, T, step, nullptr);
        cudaFree(ra);
        cudaFree(rb);
        cudaFree(pos_t);
      }
      const size_t n_kv = blocks * kv_heads * B * hd, n_meta = blocks * kv_heads * hd;
      EXPECT_EQ(download(separate.keys, n_kv), download(fused.keys, n_kv)) << "hd " << hd;
      EXPECT_EQ(download(separate.values, n_kv), download(fused.values, n_kv)) << "hd " << hd;
      // Every block holds rows (45 rows over 3 blocks of 16), so all metadata is live.
      expect_min_max_of_cached_keys(fused_cache, table, steps + 5);
      EXPECT_EQ(download(separate.key_min, n_meta), download(fused.key_min, n_meta)) << "hd " << hd;
      EXPECT_EQ(download(separate.key_max, n_meta), download(fused.key_max, n_meta)) << "hd " << hd;
      EXPECT_EQ(download(deferred.keys, n_kv), download(fused.keys, n_kv)) << "hd " << hd;
      EXPECT_EQ(download(deferred.values, n_kv), download(fused.values, n_kv)) << "hd " << hd;
      EXPECT_EQ(download(deferred.key_min, n_meta), download(fused.key_min, n_meta)) << "hd " << hd;
      EXPECT_EQ(download(deferred.key_max, n_meta), download(fused.key_max, n_meta)) << "hd " << hd;
      cudaFree(qa);
      cudaFree(qb);
      cudaFree(step);
      cudaFree(pos);
    }
  }
}

// The split row ops (a verify's work between two stacked cuBLAS GEMMs) against double CPU
// references, for every per-thread width of the norm kernel (dim 576: one float4 a thread, 1536:
// two, 4096: four, 8192: eight). hi + lo carries ~16 bits: within 5e-5 of the reference, where
// hi alone (bf16) is off by up to 2e-3.
TEST_F(ModelOpsTest, SplitRowOpsMatchCpu) {
  struct Shape {
    int64_t T, dim, ffn;
  };
  for (const Shape sh : {Shape{3, 576, 1536}, Shape{61, 1536, 512}, Shape{61, 4096, 1024}, Shape{17, 8192, 256}}) {
    const int64_t T = sh.T, dim = sh.dim, ffn = sh.ffn, ld_x = dim + 8;
    ASSERT_TRUE(split_row_ops_fit(dim, ffn));
    const int64_t width = std::max(dim, ffn);
    bf16_bits* dhalves = nullptr;
    ASSERT_EQ(cudaMalloc(&dhalves, 2 * T * width * 2), cudaSuccess);
    auto halves_value = [&](const std::vector<uint16_t>& h, int64_t n, int64_t i) {
      auto f = [](uint16_t b) {  // a bf16 is the upper half of an f32
        const uint32_t bits = uint32_t{b} << 16;
        float v;
        std::memcpy(&v, &bits, 4);
        return double(v);
      };
      return f(h[i]) + f(h[n + i]);
    };
    // The worst relative error of the halves (T, n) against ref(t, i).
    auto worst_of = [&](int64_t n, auto&& ref) {
      const auto h = download(dhalves, 2 * T * n);
      double worst = 0;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < n; ++i) {
          const double r = ref(t, i);
          worst = std::max(worst, std::abs(halves_value(h, T * n, t * n + i) - r) / (std::abs(r) + 1e-3));
        }
      return worst;
    };
    const auto w = random(dim, 1.5f);
    float* dw = upload(w);
    // rmsnorm(x) of rows with stride ld_x.
    auto norm_ref = [&](const std::vector<float>& x, int64_t ld) {
      std::vector<double> inv(T);
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += double(x[t * ld + i]) * x[t * ld + i];
        inv[t] = 1.0 / std::sqrt(ss / dim + 1e-5);
      }
      return [&x, ld, inv, &w](int64_t t, int64_t i) { return x[t * ld + i] * inv[t] * w[i]; };
    };
    {
      const auto x = random(T * ld_x, 3.0f);
      float* dx = upload(x);
      rmsnorm_split_rows(dx, ld_x, dw, T, dim, 1e-5f, dhalves, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const double worst = worst_of(dim, norm_ref(x, ld_x));
      std::printf("rmsnorm split (T %lld, dim %lld): worst rel %.2e\n", (long long)T, (long long)dim, worst);
      EXPECT_LT(worst, 5e-5) << "rmsnorm split, dim " << dim;
      EXPECT_EQ(download(dx, T * ld_x), x) << "x is only read";
      cudaFree(dx);
    }
    {
      auto x = random(T * dim, 3.0f);
      const auto y2 = random(2 * T * dim, 2.0f);
      float* dx = upload(x);
      float* dy2 = upload(y2);
      add_halves_rmsnorm_split_rows(dy2, T, dim, dx, dw, 1e-5f, dhalves, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      // The residual: bit for bit add_split_halves's x + (hi product + lo product).
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < dim; ++i) x[t * dim + i] += y2[t * dim + i] + y2[(T + t) * dim + i];
      ASSERT_EQ(download(dx, T * dim), x) << "residual, dim " << dim;
      const double worst = worst_of(dim, norm_ref(x, dim));
      std::printf("add + rmsnorm split (T %lld, dim %lld): worst rel %.2e\n", (long long)T, (long long)dim, worst);
      EXPECT_LT(worst, 5e-5) << "add + rmsnorm split, dim " << dim;
      cudaFree(dx);
      cudaFree(dy2);
    }
    {
      const auto y2 = random(2 * T * 2 * ffn, 4.0f);
      float* dy2 = upload(y2);
      swiglu_halves_split_rows(dy2, T, ffn, dhalves, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const double worst = worst_of(ffn, [&](int64_t t, int64_t i) {
        const double g = double(y2[t * 2 * ffn + i]) + y2[(T + t) * 2 * ffn + i];
        const double u = double(y2[t * 2 * ffn + ffn + i]) + y2[(T + t) * 2 * ffn + ffn + i];
        return g / (1 + std::exp(-g)) * u;
      });
      std::printf("swiglu split (T %lld, ffn %lld): worst rel %.2e\n", (long long)T, (long long)ffn, worst);
      EXPECT_LT(worst, 5e-5) << "swiglu split, ffn " << ffn;
      cudaFree(dy2);
    }
    cudaFree(dw);
    cudaFree(dhalves);
  }
}

// rope_append_halves_at equals add_split_halves' sum followed by rope_append_at, bit for bit: the
// qkv rows (Q rotated, K and V as summed), the cache rows and the block min/max, over a tree's 61
// rows that start mid-block.
TEST_F(ModelOpsTest, RopeAppendHalvesEqualsAddThenRopeAppend) {
  for (int64_t hd : {64, 128}) {
    for (bool adjacent : {false, true}) {
      const int64_t T = 61, heads = 8, kv_heads = 2, B = 16, blocks = 5, first_new = 5;
      const int64_t qd = heads * hd, kvd = kv_heads * hd, ld = qd + 2 * kvd;
      const std::vector<int32_t> table = {3, 1, 4, 0, 2};
      testing::DevicePagedKv plain_cache(blocks, kv_heads, B, hd, table, 0, 0),
          halves_cache(blocks, kv_heads, B, hd, table, 0, 0);
      const auto y2 = random(2 * T * ld, 2.0f);
      std::vector<float> summed(T * ld);
      for (int64_t i = 0; i < T * ld; ++i) summed[i] = y2[i] + y2[T * ld + i];
      std::vector<int32_t> positions(T);
      for (int64_t t = 0; t < T; ++t) positions[t] = int32_t(first_new + 1 + t / 6);  // tree depths
      const std::vector<int32_t> st = {int32_t(first_new), int32_t(first_new)};
      float* dplain = upload(summed);
      float* dy2 = upload(y2);
      float* dqkv = upload(std::vector<float>(T * ld, 0.0f));
      int32_t* dpos = upload(positions);
      int32_t* dstep = upload(st);
      rope_append_at(dplain, ld, T, heads, kv_heads, hd, dpos, 500000.0f, adjacent, plain_cache.kv, qd + kvd, dstep,
                     true, nullptr);
      rope_append_halves_at(dy2, dqkv, ld, T, heads, kv_heads, hd, dpos, 500000.0f, adjacent, halves_cache.kv, qd + kvd,
                            dstep, true, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(download(dqkv, T * ld), download(dplain, T * ld)) << "qkv, hd " << hd << " adjacent " << adjacent;
      const auto& a = plain_cache;
      const auto& b = halves_cache;
      EXPECT_EQ(download(b.kv.keys, b.n_kv), download(a.kv.keys, a.n_kv)) << "keys, hd " << hd;
      EXPECT_EQ(download(b.kv.values, b.n_kv), download(a.kv.values, a.n_kv)) << "values, hd " << hd;
      EXPECT_EQ(download(b.kv.key_min, b.n_meta), download(a.kv.key_min, a.n_meta)) << "key min, hd " << hd;
      EXPECT_EQ(download(b.kv.key_max, b.n_meta), download(a.kv.key_max, a.n_meta)) << "key max, hd " << hd;
      // Not vacuous: the rows did land in the cache (a key of the last row is not the zero fill).
      const auto keys = download(b.kv.keys, b.n_kv);
      EXPECT_NE(std::count(keys.begin(), keys.end(), uint16_t{0}), static_cast<long>(keys.size()));
      cudaFree(dplain);
      cudaFree(dy2);
      cudaFree(dqkv);
      cudaFree(dpos);
      cudaFree(dstep);
    }
  }
}

// With TreeQueryRows, rope_append_at and rope_append_halves_at leave qkv and the cache as they do
// without, and write the rotated queries as q_rows_to_bf16 of that qkv writes them, bit for bit,
// in a shuffled tree order (a planned verify's: one launch a layer less).
TEST_F(ModelOpsTest, RopeAppendWritesTreeQueryRows) {
  for (bool halves : {false, true}) {
    for (int64_t hd : {64, 128}) {
      const int64_t T = 61, heads = 8, kv_heads = 2, B = 16, blocks = 5, first_new = 5;
      const int64_t qd = heads * hd, kvd = kv_heads * hd, ld = qd + 2 * kvd;
      const std::vector<int32_t> table = {3, 1, 4, 0, 2};
      testing::DevicePagedKv without(blocks, kv_heads, B, hd, table, 0, 0), with(blocks, kv_heads, B, hd, table, 0, 0);
      const auto y2 = random(2 * T * ld, 2.0f);
      std::vector<int32_t> positions(T), order(T);
      for (int64_t t = 0; t < T; ++t) positions[t] = int32_t(first_new + 1 + t / 6);
      for (int64_t t = 0; t < T; ++t) order[t] = int32_t(t);
      std::shuffle(order.begin(), order.end(), rng_);
      const std::vector<int32_t> st = {int32_t(first_new), int32_t(first_new)};
      // Without halves the kernels read qkv itself: the first half of y2 stands in for it.
      const std::vector<float> qkv0(y2.begin(), y2.begin() + T * ld);
      float* dy2 = upload(y2);
      float* dplain = upload(qkv0);
      float* dtree = upload(qkv0);
      int32_t* dpos = upload(positions);
      int32_t* dstep = upload(st);
      int32_t* dorder = upload(order);
      uint16_t* dq = upload(std::vector<uint16_t>(T * qd, 0));
      uint16_t* dq_ref = upload(std::vector<uint16_t>(T * qd, 0));
      const TreeQueryRows tree_q{dq, dorder};
      if (halves) {
        rope_append_halves_at(dy2, dplain, ld, T, heads, kv_heads, hd, dpos, 10000.0f, false, without.kv, qd + kvd,
                              dstep, true, nullptr);
        rope_append_halves_at(dy2, dtree, ld, T, heads, kv_heads, hd, dpos, 10000.0f, false, with.kv, qd + kvd, dstep,
                              true, nullptr, tree_q);
      } else {
        rope_append_at(dplain, ld, T, heads, kv_heads, hd, dpos, 10000.0f, false, without.kv, qd + kvd, dstep, true,
                       nullptr);
        rope_append_at(dtree, ld, T, heads, kv_heads, hd, dpos, 10000.0f, false, with.kv, qd + kvd, dstep, true,
                       nullptr, tree_q);
      }
      q_rows_to_bf16(dplain, ld, T, qd, dorder, dq_ref, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string where = std::string(halves ? "halves" : "plain") + ", hd " + std::to_string(hd);
      EXPECT_EQ(download(dtree, T * ld), download(dplain, T * ld)) << "qkv, " << where;
      EXPECT_EQ(download(with.kv.keys, with.n_kv), download(without.kv.keys, without.n_kv)) << "keys, " << where;
      EXPECT_EQ(download(with.kv.values, with.n_kv), download(without.kv.values, without.n_kv)) << "values, " << where;
      EXPECT_EQ(download(with.kv.key_min, with.n_meta), download(without.kv.key_min, without.n_meta)) << where;
      const auto q = download(dq, T * qd);
      EXPECT_EQ(q, download(dq_ref, T * qd)) << "tree query rows, " << where;
      // Not vacuous: every row was written (the zero fill has no nonzero bf16 in a row).
      for (int64_t j = 0; j < T; ++j) {
        EXPECT_NE(std::count(q.begin() + j * qd, q.begin() + (j + 1) * qd, uint16_t{0}), qd) << "row " << j;
      }
      for (void* p : std::initializer_list<void*>{dy2, dplain, dtree, dpos, dstep, dorder, dq, dq_ref}) cudaFree(p);
    }
  }
}

}  // namespace
}  // namespace specula::cuda
