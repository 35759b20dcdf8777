#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_combine.cuh"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/paged_kv.cuh"
#include "kernels/cuda/pdl.cuh"

namespace specula::cuda {
namespace {

using paged_kv::bf;
using paged_kv::slot_row;
using paged_kv::to_bf;
using paged_kv::update_min_max;

// The same block shape, chunking and arithmetic order as model_ops.cu's attention_kernel (for
// kHd 64 and 128), so the two paths give the same bits; what differs is where the new row
// comes from and what happens before the wait.
constexpr int kWarps = 4;

// One chunk of 32 keys (a lane's score s, -inf where it sees none, and its value row vrow) into a
// warp's running max m, sum l and weighted values acc. Lane = (row group g, 8-dim slice): rows g,
// g + G, ... of the chunk, dims slice·8..+8. Both kernels below take it, in attention_kernel's
// order for kHd 64 and 128 (the bits must match: a verify row equals a decode step).
template <int kHd>
__device__ __forceinline__ void attend_chunk(float s, const bf16_bits* vrow, int lane, float& m, float& l,
                                             float (&acc)[8]) {
  const float chunk_max = warp_max(s);
  if (chunk_max == -INFINITY) return;
  const float m_new = fmaxf(m, chunk_max);
  const float corr = expf(m - m_new);
  const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
  l = __fmaf_rn(l, corr, warp_sum(p));  // written out: every kernel must fuse it alike
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] *= corr;
  constexpr int kLanesPerRow = kHd / 8, kGroups = 32 / kLanesPerRow;
  const int g = lane / kLanesPerRow, slice = lane % kLanesPerRow;
  float pr[32 / kGroups];
  uint4 v[32 / kGroups];
  const auto vbits = reinterpret_cast<unsigned long long>(vrow);
#pragma unroll
  for (int i = 0; i < 32 / kGroups; ++i) {
    const int r = i * kGroups + g;
    pr[i] = __shfl_sync(0xffffffffu, p, r);
    const auto row = reinterpret_cast<const bf16_bits*>(__shfl_sync(0xffffffffu, vbits, r));
    v[i] = pr[i] != 0.0f ? *reinterpret_cast<const uint4*>(row + slice * 8) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < 32 / kGroups; ++i) {
    add_weighted_value8(acc, pr[i], v[i]);
  }
  m = m_new;
}

// A warp's (m, l) and its weighted values, the row groups' slices summed (group 0's lanes then
// hold dims slice·8..+8), into the shared arrays combine_attention_row reads after a barrier.
template <int kHd>
__device__ __forceinline__ void stash_warp(float m, float l, float (&acc)[8], int warp, int lane, float* sm_m,
                                           float* sm_l, float (*sm_acc)[kHd]) {
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
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
}

// grid (n_heads, splits), kWarps warps; head_dim = kHd ≤ 32 · kWarps, so each thread owns at
// most one RoPE pair: threads [0, kHd/2) a query pair, [kHd/2, kHd) a key pair.
//
// Before pdl_wait this reads only what no kernel of the running forward writes: the step and
// positions (uploaded by a copy that the forward's first kernel waits for, and every later
// kernel of the chain starts after that one) and committed KV rows (written by earlier
// forwards and commits). The QKV projection's output, the new row and the split workspace are
// read after it.
template <int kHd>
__global__ void __launch_bounds__(kWarps * 32)
    decode_attention_kernel(const float* __restrict__ qkv, int64_t n_heads, int64_t v_col,
                            const int32_t* __restrict__ positions, float theta, bool adjacent, PagedKvLayer kv,
                            const int32_t* __restrict__ step, float scale, float* __restrict__ out,
                            AttentionSplit split) {
  constexpr int kHalf = kHd / 2, kChunks = kHd / 8;  // RoPE pairs; 16-byte pieces of a key row
  static_assert(kHd <= kWarps * 32 && kHd % 8 == 0);
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h = blockIdx.x, z = blockIdx.y;
  const int64_t kvh = h / (n_heads / kv.n_kv_heads);
  const int64_t committed = step[0], first_new = step[1];
  const int64_t total = committed + 1;  // the committed rows, then the new one
  const bool split_on = split.splits > 1;
  const int64_t per_split = split_on ? split.rows_per_split : total;
  const int64_t active = split_on ? (total + per_split - 1) / per_split : 1;
  if (z >= active) return;  // no rows here (a short context in a long cache)
  const int64_t begin = z * per_split, end = min(total, begin + per_split);

  // This thread's RoPE pair and angle (as rope_append_kernel: float inv_freq and angle, cos/sin
  // of the float angle in double).
  const int pair = static_cast<int>(threadIdx.x) % kHalf;
  const int pa = adjacent ? 2 * pair : pair, pb = adjacent ? 2 * pair + 1 : pair + kHalf;
  float cs = 0.0f, sn = 0.0f;
  if (threadIdx.x < kHd) {
    const float pos = static_cast<float>(positions[0]);
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * pair) / static_cast<float>(kHd));
    const float angle = pos * inv_freq;
    cs = static_cast<float>(cos(static_cast<double>(angle)));
    sn = static_cast<float>(sin(static_cast<double>(angle)));
  }
  // The first chunk's keys, if committed rows.
  const int64_t first0 = begin + static_cast<int64_t>(warp) * 32;
  uint4 kr[kChunks];
  auto load_key = [&](int64_t idx) {
    const uint4* k = reinterpret_cast<const uint4*>(kv.keys + slot_row(kv, idx, kvh));
#pragma unroll
    for (int c = 0; c < kChunks; ++c) kr[c] = k[c];
  };
  if (first0 + lane < min(end, committed)) load_key(first0 + lane);

  pdl_wait();
  __shared__ float qs[kHd];
  __shared__ __align__(16) bf16_bits k_new[kHd];
  __shared__ __align__(16) bf16_bits v_new[kHd];
  // The block of query head kvh·group on the first split appends the row for its KV head.
  const bool owner = z == 0 && h % (n_heads / kv.n_kv_heads) == 0;
  const int64_t base = slot_row(kv, first_new, kvh);
  if (threadIdx.x < kHd) {
    const bool query = threadIdx.x < kHalf;
    const float* x = qkv + (query ? h : n_heads + kvh) * kHd;
    const float x0 = x[pa], x1 = x[pb];
    const float r0 = x0 * cs - x1 * sn, r1 = x1 * cs + x0 * sn;
    if (query) {
      qs[pa] = r0 * scale;
      qs[pb] = r1 * scale;
    } else {
      const bf16_bits k0 = to_bf(r0), k1 = to_bf(r1);
      k_new[pa] = k0;
      k_new[pb] = k1;
      if (owner) {
        kv.keys[base + pa] = k0;
        kv.keys[base + pb] = k1;
        // The block's min/max covers rows [block start, first_new) (model_ops.cu says why).
        const int64_t meta =
            (static_cast<int64_t>(kv.block_table[first_new / kv.block_size]) * kv.n_kv_heads + kvh) * kHd;
        const bool first_in_block = first_new % kv.block_size == 0;
        update_min_max(kv, meta + pa, k0, first_in_block);
        update_min_max(kv, meta + pb, k1, first_in_block);
      }
    }
  }
  for (int d = threadIdx.x; d < kHd; d += blockDim.x) {
    const bf16_bits v = to_bf(qkv[v_col + kvh * kHd + d]);
    v_new[d] = v;
    if (owner) kv.values[base + d] = v;
  }
  __syncthreads();

  float acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t first = first0; first < end; first += kWarps * 32) {
    const int64_t idx = first + lane;
    float s = -INFINITY;
    const bf16_bits* vrow = nullptr;  // this lane's value row: the cache's, or v_new
    if (idx < end) {
      if (idx < committed) {
        if (first != first0) load_key(idx);
        vrow = kv.values + slot_row(kv, idx, kvh);
      } else {  // idx == committed: the new row
#pragma unroll
        for (int c = 0; c < kChunks; ++c) kr[c] = reinterpret_cast<const uint4*>(k_new)[c];
        vrow = v_new;
      }
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const uint4 w = kr[c];
        dot += key_dot8(qs + c * 8, w);
      }
      s = dot;
    }
    attend_chunk<kHd>(s, vrow, lane, m, l, acc);
  }
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][kHd];
  stash_warp<kHd>(m, l, acc, warp, lane, sm_m, sm_l, sm_acc);
  __syncthreads();
  // Split: over the active splits only.
  combine_attention_row<kWarps, kHd>(sm_m, sm_l, sm_acc, kHd, out + h * kHd, split, h, z, active);
}

// Several new rows (2 ≤ T ≤ kMaxTreeRows, a chain or a tree verify): grid (n_heads, T, splits).
// The block (h, t, z) does what rope_append_at + attention_kernel (mask) do for query head h of
// row t over split z: it rotates its query and the keys of the new rows it may see (mask[t·T + j],
// or j ≤ t without a mask) from the f32 qkv, rounds them and their values to bf16 as the cache
// holds them, keeps them in shared memory, and reads only committed rows from the cache. Row j's
// K/V go to the cache from block (kvh·group, j, 0) alone. Key min/max are left to the commit (the
// session's min_max_stale_). The score and softmax loop is decode_attention_kernel's, whose
// order is attention_kernel's; only the new rows' source differs.
constexpr int kMaxTreeRows = 16;

template <int kHd>
__global__ void __launch_bounds__(kWarps * 32)
    tree_decode_attention_kernel(const float* __restrict__ qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t v_col,
                                 const int32_t* __restrict__ positions, float theta, bool adjacent, PagedKvLayer kv,
                                 const int32_t* __restrict__ step, const uint8_t* __restrict__ mask, float scale,
                                 float* __restrict__ out, AttentionSplit split) {
  constexpr int kHalf = kHd / 2, kChunks = kHd / 8;
  constexpr int kThreads = kWarps * 32, kItems = (kMaxTreeRows * kHalf + kThreads - 1) / kThreads;
  static_assert(kHd <= kThreads && kHd % 8 == 0);
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h = blockIdx.x, t = blockIdx.y, z = blockIdx.z;
  const int64_t group = n_heads / kv.n_kv_heads, kvh = h / group;
  const int64_t committed = step[0], first_new = step[1];
  const int64_t total = committed + T;  // the committed rows, then the new ones
  const bool split_on = split.splits > 1;
  const int64_t per_split = split_on ? split.rows_per_split : total;
  const int64_t active = split_on ? (total + per_split - 1) / per_split : 1;
  if (z >= active) return;  // no rows here
  const int64_t begin = z * per_split, end = min(total, begin + per_split);

  // RoPE angles (as rope_append_kernel): the query pair of threads [0, kHalf) at position t, and
  // key item k = threadIdx.x + i·kThreads (row k / kHalf, pair k % kHalf) at that row's position.
  auto angle_of = [&](int64_t row, int pair, float& c, float& s) {
    const float pos = static_cast<float>(positions[row]);
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * pair) / static_cast<float>(kHd));
    const float angle = pos * inv_freq;
    c = static_cast<float>(cos(static_cast<double>(angle)));
    s = static_cast<float>(sin(static_cast<double>(angle)));
  };
  float qc = 0.0f, qs_ = 0.0f;
  if (threadIdx.x < kHalf) angle_of(t, static_cast<int>(threadIdx.x), qc, qs_);
  float kc[kItems], ks[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t k = threadIdx.x + i * kThreads;
    kc[i] = ks[i] = 0.0f;
    if (k < T * kHalf) angle_of(k / kHalf, static_cast<int>(k % kHalf), kc[i], ks[i]);
  }
  const int64_t first0 = begin + static_cast<int64_t>(warp) * 32;
  uint4 kr[kChunks];
  auto load_key = [&](int64_t idx) {
    const uint4* k = reinterpret_cast<const uint4*>(kv.keys + slot_row(kv, idx, kvh));
#pragma unroll
    for (int c = 0; c < kChunks; ++c) kr[c] = k[c];
  };
  if (first0 + lane < min(end, committed)) load_key(first0 + lane);

  pdl_wait();
  __shared__ float qs[kHd];
  __shared__ __align__(16) bf16_bits k_new[kMaxTreeRows][kHd];
  __shared__ __align__(16) bf16_bits v_new[kMaxTreeRows][kHd];
  auto visible = [&](int64_t j) { return mask ? mask[t * T + j] != 0 : j <= t; };
  // Row t's K/V go to the cache from the first query head of its KV group, first split.
  const bool owner = z == 0 && h % group == 0;
  if (threadIdx.x < kHalf) {
    const int pair = static_cast<int>(threadIdx.x);
    const int pa = adjacent ? 2 * pair : pair, pb = adjacent ? 2 * pair + 1 : pair + kHalf;
    const float* x = qkv + t * ld + h * kHd;
    const float x0 = x[pa], x1 = x[pb];
    qs[pa] = (x0 * qc - x1 * qs_) * scale;
    qs[pb] = (x1 * qc + x0 * qs_) * scale;
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t k = threadIdx.x + i * kThreads;
    if (k >= T * kHalf) continue;
    const int64_t j = k / kHalf;
    const bool writes = owner && j == t;
    if (!writes && !visible(j)) continue;
    const int pair = static_cast<int>(k % kHalf);
    const int pa = adjacent ? 2 * pair : pair, pb = adjacent ? 2 * pair + 1 : pair + kHalf;
    const float* x = qkv + j * ld + (n_heads + kvh) * kHd;
    const float x0 = x[pa], x1 = x[pb];
    const bf16_bits k0 = to_bf(x0 * kc[i] - x1 * ks[i]), k1 = to_bf(x1 * kc[i] + x0 * ks[i]);
    k_new[j][pa] = k0;
    k_new[j][pb] = k1;
    if (writes) {
      const int64_t base = slot_row(kv, first_new + j, kvh);
      kv.keys[base + pa] = k0;
      kv.keys[base + pb] = k1;
    }
  }
  for (int64_t k = threadIdx.x; k < T * kHd; k += kThreads) {
    const int64_t j = k / kHd, d = k % kHd;
    const bool writes = owner && j == t;
    if (!writes && !visible(j)) continue;
    const bf16_bits v = to_bf(qkv[j * ld + v_col + kvh * kHd + d]);
    v_new[j][d] = v;
    if (writes) kv.values[slot_row(kv, first_new + j, kvh) + d] = v;
  }
  __syncthreads();

  float acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t first = first0; first < end; first += kWarps * 32) {
    const int64_t idx = first + lane;
    float s = -INFINITY;
    const bf16_bits* vrow = nullptr;  // this lane's value row: the cache's, or v_new's
    if (idx < end) {
      bool seen = true;
      if (idx < committed) {
        if (first != first0) load_key(idx);
        vrow = kv.values + slot_row(kv, idx, kvh);
      } else {  // new row j, if row t may see it
        const int64_t j = idx - committed;
        seen = visible(j);
        if (seen) {
#pragma unroll
          for (int c = 0; c < kChunks; ++c) kr[c] = reinterpret_cast<const uint4*>(k_new[j])[c];
          vrow = v_new[j];
        }
      }
      if (seen) {
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const uint4 w = kr[c];
          dot += key_dot8(qs + c * 8, w);
        }
        s = dot;
      }
    }
    attend_chunk<kHd>(s, vrow, lane, m, l, acc);
  }
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][kHd];
  stash_warp<kHd>(m, l, acc, warp, lane, sm_m, sm_l, sm_acc);
  __syncthreads();
  const int64_t pair = t * n_heads + h;
  combine_attention_row<kWarps, kHd>(sm_m, sm_l, sm_acc, kHd, out + pair * kHd, split, pair, z, active);
}

}  // namespace

bool decode_attention_at(const float* qkv, int64_t n_heads, int64_t v_col, const int32_t* positions, float theta,
                         bool adjacent, const PagedKvLayer& kv, const int32_t* step, float scale, float* out,
                         const AttentionSplit& split, cudaStream_t stream) {
  if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0) return false;
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(split.splits > 1 ? split.splits : 1));
  const dim3 block(kWarps * 32);
  if (kv.head_dim == 64) {
    launch_pdl(decode_attention_kernel<64>, grid, block, 0, stream, qkv, n_heads, v_col, positions, theta, adjacent, kv,
               step, scale, out, split);
  } else if (kv.head_dim == 128) {
    launch_pdl(decode_attention_kernel<128>, grid, block, 0, stream, qkv, n_heads, v_col, positions, theta, adjacent,
               kv, step, scale, out, split);
  } else {
    return false;
  }
  return true;
}

bool tree_decode_attention_at(const float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t v_col,
                              const int32_t* positions, float theta, bool adjacent, const PagedKvLayer& kv,
                              const int32_t* step, const uint8_t* mask, float scale, float* out,
                              const AttentionSplit& split, cudaStream_t stream) {
  if (T < 1 || T > kMaxTreeRows || kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0) return false;
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(T),
                  static_cast<unsigned>(split.splits > 1 ? split.splits : 1));
  const dim3 block(kWarps * 32);
  if (kv.head_dim == 64) {
    launch_pdl(tree_decode_attention_kernel<64>, grid, block, 0, stream, qkv, ld, T, n_heads, v_col, positions, theta,
               adjacent, kv, step, mask, scale, out, split);
  } else if (kv.head_dim == 128) {
    launch_pdl(tree_decode_attention_kernel<128>, grid, block, 0, stream, qkv, ld, T, n_heads, v_col, positions, theta,
               adjacent, kv, step, mask, scale, out, split);
  } else {
    return false;
  }
  return true;
}

}  // namespace specula::cuda
