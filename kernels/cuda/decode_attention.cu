#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_combine.cuh"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/pdl.cuh"

namespace specula::cuda {
namespace {

// The same block shape, chunking and arithmetic order as model_ops.cu's attention_kernel (for
// kHd 64 and 128), so the two paths give the same bits; what differs is where the new row
// comes from and what happens before the wait.
constexpr int kWarps = 4;

__device__ __forceinline__ float bf(bf16_bits v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
__device__ __forceinline__ bf16_bits to_bf(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ int64_t slot_row(const PagedKvLayer& kv, int64_t row, int64_t head) {
  const int64_t phys = kv.block_table[row / kv.block_size];
  return ((phys * kv.n_kv_heads + head) * kv.block_size + row % kv.block_size) * kv.head_dim;
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
        const float f0 = bf(k0), f1 = bf(k1);
        kv.key_min[meta + pa] = first_in_block ? f0 : fminf(kv.key_min[meta + pa], f0);
        kv.key_max[meta + pa] = first_in_block ? f0 : fmaxf(kv.key_max[meta + pa], f0);
        kv.key_min[meta + pb] = first_in_block ? f1 : fminf(kv.key_min[meta + pb], f1);
        kv.key_max[meta + pb] = first_in_block ? f1 : fmaxf(kv.key_max[meta + pb], f1);
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
    const float chunk_max = warp_max(s);
    if (chunk_max == -INFINITY) continue;
    const float m_new = fmaxf(m, chunk_max);
    const float corr = expf(m - m_new);
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= corr;
    // Lane = (row group g, 8-dim slice): rows g, g + G, ... of the chunk, dims slice·8..+8.
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
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][kHd];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
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
  __syncthreads();
  // Split: over the active splits only.
  combine_attention_row<kWarps, kHd>(sm_m, sm_l, sm_acc, kHd, out + h * kHd, split, h, z, active);
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

}  // namespace specula::cuda
