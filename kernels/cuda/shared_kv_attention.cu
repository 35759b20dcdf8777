// shared_kv_attention.h says what and why. The per-pair arithmetic below is model_ops.cu's
// attention_kernel<8, kHd> step for step: change one and the other together (the bit-for-bit test,
// tests/kernels/cuda/shared_kv_attention_test.cpp, holds them to it).
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>

#include "kernels/cuda/attention_combine.cuh"
#include "kernels/cuda/paged_kv.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/shared_kv_attention.h"

namespace specula::cuda {
namespace {

using paged_kv::slot_row;

constexpr int kWarps = 4;  // attention_kernel's: a warp's chunks are w, w + 4, ... of 32 rows
constexpr int kStepCommitted = 0, kStepFirstNew = 1;

// grid (n_kv_heads, ceil(T·group / kPairs), splits), kWarps warps. Block (kvh, y, z) takes pairs
// y·kPairs + p = t·group + g (token t, query head kvh·group + g) over split z's rows.
// Registers a lane: the chunk's key (kHd / 8 uint4), its value rows (32 / (32 / (kHd / 8)) uint4:
// rows g, g + G, ... of the chunk, dims slice·8..+8, as attention_kernel's lanes), and each
// pair's 8 weighted values, max and sum. ptxas -v with no minimum of blocks (kMinBlocks 0; no
// spills): kHd 64 takes 168 registers at 4 pairs (3 blocks an SM), 255 at 8; kHd 128 226 at 2
// pairs, 246 at 4. At 8000 rows and 61 SmolLM2 rows, 4 pairs took the verify 5.23 ms, 8 pairs 5.47;
// the Llama-8B shape at 32K / 61 rows 106 ms at 4 pairs, 152 at 2
// (bench/results/shared_kv_attention_s19_h200_2026-12-02.json). The kernel waits on latency (ncu:
// 3 warps a scheduler, an instruction every 2.4 cycles), so kHd 64 holds its registers to 4 blocks
// an SM (128 registers, 100 bytes of spills): 5.22 -> 5.03 ms at 8000 / 61 rows, 2.41 -> 2.32 at
// 8000 / 17; at kHd 128, 3 blocks (168 registers, 428 bytes of spills) lost, 106 -> 111 ms
// (shared_kv_attention_min_blocks_s19_h200_2026-12-02.json). kMinBlocks 1 is not 0: ptxas then
// took 203 registers at kHd 64.
template <int kHd, int kPairs, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    shared_kv_attention_kernel(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, PagedKvLayer kv,
                               const uint8_t* mask, float scale, float* out, const int32_t* step, AttentionSplit split,
                               const uint8_t* block_visible) {
  constexpr int kLanesPerRow = kHd / 8, kGroups = 32 / kLanesPerRow, kRowsPerLane = 32 / kGroups;
  static_assert(kPairs < 32,
                "a lane's visibility is a 32-bit mask over the pairs, and (1 << n_pairs) - 1 its full set");
  pdl_trigger();
  pdl_wait();
  const int64_t committed = step[kStepCommitted], first_new = step[kStepFirstNew];
  const int64_t kvh = blockIdx.x, group = n_heads / kv.n_kv_heads;
  const int64_t pair0 = static_cast<int64_t>(blockIdx.y) * kPairs;
  const int n_pairs = static_cast<int>(min(static_cast<int64_t>(kPairs), T * group - pair0));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane / kLanesPerRow, slice = lane % kLanesPerRow;

  __shared__ float qs[kPairs][kHd];  // each pair's query, times scale (attention_kernel's qs)
  __shared__ int row_of[kPairs];     // each pair's token t
  for (int i = threadIdx.x; i < kPairs * kHd; i += blockDim.x) {
    const int p = i / kHd, d = i % kHd;
    if (p >= n_pairs) {  // a pair past T: scores computed, never used
      qs[p][d] = 0.0f;
      continue;
    }
    const int64_t pair = pair0 + p, t = pair / group, h = kvh * group + pair % group;
    qs[p][d] = q[t * ld_q + h * kHd + d] * scale;
    if (d == 0) row_of[p] = static_cast<int>(t);
  }
  __syncthreads();

  float acc[kPairs][8];
  float m[kPairs], l[kPairs];
#pragma unroll
  for (int p = 0; p < kPairs; ++p) {
    m[p] = -INFINITY;
    l[p] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[p][i] = 0.0f;
  }
  const int64_t committed_blocks = (committed + kv.block_size - 1) / kv.block_size;
  const int64_t begin = split.splits > 1 ? blockIdx.z * split.rows_per_split : 0;
  const int64_t total = split.splits > 1 ? min(committed + T, begin + split.rows_per_split) : committed + T;
  for (int64_t first = begin + static_cast<int64_t>(warp) * 32; first < total; first += kWarps * 32) {
    const int64_t idx = first + lane;
    uint32_t seen = 0;  // bit p: pair p sees row idx
    long long slot = 0;
    if (idx < total) {
      int64_t row = idx;
      if (idx >= committed) {
        const int64_t j = idx - committed;
#pragma unroll
        for (int p = 0; p < kPairs; ++p) {
          if (p >= n_pairs) break;
          const int64_t t = row_of[p];
          seen |= static_cast<uint32_t>(mask ? mask[t * T + j] != 0 : j <= t) << p;
        }
        row = first_new + j;
      } else if (block_visible) {
#pragma unroll
        for (int p = 0; p < kPairs; ++p) {
          if (p >= n_pairs) break;
          const int64_t t = row_of[p];
          seen |= static_cast<uint32_t>(
                      block_visible[(t * kv.n_kv_heads + kvh) * committed_blocks + idx / kv.block_size] != 0)
                  << p;
        }
      } else {
        seen = (1u << n_pairs) - 1;
      }
      if (seen) slot = slot_row(kv, row, kvh);
    }
    if (__ballot_sync(0xffffffffu, seen != 0) == 0) continue;  // no pair sees these 32 rows
    // The chunk's keys (a lane's row) and values (lane (g, slice): rows g, g + G, ...), loaded
    // once for every pair; rows no pair sees are not read (they may be unwritten).
    uint4 k[kHd / 8];
#pragma unroll
    for (int c = 0; c < kHd / 8; ++c)
      k[c] = seen ? reinterpret_cast<const uint4*>(kv.keys + slot)[c] : make_uint4(0, 0, 0, 0);
    uint4 v[kRowsPerLane];
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      const int r = i * kGroups + g;
      const long long base = __shfl_sync(0xffffffffu, slot, r);
      const uint32_t any = __shfl_sync(0xffffffffu, seen, r);
      v[i] = any ? *reinterpret_cast<const uint4*>(kv.values + base + slice * 8) : make_uint4(0, 0, 0, 0);
    }
    // Each pair's step, as attention_kernel's, in phases over all pairs so that their dependent
    // chains (a 64-FMA dot, two 5-shuffle reductions, the exps) overlap. Where a pair sees none
    // of the 32 rows attention_kernel skips the chunk; here its max stays, corr is 1 and every p
    // is 0, which leaves m, l and acc as they were. Where a pair does not see a row its p is 0,
    // and 0 · v adds nothing (the old kernel added 0 · 0; v is a written, finite row).
    float s[kPairs];
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kHd / 8; ++c) dot += key_dot8(qs[p] + c * 8, k[c]);
      s[p] = (seen >> p) & 1u ? dot : -INFINITY;
    }
    float corr[kPairs], pr_own[kPairs];
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      const float m_new = fmaxf(m[p], warp_max(s[p]));
      corr[p] = m_new == m[p] ? 1.0f : expf(m[p] - m_new);  // expf(0) is 1: the same bits
      pr_own[p] = s[p] == -INFINITY ? 0.0f : expf(s[p] - m_new);
      m[p] = m_new;
    }
#pragma unroll
    for (int p = 0; p < kPairs; ++p) l[p] = __fmaf_rn(l[p], corr[p], warp_sum(pr_own[p]));
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[p][i] *= corr[p];
      float pr[kRowsPerLane];
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) pr[i] = __shfl_sync(0xffffffffu, pr_own[p], i * kGroups + g);
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) add_weighted_value8(acc[p], pr[i], v[i]);
    }
  }

  __shared__ float sm_m[kPairs][kWarps], sm_l[kPairs][kWarps];
  __shared__ float sm_acc[kPairs][kWarps][kHd];
#pragma unroll
  for (int p = 0; p < kPairs; ++p) {
    if (lane == 0) {
      sm_m[p][warp] = m[p];
      sm_l[p][warp] = l[p];
    }
    // Sum the row groups' slices; group 0's lanes then hold dims slice·8..+8.
#pragma unroll
    for (int o = kLanesPerRow; o < 32; o <<= 1) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[p][i] += __shfl_xor_sync(0xffffffffu, acc[p][i], o);
    }
    if (lane < kLanesPerRow) {
#pragma unroll
      for (int i = 0; i < 8; ++i) sm_acc[p][warp][lane * 8 + i] = acc[p][i];
    }
  }
  __syncthreads();
  // combine_attention_row's arithmetic, a warp a pair (lanes over dims) instead of the block: the
  // pairs' combines and, at the last split, their merges run side by side.
  const int parts = split.splits > 1 ? split.splits : 1;
  auto out_pair = [&](int p) {
    const int64_t pair = pair0 + p;
    return pair / group * n_heads + kvh * group + pair % group;  // t · n_heads + h
  };
  for (int p = warp; p < n_pairs; p += kWarps) {
    float weights[kWarps], denom;
    const float m_all = warp_weights<kWarps>(sm_m[p], sm_l[p], weights, &denom);
    const int64_t op = out_pair(p);
    if (parts <= 1) {
      for (int d = lane; d < kHd; d += 32) {
        const float v = combined_value<kWarps, kHd>(weights, sm_acc[p], d);
        out[op * kHd + d] = denom > 0.0f ? v / denom : 0.0f;
      }
      continue;
    }
    float* mine = split.partial + (op * split.splits + blockIdx.z) * (kHd + 2);
    for (int d = lane; d < kHd; d += 32) mine[2 + d] = combined_value<kWarps, kHd>(weights, sm_acc[p], d);
    if (lane == 0) {
      mine[0] = m_all;
      mine[1] = denom;
    }
  }
  if (parts <= 1) return;
  // Every split block of this tile has the same pairs: the first pair's counter counts them.
  int32_t* counter = split.counters + out_pair(0);
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == parts - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int p = warp; p < n_pairs; p += kWarps) {
    const int64_t op = out_pair(p);
    merge_split_partials(split.partial + op * split.splits * (kHd + 2), parts, kHd, out + op * kHd, lane, 32);
  }
  if (threadIdx.x == 0) *counter = 0;
}

std::atomic<bool> g_shared_kv_attention{true};
std::atomic<int> g_pairs{0}, g_min_blocks{0};

template <int kHd, int kPairs, int kMinBlocks>
void launch(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, const PagedKvLayer& kv, const int32_t* step,
            const uint8_t* mask, float scale, float* out, cudaStream_t stream, const AttentionSplit& split,
            const uint8_t* block_visible) {
  const int64_t pairs = T * (n_heads / kv.n_kv_heads);
  const dim3 grid(static_cast<unsigned>(kv.n_kv_heads), static_cast<unsigned>((pairs + kPairs - 1) / kPairs),
                  static_cast<unsigned>(split.splits > 1 ? split.splits : 1));
  launch_pdl(shared_kv_attention_kernel<kHd, kPairs, kMinBlocks>, grid, dim3(kWarps * 32), 0, stream, q, ld_q, T,
             n_heads, kv, mask, scale, out, step, split, block_visible);
}

}  // namespace

void set_shared_kv_attention(bool on) { g_shared_kv_attention.store(on, std::memory_order_relaxed); }
bool shared_kv_attention() { return g_shared_kv_attention.load(std::memory_order_relaxed); }
void set_shared_kv_attention_pairs(int pairs) { g_pairs.store(pairs, std::memory_order_relaxed); }
void set_shared_kv_attention_min_blocks(int blocks) { g_min_blocks.store(blocks, std::memory_order_relaxed); }

bool shared_kv_attention_at(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, const PagedKvLayer& kv,
                            const int32_t* step, const uint8_t* mask, float scale, float* out, cudaStream_t stream,
                            const AttentionSplit& split, const uint8_t* block_visible) {
  if (T < 2 || kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0) return false;
  const int pairs = g_pairs.load(std::memory_order_relaxed), min_blocks = g_min_blocks.load(std::memory_order_relaxed);
  auto* run = kv.head_dim == 64    ? (pairs == 8        ? launch<64, 8, 0>
                                      : min_blocks == 1 ? launch<64, 4, 0>
                                                        : launch<64, 4, 4>)
              : kv.head_dim == 128 ? (pairs == 2        ? launch<128, 2, 0>
                                      : min_blocks == 3 ? launch<128, 4, 3>
                                                        : launch<128, 4, 0>)
                                   : nullptr;
  if (!run) return false;
  run(q, ld_q, T, n_heads, kv, step, mask, scale, out, stream, split, block_visible);
  return true;
}

}  // namespace specula::cuda
