#pragma once
// attention_at (kernels/cuda/model_ops.h) for T ≥ 2 rows with each K/V row loaded once for
// several (token, query head) pairs of one KV head, with the same bits as attention_at's
// one-pair-a-block kernel.
//
// Why: attention_at runs one block per (token, query head) pair, and every block reads its KV
// head's whole context. A tree verify of 61 rows on SmolLM2 (9 query heads, 3 KV heads) reads
// each K/V row 183 times; at 8000 committed tokens that kernel took 8.2 of the verify's 9.0 ms
// of kernels (bench/results/cuda_verify_smollm2_long_s19_h200_2026-12-02.json). Here a block
// takes kPairs pairs of one KV head (pairs t·group + g in order, so the query heads of a GQA
// group and consecutive rows): each warp loads a chunk's 32 keys and values into registers once
// and runs every pair's online-softmax step over them, in attention_kernel's order per pair (the
// same warps, the same chunks a warp, the same shuffles, the same combine), so a pair's output is
// the one the old kernel gives: a verify row still equals its decode step where the projections
// do (the exact verify rows), and greedy speculative decoding is unchanged.
#include <cstdint>

#include "kernels/cuda/model_ops.h"

namespace specula::cuda {

// attention_at's arguments and contract for T ≥ 2. head_dim 64 or 128; returns false and
// launches nothing otherwise (attention_at then takes its own kernel).
bool shared_kv_attention_at(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, const PagedKvLayer& kv,
                            const int32_t* step, const uint8_t* mask, float scale, float* out, cudaStream_t stream,
                            const AttentionSplit& split, const uint8_t* block_visible);

// Whether attention_at takes shared_kv_attention_at for T ≥ 2 (process-wide, on by default); off
// gives the one-pair-a-block kernel, for A/B timing and the bit-for-bit test.
void set_shared_kv_attention(bool on);
bool shared_kv_attention();
// Pairs a block (bench A/B only): 4 or 8 at head_dim 64, 2 or 4 at 128; anything else: the
// default (4 and 4).
void set_shared_kv_attention_pairs(int pairs);
// Blocks an SM the registers are held to (bench A/B and tests), for 4 pairs a block: at head_dim
// 64, 1 gives ptxas's own count (3 blocks) and anything else the default, 4; at 128, 3 holds them
// to 3 blocks and anything else gives the default, ptxas's own count (2).
void set_shared_kv_attention_min_blocks(int blocks);

}  // namespace specula::cuda
