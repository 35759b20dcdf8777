#pragma once
// The attention of one decode token (T = 1, no mask) in one launch: RoPE of its query and key
// heads, the K/V append of its row (with the touched block's key min/max) and attention over KV
// rows [0, committed) and the new row. It replaces rope_append_decode_at + attention_at
// (kernels/cuda/model_ops.h) in the decode step, with the same results: the new row's key and
// value enter the scores and the weighted sum from shared memory, rounded to bf16 as the cache
// holds them, so no block waits for another block's append. One launch fewer a layer, and the
// RoPE angles, the step and the first keys are read before the wait for the QKV projection.
#include <cstdint>

#include "kernels/cuda/model_ops.h"

namespace specula::cuda {

// The attention output projection folded into the decode attention launch (x += Wo · att, one
// launch fewer a layer): the launch runs in clusters of 8 blocks per head, which load Wo's
// columns [h·head_dim, (h+1)·head_dim) (an eighth of the rows each) before the wait and, once
// the head's row is known, write those dim partial sums to parts[h·dim ..]. The caller adds the
// heads' parts to the residual in head order (decode_ffn.h does, in the FFN launch after it).
// wo: (dim, wo_ld) row-major bf16, 16-byte aligned, wo_ld a multiple of 8.
struct DecodeWoFold {
  const bf16_bits* wo = nullptr;
  int64_t wo_ld = 0;       // Wo's row length: n_heads · head_dim
  int64_t dim = 0;         // Wo's rows: the model width
  float* parts = nullptr;  // (n_heads, dim) f32
};

// Whether decode_attention_at takes a fold of this shape: head_dim 64 (the fold's lane layout).
bool decode_wo_fold_fits(int64_t dim, int64_t head_dim);

// qkv: the token's projection, f32: query heads at 0, key heads at n_heads·head_dim, value
// heads at v_col (head_dim each). step[0] = committed, step[1] = first_new (device, as for the
// *_at launches): the new row is written to row first_new and sees rows [0, committed) and
// itself. positions[0] is its RoPE position; adjacent as rope_in_place. out: n_heads·head_dim
// f32. With split.splits > 1 (attention_split_for), the rows go over split blocks of
// rows_per_split and only the ceil((committed + 1) / rows_per_split) that hold rows run; the
// workspace as for attention_at. head_dim 64 or 128 (the kernel's templates); with fold (may be
// null), also Wo's per-head products as DecodeWoFold says. Returns false and launches nothing
// where it cannot (another head_dim, a fold that does not fit).
bool decode_attention_at(const float* qkv, int64_t n_heads, int64_t v_col, const int32_t* positions, float theta,
                         bool adjacent, const PagedKvLayer& kv, const int32_t* step, float scale, float* out,
                         const AttentionSplit& split, cudaStream_t stream, const DecodeWoFold* fold = nullptr);

}  // namespace specula::cuda
