#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/cuda/attention_combine.cuh"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/paged_kv.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/shared_kv_attention.h"
#include "kernels/cuda/warp_dot.cuh"

namespace specula::cuda {
namespace {

using paged_kv::bf;
using paged_kv::slot_row;
using paged_kv::to_bf;
using paged_kv::update_min_max;

__global__ void embed_kernel(const bf16_bits* __restrict__ table, const int32_t* __restrict__ tokens, int64_t dim,
                             float* __restrict__ x) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const bf16_bits* row = table + static_cast<int64_t>(tokens[t]) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) x[t * dim + i] = bf(row[i]);
}

// One block (kNormThreads) per row; thread i takes elements i + kNormThreads·j. kPer > 0: all
// of its kPer elements loaded at once, the gammas (weights) before the PDL wait; kPer 0: dims past
// kNormThreads·kNormMaxPer, a loop. The arithmetic is the first kernel's, pinned (a thread's x² in
// j order by fma, warp_sum, the warps' sums, x · inv · gamma), so the bits did not change when it
// got programmatic launch and its loads in flight: a plain launch with a loop of dependent
// scalar loads that walked the row twice took 5.9 us a call, once a layer in an MoE decode step
// (bench/results/moe_profile_olmoe_s16_h200_2026-12-01.json).
constexpr int kNormThreads = 256;
constexpr int kNormMaxPer = 32;  // dims up to 8192
template <int kPer>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(const float* x, int64_t ld_x, const float* __restrict__ w, int64_t dim, float eps,
                   float* __restrict__ out) {
  __shared__ float partial[kNormThreads / 32];
  constexpr int kHeld = kPer > 0 ? kPer : 1;
  float g[kHeld], v[kHeld];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * kNormThreads;
    g[j] = i < dim ? __ldg(w + i) : 0.0f;
  }
  pdl_trigger();
  pdl_wait();
  // x is not __restrict__: the kernel before writes it (kernels/cuda/pdl.cuh).
  const float* row = x + blockIdx.x * ld_x;
  float sum = 0.0f;
  if constexpr (kPer > 0) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = threadIdx.x + int64_t{j} * kNormThreads;
      v[j] = i < dim ? row[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (threadIdx.x + int64_t{j} * kNormThreads < dim) sum = __fmaf_rn(v[j], v[j], sum);
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) sum = __fmaf_rn(row[i], row[i], sum);
  }
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kNormThreads / 32 ? partial[threadIdx.x] : 0.0f;
    s = warp_sum(s);
    if (threadIdx.x == 0) partial[0] = s;
  }
  __syncthreads();
  const float inv = rsqrtf(__fadd_rn(__fdiv_rn(partial[0], static_cast<float>(dim)), eps));
  float* o = out + blockIdx.x * dim;
  if constexpr (kPer > 0) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = threadIdx.x + int64_t{j} * kNormThreads;
      if (i < dim) o[i] = __fmul_rn(__fmul_rn(v[j], inv), g[j]);
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) o[i] = __fmul_rn(__fmul_rn(row[i], inv), __ldg(w + i));
  }
}

__global__ void swiglu_kernel(const float* __restrict__ gu, int64_t ffn, float* __restrict__ out) {
  const int64_t t = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= ffn) return;
  const float g = gu[t * 2 * ffn + i], u = gu[t * 2 * ffn + ffn + i];
  out[t * ffn + i] = g / (1.0f + expf(-g)) * u;
}

// The split-halves row ops (model_ops.h). Four values a step (float4 in, 4 bf16 out per half).
__device__ __forceinline__ void store_split4(float4 v, bf16_bits* hi, bf16_bits* lo) {
  const float in[4] = {v.x, v.y, v.z, v.w};
  bf16_bits h[4], l[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat16 hb = __float2bfloat16_rn(in[j]);
    h[j] = __bfloat16_as_ushort(hb);
    l[j] = to_bf(in[j] - __bfloat162float(hb));
  }
  *reinterpret_cast<uint2*>(hi) = make_uint2(h[0] | uint32_t{h[1]} << 16, h[2] | uint32_t{h[3]} << 16);
  *reinterpret_cast<uint2*>(lo) = make_uint2(l[0] | uint32_t{l[1]} << 16, l[2] | uint32_t{l[3]} << 16);
}
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

constexpr int kSplitRowThreads = 256;

// One block per row t (grid T): with y2, x[t] += y2[t] + y2[T + t] first; then the halves of
// rmsnorm(x[t]) into hi and hi + T·dim. Each thread holds its kVec float4s of the row in
// registers, all loaded before any is used: the unfused rmsnorm_kernel walked the row twice, 16
// dependent scalar loads a thread each time (9.6 us for 61 rows of 4096 on the H100,
// bench/results/cuda_verify_8b_64k_profile_s9_db2b338_h100_2026-11-24.json).
template <int kVec>
__global__ void __launch_bounds__(kSplitRowThreads)
    norm_split_kernel(const float* __restrict__ y2, float* __restrict__ x, int64_t ld_x, const float* __restrict__ w,
                      int64_t dim, float eps, bf16_bits* __restrict__ hi) {
  const int64_t t = blockIdx.x, T = gridDim.x, n4 = dim / 4;
  // The norm weights (never written: loaded before the wait) with the row's loads, not after
  // the reduction (one L2 round trip less on the critical path).
  float4 g[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int64_t i = threadIdx.x + j * kSplitRowThreads;
    if (i < n4) g[j] = __ldg(reinterpret_cast<const float4*>(w) + i);
  }
  pdl_trigger();
  pdl_wait();
  float4* row = reinterpret_cast<float4*>(x + t * ld_x);
  float4 v[kVec];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int64_t i = threadIdx.x + j * kSplitRowThreads;
    if (i < n4) {
      v[j] = row[i];
      if (y2) {
        const float4 a = reinterpret_cast<const float4*>(y2 + t * dim)[i];
        const float4 b = reinterpret_cast<const float4*>(y2 + (T + t) * dim)[i];
        v[j] = add4(v[j], add4(a, b));  // x + (hi product + lo product), as add_split_halves
        row[i] = v[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if (threadIdx.x + j * kSplitRowThreads < n4) {
      sum += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    }
  }
  __shared__ float partial[kSplitRowThreads / 32];
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kSplitRowThreads / 32; ++k) total += partial[k];
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  bf16_bits* lo = hi + T * dim;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int64_t i = threadIdx.x + j * kSplitRowThreads;
    if (i < n4) {
      const float4 o =
          make_float4(v[j].x * inv * g[j].x, v[j].y * inv * g[j].y, v[j].z * inv * g[j].z, v[j].w * inv * g[j].w);
      store_split4(o, hi + t * dim + 4 * i, lo + t * dim + 4 * i);
    }
  }
}

// grid (ceil(ffn / 4 / 256), T): four outputs a thread.
__global__ void swiglu_split_kernel(const float* __restrict__ y2, int64_t ffn, bf16_bits* __restrict__ hi) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.y, T = gridDim.y;
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 4;
  if (i >= ffn) return;
  const float* top = y2 + t * 2 * ffn;
  const float* bottom = y2 + (T + t) * 2 * ffn;
  const float4 g = add4(*reinterpret_cast<const float4*>(top + i), *reinterpret_cast<const float4*>(bottom + i));
  const float4 u =
      add4(*reinterpret_cast<const float4*>(top + ffn + i), *reinterpret_cast<const float4*>(bottom + ffn + i));
  const float4 o = make_float4(g.x / (1.0f + expf(-g.x)) * u.x, g.y / (1.0f + expf(-g.y)) * u.y,
                               g.z / (1.0f + expf(-g.z)) * u.z, g.w / (1.0f + expf(-g.w)) * u.w);
  store_split4(o, hi + t * ffn + i, hi + T * ffn + t * ffn + i);
}

// grid.x = token; threads over (head, pair).
__global__ void rope_kernel(float* __restrict__ qkv, int64_t ld, int64_t heads, int64_t head_dim,
                            const int32_t* __restrict__ positions, float theta, bool adjacent) {
  const int64_t t = blockIdx.x, half = head_dim / 2;
  float* row = qkv + t * ld;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t k = threadIdx.x; k < heads * half; k += blockDim.x) {
    const int64_t h = k / half, i = k % half;
    // Same float inv_freq and angle as kernels/cpu/rope.cpp; cos/sin of the float angle in double.
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    const float angle = pos * inv_freq;
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle)));
    float* v = row + h * head_dim;
    const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x1 * c + x0 * s;
  }
}

// Indices into a device step array (model_ops.h: the *_at launches).
constexpr int kStepCommitted = 0, kStepFirstNew = 1;

// grid (T, n_kv_heads), threads over head_dim.
__global__ void kv_append_kernel(PagedKvLayer kv, const float* __restrict__ qkv, int64_t ld, int64_t k_col,
                                 int64_t v_col, const int32_t* __restrict__ step) {
  const int64_t first_row = step[kStepFirstNew];
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int64_t base = slot_row(kv, first_row + t, h);
  const float* row = qkv + t * ld;
  for (int64_t d = threadIdx.x; d < kv.head_dim; d += blockDim.x) {
    kv.keys[base + d] = to_bf(row[k_col + h * kv.head_dim + d]);
    kv.values[base + d] = to_bf(row[v_col + h * kv.head_dim + d]);
  }
}

// grid (blocks, n_kv_heads), threads over head_dim. With `step`, the blocks are those of rows
// [first_new, first_new + new_rows) and rows_present = first_new + new_rows.
__global__ void kv_min_max_kernel(PagedKvLayer kv, int64_t block_begin, int64_t rows_present,
                                  const int32_t* __restrict__ step, int64_t new_rows, KvLayerStrides strides) {
  strides.apply(kv, blockIdx.z);
  if (step) {
    const int64_t first_new = step[kStepFirstNew];
    block_begin = first_new / kv.block_size;
    rows_present = first_new + new_rows;
    if (block_begin + static_cast<int64_t>(blockIdx.x) > (rows_present - 1) / kv.block_size) return;
  }
  const int64_t block = block_begin + blockIdx.x, h = blockIdx.y;
  const int64_t first = block * kv.block_size;
  const int64_t last = min(first + kv.block_size, rows_present);
  if (first >= last) return;
  const int64_t phys = kv.block_table[block];
  const int64_t meta = (phys * kv.n_kv_heads + h) * kv.head_dim;
  // The block's rows sit one after another from its row 0 (slot_row): read with the table looked
  // up once and 16 loads in flight, where a table load then a key load for each row in turn took
  // 7.5 us a layer for 61 new rows (bench/results/cuda_verify_8b_64k_profile_s9_h100_2026-11-24.json).
  const bf16_bits* rows = kv.keys + (phys * kv.n_kv_heads + h) * kv.block_size * kv.head_dim;
  const int64_t n = last - first;
  for (int64_t d = threadIdx.x; d < kv.head_dim; d += blockDim.x) {
    float lo = INFINITY, hi = -INFINITY;
#pragma unroll 16
    for (int64_t r = 0; r < n; ++r) {
      const float k = bf(rows[r * kv.head_dim + d]);
      lo = fminf(lo, k);
      hi = fmaxf(hi, k);
    }
    kv.key_min[meta + d] = to_bf(lo);  // exact: lo and hi are keys (PagedKvLayer says why)
    kv.key_max[meta + d] = to_bf(hi);
  }
}

// One decode token (T = 1): RoPE of every Q and K head, the K/V append and the key min/max of
// the touched block, in one launch. grid (n_heads + n_kv_heads), threads over the head_dim/2
// rotation pairs. The block's min/max covers exactly rows [block start, first_new) when a
// forward starts (the *_at launches and the commit's recompute keep it so), so the new row
// updates it incrementally; exact, since min and max of bf16 values round nothing.
// kMinMax false (several new rows, grid (heads, T), row stride ld): RoPE and the append only;
// the block min/max then comes from kv_update_min_max_at, as rows of one block may race here.
// kHalves (several rows): qkv row t is first summed from the QKV GEMM's halves, y2 row t and
// row T + t (T = gridDim.y), and written whole: Q rotated as above, K and V unrotated (what
// add_split_halves then this kernel left in qkv).
// tree_q.q (several rows): blockIdx.y is tree row j, which takes qkv row t = order[j], and its
// query heads also go to tree_q.q row j as bf16 (TreeQueryRows, model_ops.h).
template <bool kMinMax, bool kHalves>
__global__ void rope_append_kernel(float* __restrict__ qkv, int64_t ld, int64_t n_heads, int64_t head_dim,
                                   const int32_t* __restrict__ positions, float theta, bool adjacent, PagedKvLayer kv,
                                   int64_t v_col, const int32_t* __restrict__ step, const float* __restrict__ y2,
                                   TreeQueryRows tree_q) {
  pdl_trigger();
  pdl_wait();  // order, like qkv, may come from the launches before
  const int64_t h = blockIdx.x, j = blockIdx.y, half = head_dim / 2, i = threadIdx.x;
  const int64_t t = tree_q.q ? int64_t{tree_q.order[j]} : j;
  if (i >= half) return;
  const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
  if constexpr (kHalves) {
    const float* lo_half = y2 + gridDim.y * ld;  // y2 row T + t
    const int64_t head = t * ld + h * head_dim;
    float* dst = qkv + head;
    dst[a] = y2[head + a] + lo_half[head + a];
    dst[b] = y2[head + b] + lo_half[head + b];
    if (h >= n_heads) {  // a key head: its value head too
      const int64_t vh = t * ld + v_col + (h - n_heads) * head_dim;
      qkv[vh + a] = y2[vh + a] + lo_half[vh + a];
      qkv[vh + b] = y2[vh + b] + lo_half[vh + b];
    }
  }
  qkv += t * ld;
  float* v = qkv + h * head_dim;
  const float pos = static_cast<float>(positions[t]);
  const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  const float angle = pos * inv_freq;
  const float c = static_cast<float>(cos(static_cast<double>(angle)));
  const float s = static_cast<float>(sin(static_cast<double>(angle)));
  const float x0 = v[a], x1 = v[b];
  const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
  if (h < n_heads) {  // a query head: rotated in place for the attention
    v[a] = r0;
    v[b] = r1;
    if (tree_q.q) {
      bf16_bits* q = tree_q.q + (j * n_heads + h) * head_dim;
      q[a] = to_bf(r0);
      q[b] = to_bf(r1);
    }
    return;
  }
  const int64_t kh = h - n_heads;  // a key head: into the cache, with its value
  const int64_t row = step[kStepFirstNew] + t;
  const int64_t base = slot_row(kv, row, kh);
  const bf16_bits k0 = to_bf(r0), k1 = to_bf(r1);
  kv.keys[base + a] = k0;
  kv.keys[base + b] = k1;
  const float* vrow = qkv + v_col + kh * head_dim;
  kv.values[base + a] = to_bf(vrow[a]);
  kv.values[base + b] = to_bf(vrow[b]);
  if constexpr (!kMinMax) return;
  const int64_t meta = (static_cast<int64_t>(kv.block_table[row / kv.block_size]) * kv.n_kv_heads + kh) * head_dim;
  const bool first_in_block = row % kv.block_size == 0;
  update_min_max(kv, meta + a, k0, first_in_block);
  update_min_max(kv, meta + b, k1, first_in_block);
}

// grid (n, n_kv_heads); gather (to_scratch) or scatter.
__global__ void kv_move_kernel(PagedKvLayer kv, const int32_t* __restrict__ rows, bf16_bits* __restrict__ scratch,
                               bool to_scratch, KvLayerStrides strides, int64_t n) {
  strides.apply(kv, blockIdx.z);
  scratch += blockIdx.z * n * kv.n_kv_heads * 2 * kv.head_dim;
  const int64_t i = blockIdx.x, h = blockIdx.y;
  const int64_t base = slot_row(kv, rows[i], h);
  bf16_bits* s = scratch + (i * kv.n_kv_heads + h) * 2 * kv.head_dim;
  for (int64_t d = threadIdx.x; d < kv.head_dim; d += blockDim.x) {
    if (to_scratch) {
      s[d] = kv.keys[base + d];
      s[kv.head_dim + d] = kv.values[base + d];
    } else {
      kv.keys[base + d] = s[d];
      kv.values[base + d] = s[kv.head_dim + d];
    }
  }
}

constexpr int kAttnWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim ≤ 256

// grid (n_heads, T), kAttnWarps warps. Each warp takes 32 visible rows at a time, one per lane:
// the lane computes its row's score against q (staged in shared memory), the warp does one
// online-softmax update for the 32, then accumulates their values with lanes over head_dim.
// A row-at-a-time warp (the first version) spent ~20 µs on SmolLM2's short contexts waiting on
// the reduction and exp of every row (bench_cuda_decode's CUPTI breakdown). The warps' partial
// states merge at the end. head_dim a multiple of 8, ≤ 256.
// kHd > 0 (64 or 128, the exact head_dim): values are read 16 bytes per lane, a row by
// kHd / 8 lanes, 32 / (kHd / 8) rows per load instruction, all of a chunk's loads in flight at
// once (2-byte loads, one row per instruction, left the warps waiting on memory: ncu showed
// 69% of the stalls on L1TEX scoreboards). kHd = 0: any head_dim, one value per lane.
template <int kPerLane, int kHd>  // head_dim ≤ 32 · kPerLane
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const float* __restrict__ q, int64_t ld_q, int64_t T, int64_t n_heads, PagedKvLayer kv,
                     const uint8_t* __restrict__ mask, float scale, float* __restrict__ out,
                     const int32_t* __restrict__ step, AttentionSplit split,
                     const uint8_t* __restrict__ block_visible) {
  pdl_trigger();
  pdl_wait();
  const int64_t committed = step[kStepCommitted], first_new = step[kStepFirstNew];
  const int64_t h = blockIdx.x, t = blockIdx.y, hd = kv.head_dim;
  const int64_t kvh = h / (n_heads / kv.n_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ float qs[kPerLane * 32];
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = q[t * ld_q + h * hd + d] * scale;
  __syncthreads();
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  // This block's rows: all of them, or its split's share [z·R, (z+1)·R).
  const int64_t begin = split.splits > 1 ? blockIdx.z * split.rows_per_split : 0;
  const int64_t total = split.splits > 1 ? min(committed + T, begin + split.rows_per_split) : committed + T;
  for (int64_t first = begin + static_cast<int64_t>(warp) * 32; first < total; first += kAttnWarps * 32) {
    const int64_t idx = first + lane;
    float s = -INFINITY;
    long long slot = 0;
    if (idx < total) {
      int64_t row = idx;
      bool visible = true;
      if (idx >= committed) {
        const int64_t j = idx - committed;
        visible = mask ? mask[t * T + j] != 0 : j <= t;
        row = first_new + j;
      } else if (block_visible) {
        const int64_t committed_blocks = (committed + kv.block_size - 1) / kv.block_size;
        visible = block_visible[(t * kv.n_kv_heads + kvh) * committed_blocks + idx / kv.block_size] != 0;
      }
      if (visible) {
        slot = slot_row(kv, row, kvh);
        const uint4* k = reinterpret_cast<const uint4*>(kv.keys + slot);
        float dot = 0.0f;
#pragma unroll 4
        for (int64_t c = 0; c < hd / 8; ++c) {
          const uint4 w = k[c];
          dot += key_dot8(qs + c * 8, w);
        }
        s = dot;
      }
    }
    const float chunk_max = warp_max(s);
    if (chunk_max == -INFINITY) continue;  // nothing visible in these 32 (the same for every lane)
    const float m_new = fmaxf(m, chunk_max);
    const float corr = expf(m - m_new);  // 0 while m is still -inf
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    l = __fmaf_rn(l, corr, warp_sum(p));  // written out: every kernel must fuse it alike
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
    if constexpr (kHd > 0) {
      // Lane = (row group g, 8-dim slice): rows g, g + G, ... of the chunk, dims slice·8..+8.
      constexpr int kLanesPerRow = kHd / 8, kGroups = 32 / kLanesPerRow;
      const int g = lane / kLanesPerRow, slice = lane % kLanesPerRow;
      float pr[32 / kGroups];
      uint4 v[32 / kGroups];
#pragma unroll
      for (int i = 0; i < 32 / kGroups; ++i) {
        const int r = i * kGroups + g;
        pr[i] = __shfl_sync(0xffffffffu, p, r);
        const long long base = __shfl_sync(0xffffffffu, slot, r);
        v[i] = pr[i] != 0.0f ? *reinterpret_cast<const uint4*>(kv.values + base + slice * 8) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < 32 / kGroups; ++i) {
        add_weighted_value8(acc, pr[i], v[i]);
      }
    } else {
      // Values 8 rows at a time: the 8 loads are issued before any of them is used.
      for (int r0 = 0; r0 < 32; r0 += 8) {
        float pr[8], v[8][kPerLane];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          pr[j] = __shfl_sync(0xffffffffu, p, r0 + j);
          const long long base = __shfl_sync(0xffffffffu, slot, r0 + j);
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) {
            const int64_t d = i * 32 + lane;
            v[j][i] = pr[j] != 0.0f && d < hd ? bf(kv.values[base + d]) : 0.0f;  // masked rows read nothing
          }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) acc[i] += pr[j] * v[j][i];
        }
      }
    }
    m = m_new;
  }
  __shared__ float sm_m[kAttnWarps], sm_l[kAttnWarps];
  __shared__ float sm_acc[kAttnWarps][kPerLane * 32];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
  if constexpr (kHd > 0) {
    // Sum the row groups' slices; group 0's lanes then hold dims slice·8..+8.
    constexpr int kLanesPerRow = kHd / 8;
#pragma unroll
    for (int o = kLanesPerRow; o < 32; o <<= 1) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    }
    if (lane < kLanesPerRow) {
#pragma unroll
      for (int i = 0; i < 8; ++i) sm_acc[warp][lane * 8 + i] = acc[i];
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) sm_acc[warp][i * 32 + lane] = acc[i];
  }
  __syncthreads();
  const int64_t pair = t * n_heads + h;
  combine_attention_row<kAttnWarps, kPerLane * 32>(sm_m, sm_l, sm_acc, hd, out + pair * hd, split, pair, blockIdx.z,
                                                   split.splits);
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(bf16_bits* out, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed ^ mix64(static_cast<uint64_t>(i)));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = to_bf((2.0f * u - 1.0f) * scale);
  }
}

__global__ void fill_f32_kernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

namespace {
std::atomic<bool> g_programmatic_launch{true};
}  // namespace

bool programmatic_dependent_launch() { return g_programmatic_launch.load(std::memory_order_relaxed); }
void set_programmatic_dependent_launch(bool on) { g_programmatic_launch.store(on, std::memory_order_relaxed); }

void embed_rows(const bf16_bits* table, const int32_t* tokens, int64_t T, int64_t dim, float* x, cudaStream_t stream) {
  launch_pdl(embed_kernel, dim3(static_cast<unsigned>(T)), dim3(256), 0, stream, table, tokens, dim, x);
}

void rmsnorm_rows(const float* x, int64_t ld_x, const float* weight, int64_t T, int64_t dim, float eps, float* out,
                  cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(T)), block(kNormThreads);
  const int64_t per = (dim + kNormThreads - 1) / kNormThreads;
  if (per > kNormMaxPer) {
    launch_pdl(rmsnorm_kernel<0>, grid, block, 0, stream, x, ld_x, weight, dim, eps, out);
    return;
  }
  warp_dot::with_rows<kNormMaxPer>(per, [&](auto held) {
    launch_pdl(rmsnorm_kernel<decltype(held)::value>, grid, block, 0, stream, x, ld_x, weight, dim, eps, out);
  });
}

void swiglu_rows(const float* gu, int64_t T, int64_t ffn, float* out, cudaStream_t stream) {
  swiglu_kernel<<<dim3(static_cast<unsigned>((ffn + 255) / 256), static_cast<unsigned>(T)), 256, 0, stream>>>(gu, ffn,
                                                                                                              out);
}

namespace {
// The norm_split_kernel for rows of dim (split_row_ops_fit): the fewest float4s a thread.
void launch_norm_split(const float* y2, float* x, int64_t ld_x, const float* w, int64_t T, int64_t dim, float eps,
                       bf16_bits* hi, cudaStream_t stream) {
  if (T <= 0) return;
  const dim3 grid(static_cast<unsigned>(T)), block(kSplitRowThreads);
  const int64_t per_thread = (dim / 4 + kSplitRowThreads - 1) / kSplitRowThreads;
  if (per_thread <= 1) {
    launch_pdl(norm_split_kernel<1>, grid, block, 0, stream, y2, x, ld_x, w, dim, eps, hi);
  } else if (per_thread <= 2) {
    launch_pdl(norm_split_kernel<2>, grid, block, 0, stream, y2, x, ld_x, w, dim, eps, hi);
  } else if (per_thread <= 4) {
    launch_pdl(norm_split_kernel<4>, grid, block, 0, stream, y2, x, ld_x, w, dim, eps, hi);
  } else {
    launch_pdl(norm_split_kernel<kMaxSplitRowDim / 4 / kSplitRowThreads>, grid, block, 0, stream, y2, x, ld_x, w, dim,
               eps, hi);
  }
}
}  // namespace

void rmsnorm_split_rows(const float* x, int64_t ld_x, const float* weight, int64_t T, int64_t dim, float eps,
                        bf16_bits* hi, cudaStream_t stream) {
  // x is only read without y2 (the kernel writes it back only after adding the halves).
  launch_norm_split(nullptr, const_cast<float*>(x), ld_x, weight, T, dim, eps, hi, stream);
}

void add_halves_rmsnorm_split_rows(const float* y2, int64_t T, int64_t dim, float* x, const float* weight, float eps,
                                   bf16_bits* hi, cudaStream_t stream) {
  launch_norm_split(y2, x, dim, weight, T, dim, eps, hi, stream);
}

void swiglu_halves_split_rows(const float* y2, int64_t T, int64_t ffn, bf16_bits* hi, cudaStream_t stream) {
  if (T <= 0 || ffn <= 0) return;
  const dim3 grid(static_cast<unsigned>((ffn / 4 + 255) / 256), static_cast<unsigned>(T));
  launch_pdl(swiglu_split_kernel, grid, dim3(256), 0, stream, y2, ffn, hi);
}

void rope_in_place(float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   const int32_t* positions, float theta, bool adjacent, cudaStream_t stream) {
  rope_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(qkv, ld, n_heads + n_kv_heads, head_dim, positions, theta,
                                                            adjacent);
}

void kv_append_at(const PagedKvLayer& kv, const float* qkv, int64_t ld, int64_t k_col, int64_t v_col, int64_t T,
                  const int32_t* step, cudaStream_t stream) {
  kv_append_kernel<<<dim3(static_cast<unsigned>(T), static_cast<unsigned>(kv.n_kv_heads)), 128, 0, stream>>>(
      kv, qkv, ld, k_col, v_col, step);
}

void kv_update_min_max(const PagedKvLayer& kv, int64_t block_begin, int64_t block_end, int64_t rows_present,
                       cudaStream_t stream) {
  if (block_end <= block_begin) return;
  kv_update_min_max_layers(kv, KvLayerStrides{}, block_begin, block_end, rows_present, stream);
}

void kv_update_min_max_layers(const PagedKvLayer& first, const KvLayerStrides& strides, int64_t block_begin,
                              int64_t block_end, int64_t rows_present, cudaStream_t stream) {
  if (block_end <= block_begin) return;
  const dim3 grid(static_cast<unsigned>(block_end - block_begin), static_cast<unsigned>(first.n_kv_heads),
                  static_cast<unsigned>(strides.layers));
  kv_min_max_kernel<<<grid, 128, 0, stream>>>(first, block_begin, rows_present, nullptr, 0, strides);
}

void kv_update_min_max_at(const PagedKvLayer& kv, int64_t T, const int32_t* step, cudaStream_t stream) {
  // T new rows touch at most ceil(T / B) + 1 blocks; the kernel drops the ones past the last row.
  const auto blocks = static_cast<unsigned>((T + kv.block_size - 1) / kv.block_size + 1);
  kv_min_max_kernel<<<dim3(blocks, static_cast<unsigned>(kv.n_kv_heads)), 128, 0, stream>>>(kv, 0, 0, step, T,
                                                                                            KvLayerStrides{});
}

void rope_append_decode_at(float* qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, const int32_t* positions,
                           float theta, bool adjacent, const PagedKvLayer& kv, int64_t v_col, const int32_t* step,
                           cudaStream_t stream) {
  const auto threads = static_cast<unsigned>((head_dim / 2 + 31) / 32 * 32);
  launch_pdl(rope_append_kernel<true, false>, dim3(static_cast<unsigned>(n_heads + n_kv_heads)), dim3(threads), 0,
             stream, qkv, int64_t{0}, n_heads, head_dim, positions, theta, adjacent, kv, v_col, step,
             static_cast<const float*>(nullptr), TreeQueryRows{});
}

void rope_append_at(float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    const int32_t* positions, float theta, bool adjacent, const PagedKvLayer& kv, int64_t v_col,
                    const int32_t* step, bool update_min_max, cudaStream_t stream, TreeQueryRows tree_q) {
  const auto threads = static_cast<unsigned>((head_dim / 2 + 31) / 32 * 32);
  launch_pdl(rope_append_kernel<false, false>,
             dim3(static_cast<unsigned>(n_heads + n_kv_heads), static_cast<unsigned>(T)), dim3(threads), 0, stream, qkv,
             ld, n_heads, head_dim, positions, theta, adjacent, kv, v_col, step, static_cast<const float*>(nullptr),
             tree_q);
  if (update_min_max) kv_update_min_max_at(kv, T, step, stream);
}

void rope_append_halves_at(const float* y2, float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, const int32_t* positions, float theta, bool adjacent,
                           const PagedKvLayer& kv, int64_t v_col, const int32_t* step, bool update_min_max,
                           cudaStream_t stream, TreeQueryRows tree_q) {
  const auto threads = static_cast<unsigned>((head_dim / 2 + 31) / 32 * 32);
  launch_pdl(rope_append_kernel<false, true>,
             dim3(static_cast<unsigned>(n_heads + n_kv_heads), static_cast<unsigned>(T)), dim3(threads), 0, stream, qkv,
             ld, n_heads, head_dim, positions, theta, adjacent, kv, v_col, step, y2, tree_q);
  if (update_min_max) kv_update_min_max_at(kv, T, step, stream);
}

void kv_move_rows(const PagedKvLayer& kv, const int32_t* from, const int32_t* to, int64_t n, bf16_bits* scratch,
                  cudaStream_t stream) {
  kv_move_rows_layers(kv, KvLayerStrides{}, from, to, n, scratch, stream);
}

void kv_move_rows_layers(const PagedKvLayer& first, const KvLayerStrides& strides, const int32_t* from,
                         const int32_t* to, int64_t n, bf16_bits* scratch, cudaStream_t stream) {
  if (n <= 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(first.n_kv_heads),
                  static_cast<unsigned>(strides.layers));
  kv_move_kernel<<<grid, 128, 0, stream>>>(first, from, scratch, true, strides, n);
  kv_move_kernel<<<grid, 128, 0, stream>>>(first, to, scratch, false, strides, n);
}

void attention_at(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, const PagedKvLayer& kv, const int32_t* step,
                  const uint8_t* mask, float scale, float* out, cudaStream_t stream, const AttentionSplit& split,
                  const uint8_t* block_visible) {
  // A prefill's many causal rows go to the tensor-core kernel (prefill_attention.h says why).
  if (!mask && !block_visible && T >= kPrefillMinRows &&
      prefill_attention(q, ld_q, T, n_heads, kv, step, scale, out, stream))
    return;
  // Several rows (a verify) over a split cache (more than 256 rows of capacity) share each K/V
  // load across their pairs, with the same bits as below. Without a split (short contexts) the
  // one-pair blocks are more blocks to spread: there the shared kernel was 4% slower at 17 rows
  // (bench/results/shared_kv_attention_s19_h200_2026-12-02.json).
  if (T >= 2 && split.splits > 1 && shared_kv_attention() &&
      shared_kv_attention_at(q, ld_q, T, n_heads, kv, step, mask, scale, out, stream, split, block_visible))
    return;
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(T),
                  static_cast<unsigned>(split.splits > 1 ? split.splits : 1));
  const dim3 block(kAttnWarps * 32);
  if (kv.head_dim == 64) {
    launch_pdl(attention_kernel<8, 64>, grid, block, 0, stream, q, ld_q, T, n_heads, kv, mask, scale, out, step, split,
               block_visible);
  } else if (kv.head_dim == 128) {
    launch_pdl(attention_kernel<8, 128>, grid, block, 0, stream, q, ld_q, T, n_heads, kv, mask, scale, out, step, split,
               block_visible);
  } else if (kv.head_dim <= 64) {
    launch_pdl(attention_kernel<2, 0>, grid, block, 0, stream, q, ld_q, T, n_heads, kv, mask, scale, out, step, split,
               block_visible);
  } else if (kv.head_dim <= 128) {
    launch_pdl(attention_kernel<4, 0>, grid, block, 0, stream, q, ld_q, T, n_heads, kv, mask, scale, out, step, split,
               block_visible);
  } else {
    launch_pdl(attention_kernel<kMaxPerLane, 0>, grid, block, 0, stream, q, ld_q, T, n_heads, kv, mask, scale, out,
               step, split, block_visible);
  }
}

AttentionSplit attention_split_for(int64_t max_rows, int64_t head_dim) {
  AttentionSplit split;
  // A block reads at least 256 rows (2 chunks a warp); at most 64 splits (the workspace grows
  // with them).
  constexpr int64_t kRowsPerBlock = kAttnWarps * 32 * 2;
  const int64_t splits = std::min<int64_t>(64, (max_rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (splits <= 1) return split;
  split.splits = static_cast<int>(splits);
  split.rows_per_split = ((max_rows + splits - 1) / splits + 31) / 32 * 32;
  split.partial_floats_per_pair = splits * (head_dim + 2);
  return split;
}

void fill_uniform_bf16(bf16_bits* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  fill_uniform_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, n, seed, scale);
}

void fill_f32(float* out, int64_t n, float value, cudaStream_t stream) {
  fill_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, n, value);
}

}  // namespace specula::cuda
