// kernels/cuda/qkv_extras against the CPU's QkvExtras (engine/model/qkv_extras.cpp) on random
// rows, drawn fresh every run: every combination the four MoE layouts use (Qwen2-MoE biases,
// Qwen3-MoE per-head norms with or without biases, OLMoE's whole-projection norms and clamp),
// and the output bias. Both sides compute in f32, in different orders: within 1e-5 relative.
#include "engine/model/qkv_extras.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/qkv_extras.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

class QkvExtrasTest : public testing::GpuRandomTest {};

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::isfinite(num) ? std::sqrt(num / den) : 1e30;
}

struct Case {
  const char* name;
  int64_t heads, kv_heads, head_dim;
  bool bias;
  QkNorm norm;
  float clip;
};

TEST_F(QkvExtrasTest, EveryLayoutMatchesCpu) {
  const Case cases[] = {
      {"qwen2moe biases", 16, 2, 128, true, QkNorm::None, 0.0f},
      {"qwen3moe per-head norm", 32, 4, 128, false, QkNorm::PerHead, 0.0f},
      {"qwen3moe per-head norm + biases", 9, 3, 64, true, QkNorm::PerHead, 0.0f},
      {"olmoe full norm + clip", 16, 16, 128, false, QkNorm::Full, 0.8f},
      {"clip alone, head_dim 8", 2, 1, 8, false, QkNorm::None, 0.5f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim, n = qd + 2 * kvd, T = 7, ld = n + 4;
    QkvExtras cpu;
    cpu.n_heads = c.heads;
    cpu.n_kv_heads = c.kv_heads;
    cpu.head_dim = c.head_dim;
    cpu.norm = c.norm;
    cpu.clip = c.clip;
    cpu.eps = 1e-6f;
    if (c.bias) cpu.qkv_bias = random(static_cast<size_t>(n), 0.5f);
    if (c.norm == QkNorm::PerHead) {
      cpu.q_norm = random(static_cast<size_t>(c.head_dim), 2.0f);
      cpu.k_norm = random(static_cast<size_t>(c.head_dim), 2.0f);
    } else if (c.norm == QkNorm::Full) {
      cpu.q_norm = random(static_cast<size_t>(qd), 2.0f);
      cpu.k_norm = random(static_cast<size_t>(kvd), 2.0f);
    }
    std::vector<float> rows = random(static_cast<size_t>(T * ld), 1.5f);
    std::vector<float> want = rows;
    for (int64_t t = 0; t < T; ++t) cpu.apply(want.data() + t * ld);

    QkvExtrasParams p;
    p.n_heads = c.heads;
    p.n_kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.norm = c.norm == QkNorm::PerHead ? QkNormKind::kPerHead
             : c.norm == QkNorm::Full  ? QkNormKind::kFull
                                       : QkNormKind::kNone;
    p.eps = cpu.eps;
    p.clip = c.clip;
    float* d_bias = c.bias ? testing::upload(cpu.qkv_bias) : nullptr;
    float* d_qn = cpu.q_norm.empty() ? nullptr : testing::upload(cpu.q_norm);
    float* d_kn = cpu.k_norm.empty() ? nullptr : testing::upload(cpu.k_norm);
    p.bias = d_bias;
    p.q_norm = d_qn;
    p.k_norm = d_kn;
    float* d_rows = testing::upload(rows);
    qkv_extras_rows(d_rows, ld, T, p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = testing::download(d_rows, rows.size());
    EXPECT_LT(rel_l2(got, want), 1e-5);
    // The 4 padding floats of each row are not touched.
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = n; i < ld; ++i) EXPECT_EQ(got[t * ld + i], rows[t * ld + i]);
    if (c.clip > 0.0f) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < n; ++i) EXPECT_LE(std::fabs(got[t * ld + i]), c.clip) << "row " << t << " column " << i;
    }
    for (float* d : {d_bias, d_qn, d_kn, d_rows}) cudaFree(d);
  }
}

TEST_F(QkvExtrasTest, OutputBiasAddsToEveryRow) {
  const int64_t T = 5, dim = 1000, ld = 1024;
  const std::vector<float> x = random(static_cast<size_t>(T * ld)), bias = random(static_cast<size_t>(dim));
  float* d_x = testing::upload(x);
  float* d_b = testing::upload(bias);
  add_bias_rows(d_x, ld, T, dim, d_b, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = testing::download(d_x, x.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < ld; ++i) {
      const float want = i < dim ? x[t * ld + i] + bias[i] : x[t * ld + i];
      ASSERT_EQ(got[t * ld + i], want) << "row " << t << " column " << i;
    }
  }
  cudaFree(d_x);
  cudaFree(d_b);
}

}  // namespace
}  // namespace specula::cuda
