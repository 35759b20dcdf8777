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

// qkv: the token's projection, f32: query heads at 0, key heads at n_heads·head_dim, value
// heads at v_col (head_dim each). step[0] = committed, step[1] = first_new (device, as for the
// *_at launches): the new row is written to row first_new and sees rows [0, committed) and
// itself. positions[0] is its RoPE position; adjacent as rope_in_place. out: n_heads·head_dim
// f32. With split.splits > 1 (attention_split_for), the rows go over split blocks of
// rows_per_split and only the ceil((committed + 1) / rows_per_split) that hold rows run; the
// workspace as for attention_at. head_dim 64 or 128 (the kernel's templates); returns false and
// launches nothing otherwise.
bool decode_attention_at(const float* qkv, int64_t n_heads, int64_t v_col, const int32_t* positions, float theta,
                         bool adjacent, const PagedKvLayer& kv, const int32_t* step, float scale, float* out,
                         const AttentionSplit& split, cudaStream_t stream);

}  // namespace specula::cuda
