#pragma once
// Adapters between the model backend's tree verify (engine/backend/cuda_session_sparse.cpp: f32 rows,
// a T×T mask) and the block selection / tree-attention kernels of kernels/cuda/attention.h
// (bf16 [nodes][Hq][D] queries and outputs, ancestor bitmasks, block lists). Host API in plain
// C++; every launch is asynchronous on `stream`; callers check cudaGetLastError.
#include <cstdint>

#include "kernels/cuda/attention.h"

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

// The kernels' node i is the backend's row order[i] (order: T int32 on the device, a permutation;
// the group modes group nodes in traversal order).
//
// q[i][:] = bf16(qkv[order[i]·ld + 0..q_dim)): the rows' query heads after RoPE, [T][Hq][D].
void q_rows_to_bf16(const float* qkv, int64_t ld, int64_t T, int64_t q_dim, const int32_t* order, uint16_t* q,
                    cudaStream_t stream);
// out[order[i]·width + :] = float(in[i·width + :]): tree attention's bf16 [T][Hq][D] back into the
// backend's f32 rows.
void rows_bf16_to_f32(const uint16_t* in, int64_t T, int64_t width, const int32_t* order, float* out,
                      cudaStream_t stream);
// The same rows as the Wo GEMM's input halves (f32_to_bf16_split of rows_bf16_to_f32's output, in
// one launch): hi[order[i]·width + :] = in[i·width + :], lo at the same places = the rounding
// remainder (+0 for finite values). hi, lo: (T, width) bf16 each.
void rows_bf16_to_split(const uint16_t* in, int64_t T, int64_t width, const int32_t* order, uint16_t* hi, uint16_t* lo,
                        cudaStream_t stream);
// visible[order[i]][h][b] = 1 iff the lists give node i committed block b (< committed_blocks) on
// KV head h, else 0: the block_visible argument of attention_at (kernels/cuda/model_ops.h).
// visible: [T][kv_heads][committed_blocks] uint8. Blocks at or past committed_blocks (the tree's
// own rows) are left to the mask.
void block_lists_to_visibility(const BlockLists& lists, int T, int kv_heads, int committed_blocks, const int32_t* order,
                               uint8_t* visible, cudaStream_t stream);
// *rows += committed KV rows the lists load, summed over groups and KV heads (a block at or past
// the committed ones counts none; the last committed block only its committed rows).
void add_listed_rows(const BlockLists& lists, int kv_heads, int64_t committed, int block_size,
                     unsigned long long* rows, cudaStream_t stream);

}  // namespace specula::cuda
