#pragma once
// The inner loop of the sparse FFN's and the MoE's projections (kernels/cuda/sparse_ffn.cu,
// moe.cu): one warp dots R bf16 weight rows with up to TC f32 activation rows, as the skinny
// kernel does (kernels/cuda/skinny_gemm.cu): each lane takes 8 consecutive k per step (16 bytes
// of a contiguous weight row), a warp 256 k, and the activation rows come through L1 (every
// warp of a block reads the same ones). With a gather list the weights of step k are
// w[idx[k]] instead of w[k] (the active columns of a row-major down projection): scalar 2-byte
// loads, which the memory system serves in 32-byte sectors.
#include <cstdint>
#include <type_traits>

namespace specula::cuda::warp_dot {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A bf16 is the upper half of an f32: the two halves of a 32-bit word, widened exactly.
__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float bf16_at(const uint16_t* w, int64_t i) {
  return __uint_as_float(static_cast<uint32_t>(__ldg(w + i)) << 16);
}
// The 8 bf16 of a 16-byte load, widened, in k order.
__device__ __forceinline__ void widen8(const uint4& v, float (&w)[8]) {
  w[0] = lo_bf16(v.x), w[1] = hi_bf16(v.x), w[2] = lo_bf16(v.y), w[3] = hi_bf16(v.y);
  w[4] = lo_bf16(v.z), w[5] = hi_bf16(v.z), w[6] = lo_bf16(v.w), w[7] = hi_bf16(v.w);
}
// One step's 8-term dot of weights w with activations a (k 0-3) and b (k 4-7): every caller's
// order, so dot_rows and dot_rows_streamed sum alike.
__device__ __forceinline__ float dot8(const float (&w)[8], const float4& a, const float4& b) {
  return w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
}

// acc[r][t] += Σ_k w_r[k or idx[k]] · x_t[k] over k < K8·8, this lane's share (the caller sums
// the warp with warp_sum). x[t] must be 16-byte aligned; rows t ≥ n are not touched. With idx,
// idx has K8·8 valid entries (callers pad the list to a multiple of 8 with valid ids and zero
// activations).
template <int TC, int R>
__device__ __forceinline__ void dot_rows(const uint16_t* const (&w)[R], const int32_t* __restrict__ idx, int64_t K8,
                                         const float* const (&x)[TC], int n, float (&acc)[R][TC]) {
  const int lane = threadIdx.x & 31;
  for (int64_t k8 = lane; k8 < K8; k8 += 32) {
    float wv[R][8];
    if (idx == nullptr) {
#pragma unroll
      for (int r = 0; r < R; ++r) widen8(__ldg(reinterpret_cast<const uint4*>(w[r]) + k8), wv[r]);
    } else {
      const int4 i0 = reinterpret_cast<const int4*>(idx)[2 * k8], i1 = reinterpret_cast<const int4*>(idx)[2 * k8 + 1];
      const int ids[8] = {i0.x, i0.y, i0.z, i0.w, i1.x, i1.y, i1.z, i1.w};
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int j = 0; j < 8; ++j) wv[r][j] = bf16_at(w[r], ids[j]);
      }
    }
#pragma unroll
    for (int t = 0; t < TC; ++t) {
      if (t < n) {
        // Activations were written by an earlier kernel: plain loads, not the read-only path.
        const float4* xr = reinterpret_cast<const float4*>(x[t]) + 2 * k8;
        const float4 a = xr[0], b = xr[1];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] += dot8(wv[r], a, b);
      }
    }
  }
}

// dot_rows without a gather list, for a pass whose every x[t] (t < TC) points at a valid row
// (callers repeat the pass's last row as padding, whose sums they drop): the weights of U steps
// (U·R 16-byte loads a lane) are all issued before the first product, and no activation load
// sits behind a branch. dot_rows waits a full memory round trip per step and, past one row, per
// row (its `if (t < n)`); the MoE's experts have 4-8 steps a lane (dim 2048, expert FFN 1024) and
// few rows, so that latency chain, not the bytes, was their time (39-40% of copy bandwidth on
// OLMoE's and Qwen1.5-MoE's decode, bench/results/moe_e2e_s15_h200_2026-12-01.json). Each
// acc[r][t] is summed in dot_rows' order: k8 ascending, the same 8-term expression.
template <int TC, int R, int U>
__device__ __forceinline__ void dot_rows_streamed(const uint16_t* const (&w)[R], int64_t K8,
                                                  const float* const (&x)[TC], float (&acc)[R][TC]) {
  const int lane = threadIdx.x & 31;
  for (int64_t base = lane; base < K8; base += 32 * U) {
    uint4 wv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k8 = base + 32 * u;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        wv[u][r] = k8 < K8 ? __ldg(reinterpret_cast<const uint4*>(w[r]) + k8) : make_uint4(0, 0, 0, 0);
      }
    }
    // Left alone, ptxas issues each step's weight loads after the previous step's products (fewer
    // registers), a round trip a step. `hold` is 0 at run time (K8 < 2^40), but it depends on every
    // load, and every activation address adds it: all U·R loads must be issued first.
    uint32_t loaded = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) loaded |= wv[u][r].x;
    }
    const int64_t hold = static_cast<int64_t>(loaded & static_cast<uint32_t>(K8 >> 40));
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k8 = base + 32 * u;
      const int64_t kx = (k8 < K8 ? k8 : K8 - 1) + hold;  // the tail's loads stay in the row; not summed
#pragma unroll
      for (int t = 0; t < TC; ++t) {
        // Activations were written by an earlier kernel: plain loads, not the read-only path.
        const float4* xr = reinterpret_cast<const float4*>(x[t]) + 2 * kx;
        const float4 a = xr[0], b = xr[1];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float wf[8];
          widen8(wv[u][r], wf);
          const float d = dot8(wf, a, b);
          if (k8 < K8) acc[r][t] += d;
        }
      }
    }
  }
}

// Runs fn(std::integral_constant<int, P>{}) for the smallest P ∈ {1, 2, 4, 8, 16, 32}, P ≤ Max,
// that holds n rows (n ≤ Max): a block's pass sized by its own rows (an expert's), not the launch's.
template <int Max, int P = 1, typename Fn>
__device__ __forceinline__ void with_pass_rows(int n, Fn&& fn) {
  if constexpr (P >= Max) {
    fn(std::integral_constant<int, Max>{});
  } else if (n <= P) {
    fn(std::integral_constant<int, P>{});
  } else {
    with_pass_rows<Max, 2 * P>(n, fn);
  }
}

// Dispatches a kernel template on the activation rows per pass, TC ∈ {1, 2, 4, 8, 16, 32} and
// TC ≤ Max, for `rows` rows: fn(std::integral_constant<int, TC>{}). Callers loop passes of TC.
template <int Max, typename Fn>
void with_rows(int64_t rows, Fn&& fn) {
  static_assert(Max == 8 || Max == 16 || Max == 32);
  if (rows <= 1) {
    fn(std::integral_constant<int, 1>{});
  } else if (rows <= 2) {
    fn(std::integral_constant<int, 2>{});
  } else if (rows <= 4) {
    fn(std::integral_constant<int, 4>{});
  } else if (rows <= 8 || Max == 8) {
    fn(std::integral_constant<int, 8>{});
  } else if constexpr (Max >= 16) {
    if (rows <= 16 || Max == 16) {
      fn(std::integral_constant<int, 16>{});
    } else if constexpr (Max == 32) {
      fn(std::integral_constant<int, 32>{});
    }
  }
}

}  // namespace specula::cuda::warp_dot
