#pragma once
// What Qwen2/Qwen3-MoE and OLMoE add to llama attention, on the GPU: the CPU's QkvExtras
// (engine/model/qkv_extras.h) on T projected [q | k | v] rows in place, before RoPE, in
// transformers' order: + bias; RMSNorm of q and of k, per head over head_dim or over the whole
// projection; then q, k and v clamped to [-clip, clip]. And the output projection's bias.
// Host-callable from plain C++; launches are asynchronous on `stream`.
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

enum class QkNormKind { kNone, kPerHead, kFull };

struct QkvExtrasParams {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float* bias = nullptr;  // (q_dim + 2 kv_dim) f32, or null
  QkNormKind norm = QkNormKind::kNone;
  const float* q_norm = nullptr;  // kPerHead: (head_dim); kFull: (q_dim)
  const float* k_norm = nullptr;  // kPerHead: (head_dim); kFull: (kv_dim)
  float eps = 1e-6f;
  float clip = 0.0f;  // 0: off
  bool active() const { return bias != nullptr || norm != QkNormKind::kNone || clip > 0.0f; }
};

// qkv: (T, q_dim + 2 kv_dim) f32 rows of stride ld. Nothing is launched when !p.active().
void qkv_extras_rows(float* qkv, int64_t ld, int64_t T, const QkvExtrasParams& p, cudaStream_t stream);

// x[t][i] += bias[i] for T rows of dim (row stride ld).
void add_bias_rows(float* x, int64_t ld, int64_t T, int64_t dim, const float* bias, cudaStream_t stream);

}  // namespace specula::cuda
