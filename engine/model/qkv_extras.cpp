#include "engine/model/qkv_extras.h"

#include <algorithm>

#include "engine/model/packed_weights.h"
#include "kernels/cpu/rmsnorm.h"

namespace specula {

QkvExtras QkvExtras::for_layer(const ModelConfig& c, const LayerWeights& w) {
  QkvExtras e;
  e.n_heads = c.n_heads;
  e.n_kv_heads = c.n_kv_heads;
  e.head_dim = c.head_dim;
  e.eps = c.rms_eps;
  e.clip = c.clip_qkv;
  e.norm = c.qk_norm;
  if (!w.bq.data.empty()) {
    for (const TensorRef* b : {&w.bq, &w.bk, &w.bv}) {
      const std::vector<float> part = to_f32(*b);
      e.qkv_bias.insert(e.qkv_bias.end(), part.begin(), part.end());
    }
  }
  if (!w.bo.data.empty()) e.output_bias = to_f32(w.bo);
  if (e.norm != QkNorm::None) {
    e.q_norm = to_f32(w.q_norm);
    e.k_norm = to_f32(w.k_norm);
  }
  return e;
}

void QkvExtras::apply(float* row) const {
  const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  const int64_t n = q_dim + 2 * kv_dim;
  for (size_t i = 0; i < qkv_bias.size(); ++i) row[i] += qkv_bias[i];
  float* k = row + q_dim;
  if (norm == QkNorm::PerHead) {
    for (int64_t h = 0; h < n_heads; ++h) rmsnorm(row + h * head_dim, q_norm.data(), row + h * head_dim, head_dim, eps);
    for (int64_t h = 0; h < n_kv_heads; ++h) rmsnorm(k + h * head_dim, k_norm.data(), k + h * head_dim, head_dim, eps);
  } else if (norm == QkNorm::Full) {
    rmsnorm(row, q_norm.data(), row, q_dim, eps);
    rmsnorm(k, k_norm.data(), k, kv_dim, eps);
  }
  if (clip > 0.0f) {
    for (int64_t i = 0; i < n; ++i) row[i] = std::clamp(row[i], -clip, clip);
  }
}

void QkvExtras::add_output_bias(float* x_row) const {
  for (size_t i = 0; i < output_bias.size(); ++i) x_row[i] += output_bias[i];
}

}  // namespace specula
