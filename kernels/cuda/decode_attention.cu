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
//
// kFold (DecodeWoFold): the block that writes head h's row also multiplies it by Wo's columns
// [h·kHd, (h+1)·kHd) into fold.parts[h] (dim floats). Those columns (dim rows of kHd bf16, in
// dynamic shared memory: fold_shared_bytes) are copied in before the wait, as weights.
template <int kHd, bool kFold>
__global__ void __launch_bounds__(kWarps * 32)
    decode_attention_kernel(const float* __restrict__ qkv, int64_t n_heads, int64_t v_col,
                            const int32_t* __restrict__ positions, float theta, bool adjacent, PagedKvLayer kv,
                            const int32_t* __restrict__ step, float scale, float* __restrict__ out,
                            AttentionSplit split, DecodeWoFold fold) {
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
  // Wo's columns of this head, row n's chunk c (8 values) at n·kChunks + (c ^ (n % kChunks)): a
  // quarter warp reading one chunk of 8 consecutive rows then hits 8 different 16-byte bank groups.
  extern __shared__ uint4 wo_cols[];
  if constexpr (kFold) {
    for (int64_t i = threadIdx.x; i < fold.dim * kChunks; i += blockDim.x) {
      const int64_t n = i / kChunks, c = i % kChunks;
      const bf16_bits* src = fold.wo + n * fold.wo_ld + h * kHd + c * 8;
      const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(wo_cols + n * kChunks + (c ^ (n % kChunks))));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }

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
        const float* qc = qs + c * 8;
        dot += qc[0] * __uint_as_float(w.x << 16) + qc[1] * __uint_as_float(w.x & 0xffff0000u) +
               qc[2] * __uint_as_float(w.y << 16) + qc[3] * __uint_as_float(w.y & 0xffff0000u) +
               qc[4] * __uint_as_float(w.z << 16) + qc[5] * __uint_as_float(w.z & 0xffff0000u) +
               qc[6] * __uint_as_float(w.w << 16) + qc[7] * __uint_as_float(w.w & 0xffff0000u);
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
      acc[0] += pr[i] * __uint_as_float(v[i].x << 16);
      acc[1] += pr[i] * __uint_as_float(v[i].x & 0xffff0000u);
      acc[2] += pr[i] * __uint_as_float(v[i].y << 16);
      acc[3] += pr[i] * __uint_as_float(v[i].y & 0xffff0000u);
      acc[4] += pr[i] * __uint_as_float(v[i].z << 16);
      acc[5] += pr[i] * __uint_as_float(v[i].z & 0xffff0000u);
      acc[6] += pr[i] * __uint_as_float(v[i].w << 16);
      acc[7] += pr[i] * __uint_as_float(v[i].w & 0xffff0000u);
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
  const bool wrote = combine_attention_row<kWarps, kHd>(sm_m, sm_l, sm_acc, kHd, out + h * kHd, split, h, z, active);
  if constexpr (kFold) {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (!wrote) return;
    __syncthreads();  // the row's global writes (other threads of this block), and wo_cols
    __shared__ __align__(16) float o[kHd];
    for (int d = threadIdx.x; d < kHd; d += blockDim.x) o[d] = out[h * kHd + d];
    __syncthreads();
    // parts[h][n] = Σ_d Wo[n][h·kHd + d] · o[d], d in order within each chunk: 4 rows a thread at
    // once (independent FMA chains), rows n, n + 128, ... of them.
    constexpr int kRows = 4;
    for (int64_t n0 = threadIdx.x; n0 < fold.dim; n0 += kRows * blockDim.x) {
      float acc[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const float4 oa = reinterpret_cast<const float4*>(o)[2 * c], ob = reinterpret_cast<const float4*>(o)[2 * c + 1];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int64_t n = n0 + r * blockDim.x;
          if (n < fold.dim) {
            const uint4 w = wo_cols[n * kChunks + (c ^ (n % kChunks))];
            float a = acc[r];
            a = fmaf(__uint_as_float(w.x << 16), oa.x, a);
            a = fmaf(__uint_as_float(w.x & 0xffff0000u), oa.y, a);
            a = fmaf(__uint_as_float(w.y << 16), oa.z, a);
            a = fmaf(__uint_as_float(w.y & 0xffff0000u), oa.w, a);
            a = fmaf(__uint_as_float(w.z << 16), ob.x, a);
            a = fmaf(__uint_as_float(w.z & 0xffff0000u), ob.y, a);
            a = fmaf(__uint_as_float(w.w << 16), ob.z, a);
            a = fmaf(__uint_as_float(w.w & 0xffff0000u), ob.w, a);
            acc[r] = a;
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t n = n0 + r * blockDim.x;
        if (n < fold.dim) fold.parts[h * fold.dim + n] = acc[r];
      }
    }
  }
}

template <int kHd, bool kFold>
void launch(dim3 grid, const float* qkv, int64_t n_heads, int64_t v_col, const int32_t* positions, float theta,
            bool adjacent, const PagedKvLayer& kv, const int32_t* step, float scale, float* out,
            const AttentionSplit& split, const DecodeWoFold& fold, cudaStream_t stream) {
  const size_t shared = kFold ? decode_wo_fold_shared_bytes(fold.dim, kHd) : 0;
  if constexpr (kFold) {
    // Past 48 KB a kernel takes dynamic shared memory only after this: once, for the largest fold.
    static const cudaError_t raised = cudaFuncSetAttribute(
        decode_attention_kernel<kHd, kFold>, cudaFuncAttributeMaxDynamicSharedMemorySize, int{kWoFoldMaxBytes});
    (void)raised;  // a failure shows as the launch's error
  }
  launch_pdl(decode_attention_kernel<kHd, kFold>, grid, dim3(kWarps * 32), shared, stream, qkv, n_heads, v_col,
             positions, theta, adjacent, kv, step, scale, out, split, fold);
}

}  // namespace

size_t decode_wo_fold_shared_bytes(int64_t dim, int64_t head_dim) { return size_t(dim) * size_t(head_dim) * 2; }

bool decode_wo_fold_fits(int64_t dim, int64_t head_dim) {
  return dim > 0 && (head_dim == 64 || head_dim == 128) &&
         decode_wo_fold_shared_bytes(dim, head_dim) <= kWoFoldMaxBytes;
}

bool decode_attention_at(const float* qkv, int64_t n_heads, int64_t v_col, const int32_t* positions, float theta,
                         bool adjacent, const PagedKvLayer& kv, const int32_t* step, float scale, float* out,
                         const AttentionSplit& split, cudaStream_t stream, const DecodeWoFold* fold) {
  if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0) return false;
  if (fold) {
    const bool aligned = reinterpret_cast<uintptr_t>(fold->wo) % 16 == 0 && fold->wo_ld % 8 == 0;
    if (!decode_wo_fold_fits(fold->dim, kv.head_dim) || !aligned || fold->wo_ld < n_heads * kv.head_dim ||
        fold->parts == nullptr) {
      return false;
    }
  }
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(split.splits > 1 ? split.splits : 1));
  const DecodeWoFold none{};
  if (kv.head_dim == 64) {
    if (fold) {
      launch<64, true>(grid, qkv, n_heads, v_col, positions, theta, adjacent, kv, step, scale, out, split, *fold,
                       stream);
    } else {
      launch<64, false>(grid, qkv, n_heads, v_col, positions, theta, adjacent, kv, step, scale, out, split, none,
                        stream);
    }
  } else if (kv.head_dim == 128) {
    if (fold) {
      launch<128, true>(grid, qkv, n_heads, v_col, positions, theta, adjacent, kv, step, scale, out, split, *fold,
                        stream);
    } else {
      launch<128, false>(grid, qkv, n_heads, v_col, positions, theta, adjacent, kv, step, scale, out, split, none,
                         stream);
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace specula::cuda
