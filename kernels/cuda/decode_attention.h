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

// The same for 1 ≤ T ≤ 16 new rows (a chain or tree verify) in one launch, replacing
// rope_append_at (without min/max: the commit recomputes it) + attention_at with `mask`, with the
// same bits. qkv: T rows of stride ld, laid out as above; positions[t] is row t's RoPE position;
// row t goes to cache row first_new + t and sees rows [0, committed) and the new rows j with
// mask[t·T + j] != 0 (mask null: j ≤ t). out: T·n_heads·head_dim f32. The split workspace holds
// T·n_heads pairs. Each block rotates the new rows it sees itself (shared memory), so no block
// waits for another's append; one block writes each row to the cache. Key min/max are not
// touched. Returns false and launches nothing for T > 16 or head_dim other than 64 and 128.
bool tree_decode_attention_at(const float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t v_col,
                              const int32_t* positions, float theta, bool adjacent, const PagedKvLayer& kv,
                              const int32_t* step, const uint8_t* mask, float scale, float* out,
                              const AttentionSplit& split, cudaStream_t stream);

}  // namespace specula::cuda
