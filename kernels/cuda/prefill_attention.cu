// Causal prefill attention on the tensor cores (prefill_attention.h). FlashAttention-2's shape on
// mma.sync m16n8k16: a CTA of 4 warps takes 64 query rows of one query head (16 a warp, Q as
// register A fragments), streams the keys its last row sees in 64-key tiles of K and V through
// shared memory (cp.async, two slots), and keeps the online softmax and O in registers. The
// fragment and softmax code is tree_attention.cu's mma.sync kernel with one 16-row tile a warp.
// Hand-written rather than FlashAttention or FlashInfer: neither is a Debian package, and the KV
// is ours (16-row blocks through a block table, committed rows then the new rows at first_new).
#include <cuda_bf16.h>

#include <cmath>
#include <mutex>

#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/prefill_attention.h"

namespace specula::cuda {
namespace {

constexpr int kWarps = 4, kRows = 16 * kWarps;  // query rows a CTA
constexpr int kKeys = 64;                       // keys a tile
constexpr int kBlock = 16;                      // KV rows a cache block

// Shared memory: 2 slots x (K, V) x 64 keys x (D + 8) bf16; the 8 pad keeps ldmatrix conflict-free.
template <int D>
constexpr size_t smem_bytes() {
  return size_t(2) * 2 * kKeys * (D + 8) * sizeof(__nv_bfloat16);
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    prefill_attention_kernel(const float* __restrict__ q, int64_t ld_q, int T, int n_heads, PagedKvLayer kv,
                             const int32_t* __restrict__ step, float scale_log2, float* __restrict__ out) {
  constexpr int P = D + 8, kTile = kKeys * P, KS = D / 16;  // KS: 16-dim k steps of Q K^T
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [2][kKeys][P]
  __nv_bfloat16* vs = ks + 2 * kTile;                     // [2][kKeys][P]
  const auto* keys = reinterpret_cast<const __nv_bfloat16*>(kv.keys);
  const auto* values = reinterpret_cast<const __nv_bfloat16*>(kv.values);

  pdl_wait();  // q and the appended K/V come from the kernels before
  const int committed = step[0], first_new = step[1];
  // Later row tiles see more keys: they are launched first.
  const int t0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int h = blockIdx.y, kvh = h / (n_heads / static_cast<int>(kv.n_kv_heads));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int row0 = t0 + warp * 16;  // the warp's first row; it sees logical keys [0, committed + row]
  // Logical key k is cache row k below committed, else new row first_new + (k - committed).
  const int n_keys = committed + min(t0 + kRows, T);
  const int n_tiles = (n_keys + kKeys - 1) / kKeys;

  auto issue = [&](int tile, int slot) {
    constexpr int kPieces = kKeys * D / 8;  // 16-byte pieces of a K (or V) tile
    for (int p = threadIdx.x; p < 2 * kPieces; p += blockDim.x) {
      const int which = p / kPieces, key = p % kPieces / (D / 8), col = p % (D / 8) * 8;
      const int idx = tile * kKeys + key;
      __nv_bfloat16* dst = (which ? vs : ks) + slot * kTile + key * P + col;
      if (idx < n_keys) {
        const int row = idx < committed ? idx : first_new + (idx - committed);
        const int64_t off = ((int64_t(kv.block_table[row / kBlock]) * kv.n_kv_heads + kvh) * kBlock + row % kBlock) * D;
        cp_async16(dst, (which ? values : keys) + off + col);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);  // masked below: zeros keep P V finite
      }
    }
  };
  issue(0, 0);
  cp_async_commit();

  // Q as bf16 A fragments, rows g and g + 8 of the warp's 16: a0 (g, 2tq..), a1 (g+8, 2tq..),
  // a2 (g, 2tq+8..), a3 (g+8, 2tq+8..) of each 16-dim step.
  uint32_t qf[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + 8 * r;
        float2 x = make_float2(0.f, 0.f);
        if (row < T)
          x = *reinterpret_cast<const float2*>(q + int64_t(row) * ld_q + int64_t(h) * D + kk * 16 + half * 8 + 2 * tq);
        qf[kk][r + 2 * half] = pack_bf16(x.x, x.y);
      }
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // max of unscaled scores, sum
  int last_key[2];  // the last logical key a row sees; -1 for rows past T
#pragma unroll
  for (int r = 0; r < 2; ++r) last_key[r] = row0 + g + 8 * r < T ? committed + row0 + g + 8 * r : -1;
  const int warp_last = committed + min(row0 + 15, T - 1);  // the warp's furthest visible key
  // ldmatrix lane addresses, as tree_attention.cu's: K gives b0/b1 of two 8-key n-tiles per 16
  // dims; V (transposed) b0/b1 of two 8-dim n-tiles per 16 keys.
  const int k_row = (lane >> 4) * 8 + (lane & 7), k_col = ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;

  for (int i = 0; i < n_tiles; ++i) {
    if (i + 1 < n_tiles) issue(i + 1, (i + 1) % 2);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int slot = i % 2, k0 = i * kKeys;
    if (row0 < T && k0 <= warp_last) {
      // S = Q K^T (unscaled): 16 rows x 64 keys as 8 n-tiles of 8 keys.
      float s[8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
      const __nv_bfloat16* kt = ks + slot * kTile + k_row * P + k_col;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {
          uint32_t kf[4];
          ldmatrix_x4(kf, kt + nb * 16 * P + kk * 16);
          mma16816(s[2 * nb], qf[kk], kf[0], kf[1]);
          mma16816(s[2 * nb + 1], qf[kk], kf[2], kf[3]);
        }
      // Causal mask where the tile passes the warp's first row's last key (and rows past T).
      const bool edge = k0 + kKeys - 1 > committed + row0 || row0 + 15 >= T;
      float mx[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& x = s[j][2 * r + c];
            if (edge && k0 + j * 8 + 2 * tq + c > last_key[r]) x = -INFINITY;
            mx[r] = fmaxf(mx[r], x);
          }
      }
      float alpha[2];
      const bool moved = online_softmax_update(reinterpret_cast<float(&)[32]>(s), mx, scale_log2, m_run, l_run, alpha);
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int d = 0; d < D / 8; ++d) {
          o[d][0] *= alpha[0];
          o[d][1] *= alpha[0];
          o[d][2] *= alpha[1];
          o[d][3] *= alpha[1];
        }
      }
      // O += P V, P re-packed from the S accumulators 16 keys at a time.
      const __nv_bfloat16* vt = vs + slot * kTile + v_row * P + v_col;
#pragma unroll
      for (int kb = 0; kb < 4; ++kb) {
        const uint32_t pf[4] = {pack_bf16(s[2 * kb][0], s[2 * kb][1]), pack_bf16(s[2 * kb][2], s[2 * kb][3]),
                                pack_bf16(s[2 * kb + 1][0], s[2 * kb + 1][1]),
                                pack_bf16(s[2 * kb + 1][2], s[2 * kb + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t vf[4];
          ldmatrix_x4_trans(vf, vt + kb * 16 * P + dp * 16);
          mma16816(o[2 * dp], pf, vf[0], vf[1]);
          mma16816(o[2 * dp + 1], pf, vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // the slot is refilled by the next iteration's issue
  }
  cp_async_wait<0>();
  pdl_trigger();
  if (row0 >= T) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = row0 + g + 8 * r;
    if (row >= T) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    float* dst = out + int64_t(row) * n_heads * D + int64_t(h) * D + 2 * tq;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
  }
}

template <int D>
void launch(const float* q, int64_t ld_q, int T, int n_heads, const PagedKvLayer& kv, const int32_t* step,
            float scale_log2, float* out, cudaStream_t stream) {
  static std::once_flag once;
  std::call_once(once, [] {
    cudaFuncSetAttribute(prefill_attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(smem_bytes<D>()));
  });
  const dim3 grid(static_cast<unsigned>((T + kRows - 1) / kRows), static_cast<unsigned>(n_heads));
  launch_pdl(prefill_attention_kernel<D>, grid, dim3(kWarps * 32), smem_bytes<D>(), stream, q, ld_q, T, n_heads, kv,
             step, scale_log2, out);
}

}  // namespace

bool prefill_attention(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, const PagedKvLayer& kv,
                       const int32_t* step, float scale, float* out, cudaStream_t stream) {
  if (kv.block_size != kBlock || T < 1 || kv.n_kv_heads < 1 || n_heads % kv.n_kv_heads != 0) return false;
  const float scale_log2 = scale * 1.4426950408889634f;
  if (kv.head_dim == 64) {
    launch<64>(q, ld_q, static_cast<int>(T), static_cast<int>(n_heads), kv, step, scale_log2, out, stream);
  } else if (kv.head_dim == 128) {
    launch<128>(q, ld_q, static_cast<int>(T), static_cast<int>(n_heads), kv, step, scale_log2, out, stream);
  } else {
    return false;
  }
  return true;
}

}  // namespace specula::cuda
