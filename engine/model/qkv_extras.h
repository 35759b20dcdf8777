#pragma once
// What Qwen2/Qwen3-MoE and OLMoE add to llama attention, in transformers' order, on one token's
// projected [q | k | v] row before RoPE: the projection biases, then RMSNorm of q and k (per
// head over head_dim, or over the whole projection), then q, k and v clamped to [-clip, clip];
// and the output projection's bias. Empty for llama models (active() is false).
#include <cstdint>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace specula {

struct QkvExtras {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::vector<float> qkv_bias;     // (q_dim + 2 kv_dim), or empty
  std::vector<float> output_bias;  // (dim), or empty
  QkNorm norm = QkNorm::None;
  std::vector<float> q_norm, k_norm;  // PerHead: (head_dim) each; Full: (q_dim), (kv_dim)
  float eps = 1e-6f;
  float clip = 0.0f;  // 0 = off

  static QkvExtras for_layer(const ModelConfig& config, const LayerWeights& layer);
  bool active() const { return !qkv_bias.empty() || norm != QkNorm::None || clip > 0.0f; }
  void apply(float* qkv_row) const;          // (q_dim + 2 kv_dim), in place
  void add_output_bias(float* x_row) const;  // (dim), in place; nothing without a bias
};

}  // namespace specula
