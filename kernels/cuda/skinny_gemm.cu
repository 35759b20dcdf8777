#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>

#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/warp_dot.cuh"

namespace specula::cuda {
namespace {

constexpr int kWarps = 8;  // one output row per warp, 8 rows per block

// The f32 kernels' arithmetic is spelled out with round-to-nearest intrinsics, each operation
// and fused multiply-add written down: left to the compiler, `a*b + c*d` may become
// fma(a, b, c*d) or fma(c, d, a*b), and it chose differently from one unrolled step to the next
// and between kernels (the one-row RMSNorm kernel's PTX had both orders of x² for its first two
// steps; the staged kernel's normed rows came out different from it). Pinned, a row's result
// depends only on its values and the lane/step order, whichever kernel computes it: a verify row
// is bit-identical to the decode step's one-row kernel by construction.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// w · (a, b) over one step's 8 k, left to right: ((w0·a.x + w1·a.y) + w2·a.z) + …
__device__ __forceinline__ float dot8(const float (&w)[8], float4 a, float4 b) {
  float e = __fmul_rn(w[0], a.x);
  e = __fmaf_rn(w[1], a.y, e);
  e = __fmaf_rn(w[2], a.z, e);
  e = __fmaf_rn(w[3], a.w, e);
  e = __fmaf_rn(w[4], b.x, e);
  e = __fmaf_rn(w[5], b.y, e);
  e = __fmaf_rn(w[6], b.z, e);
  return __fmaf_rn(w[7], b.w, e);
}

// The step's x² sum, in the same order.
__device__ __forceinline__ float sumsq8(float4 a, float4 b) {
  float e = __fmul_rn(a.x, a.x);
  e = __fmaf_rn(a.y, a.y, e);
  e = __fmaf_rn(a.z, a.z, e);
  e = __fmaf_rn(a.w, a.w, e);
  e = __fmaf_rn(b.x, b.x, e);
  e = __fmaf_rn(b.y, b.y, e);
  e = __fmaf_rn(b.z, b.z, e);
  return __fmaf_rn(b.w, b.w, e);
}

__device__ __forceinline__ float4 scale4(float4 a, float4 g) {
  return make_float4(__fmul_rn(a.x, g.x), __fmul_rn(a.y, g.y), __fmul_rn(a.z, g.z), __fmul_rn(a.w, g.w));
}

// A normed row's 1/rms from its x² sum over the row (already summed over the lanes).
__device__ __forceinline__ float inv_rms_of(float total, int64_t K, float eps) {
  return rsqrtf(__fadd_rn(__fdiv_rn(total, static_cast<float>(K)), eps));
}

// A normed row's 1/rms from its lanes' x² sums.
__device__ __forceinline__ float inv_rms(float sumsq, int64_t K, float eps) {
  return inv_rms_of(warp_sum(sumsq), K, eps);
}

__host__ __device__ constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }
__host__ __device__ constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

// One step of warp_sums_transposed at offset 16 >> S, and the steps after it. Each step is its own
// instantiation so that every register index is a constant: with the steps as a loop, nvcc kept a
// run-time step counter and reached v[] through chains of predicated moves (and local memory in
// the staged kernel), which made 5- and 8-row SwiGLU GEMVs 20-45% slower.
template <int G, int P, int S>
__device__ __forceinline__ void warp_sums_step(float (&v)[G * P], int lane) {
  if constexpr (S < 5) {
    constexpr int o = 16 >> S;
    constexpr int kGroups = G >> S;  // groups a lane holds before this step
    if constexpr (kGroups > 1) {
      constexpr int half = kGroups / 2 * P;  // values it keeps
      const bool upper = (lane & o) != 0;
#pragma unroll
      for (int i = 0; i < half; ++i) {
        const float keep = upper ? v[i + half] : v[i];
        const float send = upper ? v[i] : v[i + half];
        v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, o));
      }
    } else {
#pragma unroll
      for (int i = 0; i < P; ++i) v[i] = __fadd_rn(v[i], __shfl_xor_sync(0xffffffffu, v[i], o));
    }
    warp_sums_step<G, P, S + 1>(v, lane);
  }
}

// The warp sums of G groups of P values each (v[g·P + p], G a power of two), every one in
// warp_sum's order, bit for bit. Where warp_sum adds a lane's value to its xor-partner's at each
// offset, here the two partners split the groups: each sends the half it drops and adds the
// partner's copy of the half it keeps (own value first, as warp_sum adds; x + y rounds as y + x).
// Each sum is built from the same pairs in the same order, and a multi-row epilogue's G·P sums
// cost (G/2 + G/4 + …) · P shuffles instead of 5 · G · P (16 rows x 4 columns of the staged
// lm_head: 62 against 320).
// After it: with G ≤ 32, lane l holds group l >> (5 - log2 G) in v[0..P), in 32/G lanes each;
// with G > 32, lane l holds groups l·(G/32) + j in v[j·P .. j·P + P).
template <int G, int P>
__device__ __forceinline__ void warp_sums_transposed(float (&v)[G * P], int lane) {
  static_assert((G & (G - 1)) == 0, "G must be a power of two");
  warp_sums_step<G, P, 0>(v, lane);
}

// silu(gate) · up.
__device__ __forceinline__ float swiglu(float gate, float up) {
  return __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate))), up);
}

// acc[r][t] += w_r · (x ⊙ gamma) over one step's 8 k of row t (the weight rows' 8 bf16 each in wv),
// and, normed, the 8 x² into sumsq[t]: every multi-row and one-row kernel's step, in one pinned
// order (a verify row must repeat a decode step's bits).
template <int kRows, bool kNormed, int kT, int kS>
__device__ __forceinline__ void accumulate_step(const uint4 (&wv)[kRows], float4 a, float4 b, float4 ga, float4 gb,
                                                float (&acc)[kRows][kT], float (&sumsq)[kS], int t) {
  float w[kRows][8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) warp_dot::widen8(wv[r], w[r]);
  if constexpr (kNormed) {
    sumsq[t] = __fadd_rn(sumsq[t], sumsq8(a, b));
    a = scale4(a, ga);
    b = scale4(b, gb);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r][t] = __fadd_rn(acc[r][t], dot8(w[r], a, b));
}

// What a warp does with X before and after its dot products (the decode step's fusions):
//   kPlain   y = x · w
//   kNorm    y = rmsnorm(x) · w, rmsnorm(x)[k] = x[k] · g[k] / sqrt(mean(x²) + eps). Each warp
//            walks the whole row of X for its dot product anyway, so it also sums x² and
//            scales its result at the end: the norm costs no kernel and no pass of its own.
//   kNormSwiGlu  the same input; the warp owns output column n of the FFN and computes two
//            weight rows, gate n and up n (rows n and n + N of W), then y = silu(gate) · up.
enum class Fuse { kPlain, kNorm, kNormSwiGlu };

// Activation rows a step of more than one row loads before its first product (skinny_kernel's
// step()): 8, fewer where more accumulators (more rows, or the SwiGLU warps' two weight rows)
// need the registers.
__host__ __device__ constexpr int max_x_batch(int rows, Fuse f) {
  return rows >= 32 ? 2 : f == Fuse::kNormSwiGlu || rows >= 16 ? 4 : 8;
}

// Rows T ≤ TC of X against one weight row (two for kNormSwiGlu) per warp. Each lane reads 8
// weights (16 bytes) per step, so a warp reads 512 contiguous bytes of its row; X rows come
// through L1 (every warp of the block reads the same ones). Past one row, at most 128 registers
// (two blocks an SM): a gate_up of SmolLM2 is 192 blocks, one wave on the H100's 132 SMs only
// with two a SM. (0: no minimum, the one-row kernels as they were.)
// X is not __restrict__, in this file's three kernels: a const __restrict__ pointer's loads
// compile to ld.global.nc, which the compiler treats as reading memory no one writes during the
// kernel, and ptxas moved two of the one-row normed kernel's activation loads (kPrefetch 8, the
// QKV projection of 2048-wide models) above pdl_wait's griddepcontrol.wait: they read the
// residual stream before the kernel before had written it. With PDL and CUDA graphs that made
// OLMoE's and Qwen1.5-MoE's greedy decoding differ from run to run
// (bench/results/moe_pdl_graph_nondeterminism_s16_h200_2026-12-01.json). Plain loads stay
// after the wait (its asm has a memory clobber).
template <int TC, Fuse F, int kPrefetch>
__global__ void __launch_bounds__(kWarps * 32, TC > 1 ? 2 : 0)
    skinny_kernel(const bf16_bits* __restrict__ W, int64_t N, int64_t K, const float* X, int64_t ld_x,
                  int T, float* __restrict__ Y, int64_t ldy, bool accumulate, const float* __restrict__ gamma,
                  float eps) {
  constexpr bool kNormed = F != Fuse::kPlain;
  constexpr int kRows = F == Fuse::kNormSwiGlu ? 2 : 1;  // weight rows per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (n >= N) return;
  // Row group g (blockIdx.y) takes rows [g·TC, g·TC + TC) of the T: launch()'s split of more
  // rows than TC over the blocks of one launch.
  if (TC > 1 && blockIdx.y > 0) {
    const int first = static_cast<int>(blockIdx.y) * TC;
    X += first * ld_x;
    Y += first * ldy;
    T -= first;
  }
  float acc[kRows][TC];
  float sumsq[kNormed ? TC : 1];
#pragma unroll
  for (int t = 0; t < TC; ++t) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r][t] = 0.0f;
    if constexpr (kNormed) sumsq[t] = 0.0f;
  }
  const uint4* wrow[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wrow[r] = reinterpret_cast<const uint4*>(W + (n + r * N) * K);
  // The first kPrefetch steps' weights (a step is 256 k) are loaded before waiting for the kernel
  // before this one (kernels/cuda/pdl.cuh): weights are never written, and their loads then
  // overlap its tail. At one row launch() takes 8 for 1024 < K <= 2048 (SmolLM2's down
  // projection, K 1536: all of it in flight before the wait), 1 past 2048 (long rows need the
  // registers for streaming), else 4 (K <= 1024 fits; more rows need the registers for their
  // accumulators).
  uint4 pre[kRows][kPrefetch];
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i) {
    const int64_t k8 = lane + 32 * i;
#pragma unroll
    for (int r = 0; r < kRows; ++r) pre[r][i] = k8 * 8 < K ? __ldg(wrow[r] + k8) : make_uint4(0, 0, 0, 0);
  }
  // gamma of those steps too: a weight.
  const float4 one = make_float4(1.f, 1.f, 1.f, 1.f);
  float4 gpre[kNormed ? kPrefetch : 1][2];
  if constexpr (kNormed) {
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      const int64_t k8 = lane + 32 * i;
      const float4* g = reinterpret_cast<const float4*>(gamma + k8 * 8);
      gpre[i][0] = k8 * 8 < K ? __ldg(g) : one;
      gpre[i][1] = k8 * 8 < K ? __ldg(g + 1) : one;
    }
  }
  pdl_trigger();
  pdl_wait();
  // acc[·][t] += w · (x ⊙ gamma) over one step's 8 k of row t; its x² into sumsq[t] (normed).
  auto accum = [&](int t, const uint4(&wv)[kRows], float4 a, float4 b, float4 ga, float4 gb) {
    accumulate_step<kRows, kNormed>(wv, a, b, ga, gb, acc, sumsq, t);
  };
  // One step of every row: the rows' activations (written by the kernel before: plain loads) are
  // all loaded before the first product, up to kXBatch rows at a time. Rows t >= T re-read row
  // T - 1 (an L1 hit) so that no load sits behind a branch: with `if (t < T)` around each row's
  // load and products, each load waited for the row before, one L2 round trip a row and step (a
  // 5-row verify's GEMV took 8.65 us against 2.88 at one row,
  // bench/results/cuda_verify_profile_smollm2_h100_2026-11-24.json). Their sums are never written.
  constexpr int kXBatch = TC < max_x_batch(TC, F) ? TC : max_x_batch(TC, F);
  auto step = [&](int64_t k8, const uint4(&wv)[kRows], float4 ga, float4 gb) {
    if constexpr (TC == 1) {  // the decode step's streaming loop, as it was
      if (0 < T) {
        // Written by the kernel before: not through the read-only path.
        const float4* xr = reinterpret_cast<const float4*>(X + k8 * 8);
        accum(0, wv, xr[0], xr[1], ga, gb);
      }
    } else {
#pragma unroll
      for (int t0 = 0; t0 < TC; t0 += kXBatch) {
        if (t0 < T) {
          float4 xa[kXBatch], xb[kXBatch];
          // j < TC - t0: the last batch is short where kXBatch does not divide TC (5 and 6
          // rows of the SwiGLU warps take 4 + 1 and 4 + 2).
#pragma unroll
          for (int j = 0; j < kXBatch && j < TC - t0; ++j) {
            const float4* xr = reinterpret_cast<const float4*>(X + min(t0 + j, T - 1) * ld_x + k8 * 8);
            xa[j] = xr[0];
            xb[j] = xr[1];
          }
#pragma unroll
          for (int j = 0; j < kXBatch && j < TC - t0; ++j) accum(t0 + j, wv, xa[j], xb[j], ga, gb);
        }
      }
    }
  };
  float y_old = 0.0f;  // one row, accumulate: Y's value, loaded with X
  if constexpr (TC == 1) {
    // Every activation of the prefetched steps in flight at once (each is an L2 round trip; one
    // after the other they were most of the kernel's time after the wait), Y's old value too.
    float4 xpre[kPrefetch][2];
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      const int64_t k8 = lane + 32 * i;
      const float4* xr = reinterpret_cast<const float4*>(X + k8 * 8);
      xpre[i][0] = k8 * 8 < K ? xr[0] : make_float4(0.f, 0.f, 0.f, 0.f);
      xpre[i][1] = k8 * 8 < K ? xr[1] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (accumulate && lane == 0) y_old = Y[n];
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      if ((lane + 32 * i) * 8 < K) {
        uint4 wv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) wv[r] = pre[r][i];
        accum(0, wv, xpre[i][0], xpre[i][1], kNormed ? gpre[i][0] : one, kNormed ? gpre[i][1] : one);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      const int64_t k8 = lane + 32 * i;
      if (k8 * 8 < K) {
        uint4 wv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) wv[r] = pre[r][i];
        step(k8, wv, kNormed ? gpre[i][0] : one, kNormed ? gpre[i][1] : one);
      }
    }
  }
  for (int64_t k8 = lane + 32 * kPrefetch; k8 * 8 < K; k8 += 32) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r] = __ldg(wrow[r] + k8);
    float4 ga = one, gb = one;
    if constexpr (kNormed) {
      const float4* g = reinterpret_cast<const float4*>(gamma + k8 * 8);
      ga = __ldg(g), gb = __ldg(g + 1);
    }
    step(k8, wv, ga, gb);
  }
  if constexpr (TC == 1) {
    float s = warp_sum(acc[0][0]);
    if constexpr (kNormed) {
      const float inv = inv_rms(sumsq[0], K, eps);
      s = __fmul_rn(s, inv);
      if constexpr (F == Fuse::kNormSwiGlu) s = swiglu(s, __fmul_rn(warp_sum(acc[kRows - 1][0]), inv));
    }
    if (lane == 0 && 0 < T) Y[n] = accumulate ? __fadd_rn(y_old, s) : s;
  } else {
    // Group t = row t (TC padded to a power of two): acc[0][t], the up row's acc[1][t] (SwiGLU)
    // and sumsq[t] (normed), summed over the warp at once; lane l then holds row l >> kShift.
    constexpr int kGroups = pow2_at_least(TC);
    constexpr int kPer = kRows + (kNormed ? 1 : 0);
    constexpr int kShift = 5 - log2_of(kGroups);
    float v[kGroups * kPer];
#pragma unroll
    for (int t = 0; t < kGroups; ++t) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) v[t * kPer + r] = t < TC ? acc[r][t] : 0.0f;
      if constexpr (kNormed) v[t * kPer + kRows] = t < TC ? sumsq[t] : 0.0f;
    }
    warp_sums_transposed<kGroups, kPer>(v, lane);
    float s = v[0];
    if constexpr (kNormed) {
      const float inv = inv_rms_of(v[kRows], K, eps);
      s = __fmul_rn(s, inv);
      if constexpr (F == Fuse::kNormSwiGlu) s = swiglu(s, __fmul_rn(v[kRows - 1], inv));
    }
    const int t = lane >> kShift;
    if ((lane & ((1 << kShift) - 1)) == 0 && t < T) {
      float* y = Y + t * ldy + n;
      *y = accumulate ? __fadd_rn(*y, s) : s;
    }
  }
}

// The one-row normed product (kNorm: RMSNorm + QKV; kNormSwiGlu: RMSNorm + gate_up + SwiGLU)
// with the row's x ⊙ gamma and per-step x² sums computed once a block, into shared memory, instead
// of by each of its 8 warps. In skinny_kernel<1, kNorm, 8> the prefetched gammas and activations
// (64 + 64 registers a lane) took the kernel to 175 registers, one block an SM: OLMoE's QKV
// (6144 x 2048) took 13.6 us fused against 7.3 us plain; past 2048 (Llama-8B's 4096, kPrefetch 1)
// each warp's gamma loads, scaling and x² sums doubled the loop's work (19.2 against 13.4 us).
// Staged: 6.6 and 14.1 us, Llama-8B's gate_up + SwiGLU 58.6 -> 54.1 (H200, one call,
// bench/results/skinny_norm_row_s17_h200_2026-12-02.json; fused_unstaged_us is the old kernel;
// the decode step: OLMoE 710-713 -> 807-808 tokens/s, Llama-8B 232 -> 244, the rmsnorm and MoE
// routing changes of the same commit included: moe_norm_route_s17_h200_2026-12-02.json). The values are
// skinny_kernel's exactly: stage[h·K8 + k8] holds scale4 of half h of step k8's 8 x, part[k8]
// its sumsq8, and lane l sums part[l + 32i] in i order as skinny_kernel's lane l does, so the bits
// are the same and a verify row still equals the decode step (tested:
// skinny_gemm_test's StagedNormRowEqualsTheRegisterKernelBitForBit).
template <Fuse F, int kPrefetch>
__global__ void __launch_bounds__(kWarps * 32, 2)
    skinny_norm_row_kernel(const bf16_bits* __restrict__ W, int64_t N, int64_t K, const float* X, float* __restrict__ Y,
                           const float* __restrict__ gamma, float eps) {
  static_assert(F != Fuse::kPlain);
  constexpr int kRows = F == Fuse::kNormSwiGlu ? 2 : 1;
  extern __shared__ float4 stage[];  // (2, K8) float4, then part (K8) f32
  const int64_t K8 = K / 8;
  float* part = reinterpret_cast<float*>(stage + 2 * K8);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool has_row = n < N;  // every warp stages; one past N then leaves
  const uint4* wrow[kRows];
  uint4 pre[kRows][kPrefetch];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wrow[r] = reinterpret_cast<const uint4*>(W + (has_row ? n + r * N : 0) * K);
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i) {
    const int64_t k8 = lane + 32 * i;
#pragma unroll
    for (int r = 0; r < kRows; ++r) pre[r][i] = has_row && k8 < K8 ? __ldg(wrow[r] + k8) : make_uint4(0, 0, 0, 0);
  }
  pdl_trigger();
  pdl_wait();
  for (int64_t k8 = threadIdx.x; k8 < K8; k8 += kWarps * 32) {
    const float4* xr = reinterpret_cast<const float4*>(X + k8 * 8);  // written by the kernel before
    const float4* g = reinterpret_cast<const float4*>(gamma + k8 * 8);
    const float4 a = xr[0], b = xr[1];
    part[k8] = sumsq8(a, b);
    stage[k8] = scale4(a, __ldg(g));
    stage[K8 + k8] = scale4(b, __ldg(g + 1));
  }
  __syncthreads();
  if (!has_row) return;
  float acc[kRows][1] = {}, sumsq[1] = {0.0f};
  auto step = [&](int64_t k8, const uint4(&wv)[kRows]) {
    float w[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r) warp_dot::widen8(wv[r], w[r]);
    sumsq[0] = __fadd_rn(sumsq[0], part[k8]);
    const float4 a = stage[k8], b = stage[K8 + k8];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r][0] = __fadd_rn(acc[r][0], dot8(w[r], a, b));
  };
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i) {
    if (lane + 32 * i < K8) {
      uint4 wv[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[r] = pre[r][i];
      step(lane + 32 * i, wv);
    }
  }
  for (int64_t k8 = lane + 32 * kPrefetch; k8 < K8; k8 += 32) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r] = __ldg(wrow[r] + k8);
    step(k8, wv);
  }
  float s = warp_sum(acc[0][0]);
  const float inv = inv_rms(sumsq[0], K, eps);
  s = __fmul_rn(s, inv);
  if constexpr (F == Fuse::kNormSwiGlu) s = swiglu(s, __fmul_rn(warp_sum(acc[kRows - 1][0]), inv));
  if (lane == 0) Y[n] = s;
}

// The multi-row kernel with X staged in shared memory (2..16 rows): the block copies X's T rows in
// once (cp.async, all in flight at once) instead of every warp re-reading them through L1 at every
// step, or, where T·K·4 bytes pass kStagedMaxBytes (Llama-8B's down projection, K 14336; 7-16 rows
// of K 4096), in chunks of C8 steps, each tile again, all warps meeting at a barrier before and
// after each chunk's copy. Each warp owns kOut output columns
// (kOut weight rows, 2·kOut for the SwiGLU warps), so each activation it reads serves kOut of
// them. Each (row t, output n) keeps skinny_kernel's arithmetic exactly: lane l takes k8 = l + 32i
// in order with the same 8-term expression, the same x² sum and gamma scaling, warp sums in
// warp_sum's pairs (warp_sums_transposed) and the same epilogue, so a verify row is bit-identical
// to the decode step's one-row kernel (tested:
// skinny_gemm_test's MultiRowKernelsMatchTheOneRowKernelBitForBit).
// Layout of the stage: row t's k8-th 8 values (k8 from the chunk's first) as two float4 at
// [(2t + h)·C8 + k8], h = 0, 1, so a warp's 16-byte reads of one half are contiguous (no bank
// conflicts).
constexpr int64_t kStagedMaxBytes = 100 * 1024;
constexpr int kStagedMaxRows = 16;

template <int TC, Fuse F, int kOut, bool kChunked>
__global__ void __launch_bounds__(kWarps * 32, kOut == 1 ? 2 : 1)
    skinny_staged_kernel(const bf16_bits* __restrict__ W, int64_t N, int64_t K, const float* X,
                         int64_t ld_x, int T, float* __restrict__ Y, int64_t ldy, bool accumulate,
                         const float* __restrict__ gamma, float eps, int64_t C8) {
  extern __shared__ float4 xs[];
  constexpr bool kNormed = F != Fuse::kPlain;
  constexpr int kPer = F == Fuse::kNormSwiGlu ? 2 : 1;  // weight rows per output column
  constexpr int kRows = kPer * kOut;                    // weight rows per warp: j = o·kPer + r
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t K8 = K / 8;
  // Tile i is kWarps·kOut output columns; the block takes tiles blockIdx.x, + gridDim.x, ...
  // (launch_staged_as sizes the grid to the resident blocks).
  const int64_t tiles = (N + kWarps * kOut - 1) / (kWarps * kOut);
  int64_t tile = blockIdx.x;
  int64_t n0 = 0;  // this warp's first column in `tile`
  const uint4* wrow[kRows];
  // Columns past N re-read column N - 1 (never written): no warp leaves before the barrier.
  auto point_at = [&](int64_t tl) {
    n0 = (tl * kWarps + warp) * kOut;
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      const int64_t n = n0 + o < N ? n0 + o : N - 1;
#pragma unroll
      for (int r = 0; r < kPer; ++r) wrow[o * kPer + r] = reinterpret_cast<const uint4*>(W + (n + r * N) * K);
    }
  };
  point_at(tile);
  float acc[kRows][TC];
  float sumsq[kNormed ? TC : 1];
  const float4 one = make_float4(1.f, 1.f, 1.f, 1.f);
  auto load_step = [&](int64_t k8, uint4(&wv)[kRows], float4(&g)[2]) {
    if (k8 < K8) {
#pragma unroll
      for (int j = 0; j < kRows; ++j) wv[j] = __ldg(wrow[j] + k8);
      if constexpr (kNormed) {
        const float4* gp = reinterpret_cast<const float4*>(gamma + k8 * 8);
        g[0] = __ldg(gp), g[1] = __ldg(gp + 1);
      }
    }
  };
  // The first kPre steps of a tile's weights (and gamma) are loaded ahead: the first tile's
  // before waiting for the kernel before this one (weights are never written), each next tile's
  // before this tile's epilogue. 4 steps of one weight row a warp, as skinny_kernel (all of K 576
  // or 1024), fewer as the warp's rows grow. Past them, each step's weights are loaded one step
  // ahead.
  constexpr int kPre = kRows >= 4 ? 1 : 4 / kRows;
  uint4 pre[kPre][kRows];
  float4 gpre[kPre][2];
  auto load_pre = [&]() {
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
      gpre[i][0] = one, gpre[i][1] = one;
      load_step(lane + 32 * i, pre[i], gpre[i]);
    }
  };
  load_pre();
  pdl_trigger();
  pdl_wait();
  // Stage X's steps [c0, c0 + C8) of every row (written by the kernel before: cp.async goes
  // through L2, not the read-only path): at once for all the block's tiles when the stage holds
  // all of K (C8 = K8), else chunk by chunk, each tile again.
  constexpr bool chunked = kChunked;  // then C8 < K8; else C8 = K8
  const int64_t S8 = chunked ? C8 : K8;  // the stage's steps a row (K8 known to the unchunked loop)
  auto stage = [&](int64_t c0) {
    const int64_t n8 = !chunked ? K8 : K8 - c0 < C8 ? K8 - c0 : C8;
    for (int t = 0; t < T; ++t) {
      for (int64_t c = threadIdx.x; c < 2 * n8; c += kWarps * 32) {
        float4* dst = xs + (2 * t + (c & 1)) * S8 + (c >> 1);
        const unsigned dst_s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst_s), "l"(X + t * ld_x + c0 * 8 + c * 4));
      }
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  };
  if constexpr (!chunked) stage(0);
  __syncthreads();
  // skinny_kernel's accum(): accumulate_step for kRows weight rows.
  auto accum = [&](int t, const uint4(&wv)[kRows], float4 a, float4 b, float4 ga, float4 gb) {
    accumulate_step<kRows, kNormed>(wv, a, b, ga, gb, acc, sumsq, t);
  };
  // One step's products for every row: rows past T repeat row T - 1 (never written).
  int64_t c0 = 0;  // the staged chunk's first step
  auto step = [&](int64_t k8, const uint4(&wv)[kRows], const float4(&g)[2]) {
    const int64_t i = k8 - c0;
#pragma unroll
    for (int t = 0; t < TC; ++t) {
      const int tt = t < T ? t : T - 1;
      accum(t, wv, xs[2 * tt * S8 + i], xs[(2 * tt + 1) * S8 + i], g[0], g[1]);
    }
  };
  // Every tile repeats the same arithmetic for its columns (x² sums included), so a column's
  // result does not depend on which block or iteration computed it.
  for (; tile < tiles; tile += gridDim.x) {
#pragma unroll
    for (int t = 0; t < TC; ++t) {
#pragma unroll
      for (int j = 0; j < kRows; ++j) acc[j][t] = 0.0f;
      if constexpr (kNormed) sumsq[t] = 0.0f;
    }
    uint4 wcur[kRows];
    float4 gcur[2] = {one, one};
    load_step(lane + 32 * kPre, wcur, gcur);  // in flight while the pre steps compute
    if constexpr (chunked) {  // every warp has finished with the last tile's chunk
      __syncthreads();
      stage(c0 = 0);
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
      if (lane + 32 * i < K8) step(lane + 32 * i, pre[i], gpre[i]);
    }
    if constexpr (!chunked) {
      for (int64_t k8 = lane + 32 * kPre; k8 < K8; k8 += 32) {
        uint4 wnext[kRows];
        float4 gnext[2] = {one, one};
        load_step(k8 + 32, wnext, gnext);
        step(k8, wcur, gcur);
#pragma unroll
        for (int j = 0; j < kRows; ++j) wcur[j] = wnext[j];
        gcur[0] = gnext[0], gcur[1] = gnext[1];
      }
    } else {
      // The same steps, base by base (a base's 32 steps are one per lane; C8 is a multiple of 32,
      // so a chunk starts at a base), every lane through every base for the barriers.
      for (int64_t base = 32 * kPre; base < K8; base += 32) {
        if (base - c0 == C8) {
          __syncthreads();
          stage(c0 = base);
          __syncthreads();
        }
        const int64_t k8 = base + lane;
        uint4 wnext[kRows];
        float4 gnext[2] = {one, one};
        load_step(k8 + 32, wnext, gnext);
        if (k8 < K8) step(k8, wcur, gcur);
#pragma unroll
        for (int j = 0; j < kRows; ++j) wcur[j] = wnext[j];
        gcur[0] = gnext[0], gcur[1] = gnext[1];
      }
    }
    const int64_t col = n0;
    if (tile + gridDim.x < tiles) {  // the next tile's first steps load under this epilogue
      point_at(tile + gridDim.x);
      load_pre();
    }
    // Group g = t·kOut + o (rows padded to a power of two) holds acc[o·kPer + r][t], summed over
    // the warp at once (warp_sums_transposed); the x² sums, one group a row, separately: the lane
    // that holds (t, o) then holds row t's too.
    constexpr int kRowGroups = pow2_at_least(TC);
    constexpr int kGroups = kRowGroups * kOut;
    float v[kGroups * kPer];
#pragma unroll
    for (int t = 0; t < kRowGroups; ++t) {
#pragma unroll
      for (int j = 0; j < kRows; ++j) v[t * kRows + j] = t < TC ? acc[j][t] : 0.0f;
    }
    warp_sums_transposed<kGroups, kPer>(v, lane);
    float inv = 1.0f;
    if constexpr (kNormed) {
      float sq[kRowGroups];
#pragma unroll
      for (int t = 0; t < kRowGroups; ++t) sq[t] = t < TC ? sumsq[t] : 0.0f;
      warp_sums_transposed<kRowGroups, 1>(sq, lane);
      inv = inv_rms_of(sq[0], K, eps);
    }
    // Lane l holds kHeld groups from l·kHeld (more groups than lanes), else group l >> kShift in
    // 2^kShift lanes, of which the first writes.
    constexpr int kHeld = kGroups > 32 ? kGroups / 32 : 1;
    constexpr int kShift = kGroups > 32 ? 0 : 5 - log2_of(kGroups);
#pragma unroll
    for (int h = 0; h < kHeld; ++h) {
      const int g = kGroups > 32 ? lane * kHeld + h : lane >> kShift;
      const int t = g / kOut, o = g % kOut;
      float s = v[h * kPer];
      if constexpr (kNormed) {
        s = __fmul_rn(s, inv);
        if constexpr (F == Fuse::kNormSwiGlu) s = swiglu(s, __fmul_rn(v[h * kPer + 1], inv));
      }
      if ((lane & ((1 << kShift) - 1)) == 0 && t < T && col + o < N) {
        float* y = Y + t * ldy + col + o;
        *y = accumulate ? __fadd_rn(*y, s) : s;
      }
    }
  }
}

// 0: outputs per warp chosen by shape (staged_outputs_per_warp); else forced (tests, benchmarks).
int g_outputs_per_warp = 0;

// Output columns per warp of the staged kernel: the most its registers allow (4, 2 for the SwiGLU
// warps' two weight rows), since the blocks loop over the tiles whatever their count: more columns
// a warp, fewer activation reads per weight (bench/results/cuda_verify_rows_s11_h100_2026-11-25.json
// times 1, 2 and 4 on the lm_head).
int staged_outputs_per_warp(Fuse f) {
  const int most = f == Fuse::kNormSwiGlu ? 2 : 4;
  if (g_outputs_per_warp > 0) return g_outputs_per_warp < most ? g_outputs_per_warp : most;
  return most;
}

// The chunked stage's kernel only for the by-shape column count (staged_outputs_per_warp's
// default): the others stay as they were (a second loop in them cost registers: 128 -> 162 at
// 3 rows of 4 columns, one block an SM where two fit).
template <Fuse F, int TC, int kOut, bool kChunked>
bool launch_staged_kernel(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int T, float* Y,
                          int64_t ldy, bool accumulate, const float* gamma, float eps, int64_t C8, cudaStream_t stream) {
  // Past 48 KB of dynamic shared memory a kernel must ask for it, once.
  static const bool allowed =
      cudaFuncSetAttribute(skinny_staged_kernel<TC, F, kOut, kChunked>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kStagedMaxBytes)) == cudaSuccess;
  if (!allowed) return false;
  const int64_t per_block = int64_t{kWarps} * kOut;
  const int64_t tiles = (N + per_block - 1) / per_block;
  const auto smem = static_cast<size_t>(T * C8 * 32);
  // One wave of blocks that loop over the tiles: each stages X once and keeps weight loads in
  // flight across its tiles. One block a tile (the kernel before) ran SmolLM2's lm_head in ~11
  // short waves at one block an SM, each paying the X staging and a DRAM round trip per step.
  int device = 0, sms = 0, resident = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, skinny_staged_kernel<TC, F, kOut, kChunked>, kWarps * 32,
                                                    smem) != cudaSuccess ||
      resident < 1) {
    return false;
  }
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{sms} * resident));
  launch_pdl(skinny_staged_kernel<TC, F, kOut, kChunked>, dim3(blocks), dim3(kWarps * 32), smem, stream, W, N, K, X,
             ld_x, T, Y, ldy, accumulate, gamma, eps, C8);
  return true;
}

template <Fuse F, int TC, int kOut>
bool launch_staged_as(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int T, float* Y,
                      int64_t ldy, bool accumulate, const float* gamma, float eps, cudaStream_t stream) {
  // X's rows whole in the stage where they fit, else chunks of C8 steps (32 bytes a row and step),
  // a multiple of 32 steps (a chunk starts where every lane starts a step) and at least the 128
  // the kernel's first steps take before its loop.
  const int64_t K8 = K / 8;
  if (T * K * 4 <= kStagedMaxBytes) {
    return launch_staged_kernel<F, TC, kOut, false>(W, N, K, X, ld_x, T, Y, ldy, accumulate, gamma, eps, K8, stream);
  }
  if constexpr (kOut == (F == Fuse::kNormSwiGlu ? 2 : 4)) {
    const int64_t C8 = kStagedMaxBytes / (32 * T) / 32 * 32;
    if (C8 < 128) return false;
    return launch_staged_kernel<F, TC, kOut, true>(W, N, K, X, ld_x, T, Y, ldy, accumulate, gamma, eps, C8, stream);
  } else {
    return false;
  }
}

template <Fuse F, int TC>
bool launch_staged(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int T, float* Y, int64_t ldy,
                   bool accumulate, const float* gamma, float eps, cudaStream_t stream) {
  const int o = staged_outputs_per_warp(F);
  if constexpr (F != Fuse::kNormSwiGlu) {
    if (o == 4) return launch_staged_as<F, TC, 4>(W, N, K, X, ld_x, T, Y, ldy, accumulate, gamma, eps, stream);
  }
  if (o == 2) return launch_staged_as<F, TC, 2>(W, N, K, X, ld_x, T, Y, ldy, accumulate, gamma, eps, stream);
  return launch_staged_as<F, TC, 1>(W, N, K, X, ld_x, T, Y, ldy, accumulate, gamma, eps, stream);
}

// Whether a pass of rows takes the staged kernel: 2..16 rows (X in chunks where it does not fit
// the stage whole). By shape (outputs per warp 0), rows of at most 2048 only on wide matrices
// whose X fits whole (N ≥ 8448,
// 2 waves of 32-column blocks on the H100): on SmolLM2's lm_head (49152 x 576) at 4 outputs a warp the RMSNorm-fused product
// took 60 / 79 / 103 / 140 us at 5 / 8 / 11 / 16 rows against 79 / 117 / 191 / 217 with X
// through L1 (a quarter of the activation reads), but the layers' small matrices (576-3072
// columns) ran slower staged at every row count (e.g. gate_up at 2 rows 3.1 us → 6.2-10.8):
// there the register kernel's short latency wins (bench/results/cuda_verify_rows_s10_*). Since
// the kernel loops over tiles in one wave (session 11), the plain lm_head (the backend's, with
// RMSNorm as its own kernel) pays from 3 rows: 28.5 / 33.8 us at 3 / 4 rows against 31.7 / 46.0
// through L1; at 2 rows L1 still wins, 24.4 against 27.4 (bench/results/skinny_lm_head_s11_*).
// Rows of 2049..4096 (Llama-8B's and Mixtral's attention, Llama's gate_up and lm_head) from 3
// rows on every matrix: at 3-6 rows the register kernel re-read X through L1 for each output
// column and streamed at 1.2-2.6 TB/s of the H200's 4.3; staged, on the H200, qkv + RMSNorm at 4 / 6 rows 39.6 /
// 52.2 -> 29.6 / 35.0 us, gate_up + SwiGLU 102.2 / 149.6 -> 86.7 / 98.0, the lm_head 610 /
// 828 -> 334 / 347 (bench/results/skinny_staged_k4096_s17_h200_2026-12-02.json; at 2 rows the
// plain qkv was slower staged, 20.8 -> 26.0). Longer rows and more of them take X in chunks from
// 5 rows: the down projection (K 14336) and 7-8 rows of the others. Whole 8B verifies against the
// kernels before, H200: 5 / 6 / 7 / 8 / 9 rows 8.78 / 8.95 / 14.45 / 14.56 / 6.30 ->
// 7.65 / 8.05 / 10.80 / 11.31 / 5.19 ms (9 rows: the exact lm_head's 9 rows), but 3 rows
// 6.69 -> 6.95 with the down projection chunked, so below 5 rows it keeps the register kernel
// (bench/results/skinny_staged_chunks_s17_h200_2026-12-02.json).
bool staged_fits(int64_t N, int64_t K, int rows) {
  if (g_outputs_per_warp < 0 || rows < 2 || rows > kStagedMaxRows) return false;
  if (g_outputs_per_warp > 0) return true;  // forced: X in chunks where it does not fit whole
  const bool whole = rows * K * 4 <= kStagedMaxBytes;
  if (K > 2048) return rows >= (whole ? 3 : 5);
  return rows >= 3 && N >= 8448 && whole;
}

// Whether one-row normed products take skinny_norm_row_kernel (set_skinny_norm_row_staged).
bool g_norm_row_staged = true;

// skinny_norm_row_kernel where its stage fits 48 KB of shared memory (K ≤ 10920; RMSNorm is over
// a model's dim), with 4 weight steps loaded before the wait up to K 1024 and 8 past it: the
// stage frees the registers skinny_kernel spent on prefetched activations and gammas.
template <Fuse F>
bool launch_norm_row(const bf16_bits* W, int64_t N, int64_t K, const float* X, float* Y, const float* gamma, float eps,
                     cudaStream_t stream) {
  const int64_t K8 = K / 8;
  const auto smem = static_cast<size_t>(K8 * (2 * sizeof(float4) + sizeof(float)));
  if (!g_norm_row_staged || smem > 48 * 1024) return false;
  const auto blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  if (K <= 4 * 256) {
    launch_pdl(skinny_norm_row_kernel<F, 4>, dim3(blocks), dim3(kWarps * 32), smem, stream, W, N, K, X, Y, gamma, eps);
  } else {
    launch_pdl(skinny_norm_row_kernel<F, 8>, dim3(blocks), dim3(kWarps * 32), smem, stream, W, N, K, X, Y, gamma, eps);
  }
  return true;
}

template <Fuse F, int TC>
void launch(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int T, float* Y, int64_t ldy,
            bool accumulate, const float* gamma, float eps, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  const unsigned groups = static_cast<unsigned>((T + TC - 1) / TC);  // row groups (skinny_kernel)
  if constexpr (TC == 1 && F != Fuse::kPlain) {
    if (!accumulate && launch_norm_row<F>(W, N, K, X, Y, gamma, eps, stream)) return;
  }
  if constexpr (TC == 1) {
    // 8 steps where they take the whole row (1024 < K <= 2048), 4 up to 1024, and 1 past 2048: on
    // long rows (Llama-8B's 4096 and 14336) the prefetched weights, gammas and activations cost
    // the streaming loop its occupancy (112 registers at 4 steps against 39 at 1 for the SwiGLU
    // warps): synthetic Llama-3.1-8B decode fell from 160 to 118 tokens/s at 8 steps and 152 at 4
    // (bench/results/cuda_e2e_s7_h100_2026-11-24.json, skinny_prefetch_8b_h100_2026-11-24.json).
    if (K > 4 * 256 && K <= 8 * 256) {
      launch_pdl(skinny_kernel<TC, F, 8>, dim3(blocks), dim3(kWarps * 32), 0, stream, W, N, K, X, ld_x, T, Y, ldy,
                 accumulate, gamma, eps);
      return;
    }
    if (K > 8 * 256) {
      launch_pdl(skinny_kernel<TC, F, 1>, dim3(blocks), dim3(kWarps * 32), 0, stream, W, N, K, X, ld_x, T, Y, ldy,
                 accumulate, gamma, eps);
      return;
    }
  }
  // 2 steps for 16 rows of the SwiGLU warps' two weight rows and for 32 rows, or their
  // accumulators spill under the 128 registers of two blocks an SM.
  constexpr int kSteps = (TC >= 16 && F == Fuse::kNormSwiGlu) || TC >= 32 ? 2 : 4;
  launch_pdl(skinny_kernel<TC, F, kSteps>, dim3(blocks, groups), dim3(kWarps * 32), 0, stream, W, N, K, X, ld_x, T, Y,
             ldy, accumulate, gamma, eps);
}

// 0: row groups chosen by row count (register_row_group); -1 none; else forced (4, 8).
int g_row_group = 0;

// Rows per block of the register kernel, 0 for all of them in one block. Past 4 rows each step's
// X loads come in more batches (4 rows each at 16, for the registers), one L1/L2 round trip each,
// and SmolLM2's small matrices fill a fraction of the SMs (72-192 blocks of 8 columns on 132):
// row groups in one launch run side by side, each weight row read once a group (the repeats from
// L2) with a shorter chain each. Measured (bench_skinny_gemm, us, all rows / groups of 4 / of 8):
// down (72 blocks) at 8 rows 8.0 / 4.6 / 8.1, 16 rows 14.9 / 7.4 / 8.3; qkv (120) at 8 rows with
// RMSNorm 6.1 / 3.7 / 6.0, 16 rows 10.3 / 6.7 / 6.1; gate_up + SwiGLU (192) at 8 rows
// 7.3 / 8.0 / 7.2, 12 rows 11.9 / 10.6 / 12.4 (bench/results/cuda_verify_rows_s10_h100_2026-11-24.json).
// Grids past 288 blocks (over a wave at two blocks an SM: Llama-8B's matrices) are not split.
int register_row_group(int rows, int64_t blocks) {
  if (g_row_group < 0) return 0;
  if (g_row_group > 0) return rows > g_row_group ? g_row_group : 0;
  if (rows <= 4 || blocks > 288) return 0;
  if (rows <= 8) return blocks <= 144 ? 4 : 0;
  if (blocks * ((rows + 3) / 4) <= 288) return 4;
  return blocks <= 144 ? 8 : 4;
}

template <Fuse F>
bool run(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y, int64_t ldy,
         bool accumulate, const float* gamma, float eps, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(W) % 16 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(gamma) % 16 == 0;
  if (T < 1 || T > kSkinnyMaxRows || N < 1 || K < 8 || K % 8 != 0 || ld_x % 4 != 0 || !aligned) return false;
  // Up to 32 rows per pass over the weights: 32 accumulators per lane still fit in registers
  // (16 for the two-row SwiGLU warps).
  const int64_t pass = F == Fuse::kNormSwiGlu ? 16 : 32;
  for (int64_t t0 = 0; t0 < T; t0 += pass) {
    const int rows = static_cast<int>(T - t0 < pass ? T - t0 : pass);
    const float* x = X + t0 * ld_x;
    float* y = Y + t0 * ldy;
    // Every row count of a short verify (2..6: a chain of 1..5 drafted tokens) has its own
    // kernel: a kernel for more rows does the products of the rows past T too.
    if (staged_fits(N, K, rows)) {
      bool launched = false;
      if (rows == 2) {
        launched = launch_staged<F, 2>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      } else if (rows == 3) {
        launched = launch_staged<F, 3>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      } else if (rows == 4) {
        launched = launch_staged<F, 4>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      } else if (rows == 5) {
        launched = launch_staged<F, 5>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      } else if (rows == 6) {
        launched = launch_staged<F, 6>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      } else if (rows <= 8) {
        launched = launch_staged<F, 8>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      } else if (rows <= 12) {
        launched = launch_staged<F, 12>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      } else {
        launched = launch_staged<F, 16>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
      }
      if (launched) continue;
    }
    if (const int group = register_row_group(rows, (N + kWarps - 1) / kWarps); group == 8) {
      launch<F, 8>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (group == 4) {
      launch<F, 4>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows == 1) {
      launch<F, 1>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows == 2) {
      launch<F, 2>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows == 3) {
      launch<F, 3>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows == 4) {
      launch<F, 4>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows == 5) {
      launch<F, 5>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows == 6) {
      launch<F, 6>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows <= 8) {
      launch<F, 8>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if (rows <= 16) {
      launch<F, 16>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    } else if constexpr (F != Fuse::kNormSwiGlu) {
      launch<F, 32>(W, N, K, x, ld_x, rows, y, ldy, accumulate, gamma, eps, stream);
    }
  }
  return true;
}

// Tensor-core path for 1..16 rows. A block owns 16 output columns (weight rows n0..n0+15) and
// splits K over its kTcWarps warps; each warp multiplies 16x16 bf16 tiles, W straight from
// global memory as matrix_a (row-major, ld K) and X from a per-warp shared tile as matrix_b
// (column-major: element (k, t) = X[t][k]); rows t ≥ T are zeros. X is split into two bf16
// halves, hi = bf16(x) and lo = bf16(x − hi), multiplied one after the other into the same f32
// accumulator: x is then carried to ~16 significant bits instead of bf16's 8, which is what
// keeps a prefill or tree verify as close to the CPU as a decode step (rounding X to bf16 for
// every projection cost up to 3e-2 relative L2 in SmolLM2's logits). The weights are read once
// whatever T is, so 16 rows cost about what one does. The warps' f32 partial tiles are summed
// in shared memory.
constexpr int kTcWarps = 8;
constexpr int kTile = 16;

// F as for the f32 kernel: kNorm multiplies X by gamma as it converts it, sums x² per row (each
// warp over its k-tiles, the warps' sums added in shared memory) and scales the result by the
// row's 1/rms; kNormSwiGlu also keeps a second accumulator for the up rows (n + N) and writes
// silu(gate) · up. Launched with programmatic dependent launch: no weight is read early here
// (the tiles go straight into fragments), but the launch overlaps the kernel before.
template <Fuse F>
__global__ void __launch_bounds__(kTcWarps * 32)
    skinny_tc_kernel(const bf16_bits* __restrict__ W, int64_t N, int64_t K, const float* X, int64_t ld_x,
                     int T, float* __restrict__ Y, int64_t ldy, bool accumulate, const float* __restrict__ gamma,
                     float eps) {
  using namespace nvcuda;
  constexpr bool kNormed = F != Fuse::kPlain;
  constexpr int kAcc = F == Fuse::kNormSwiGlu ? 2 : 1;
  __shared__ __align__(32) __nv_bfloat16 x_hi[kTcWarps][kTile * kTile];  // (t, k) = [t * 16 + k]
  __shared__ __align__(32) __nv_bfloat16 x_lo[kTcWarps][kTile * kTile];
  __shared__ __align__(32) float partial[kAcc][kTcWarps][kTile * kTile];  // (n, t) = [n * 16 + t]
  __shared__ float sumsq[kTcWarps][kTile];
  pdl_trigger();
  pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> acc[kAcc];
#pragma unroll
  for (int r = 0; r < kAcc; ++r) wmma::fill_fragment(acc[r], 0.0f);
  wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __nv_bfloat16, wmma::col_major> b_hi, b_lo;
  const auto* w = reinterpret_cast<const __nv_bfloat16*>(W);
  // Each lane converts 8 of the tile's 256 values: row t = lane / 2, columns (lane % 2) * 8 + 0..7.
  const int t = lane >> 1, c0 = (lane & 1) * 8;
  float ss = 0.0f;  // this lane's share of row t's sum of squares
  // The weight fragments of the warp's next k-tile are loaded before this one's products, so a
  // load is always in flight (one at a time, each load's latency was paid in turn).
  wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major> next[kAcc];
  const int64_t k_first = static_cast<int64_t>(warp) * kTile;
  if (k_first < K) {
#pragma unroll
    for (int r = 0; r < kAcc; ++r)
      wmma::load_matrix_sync(next[r], w + (n0 + r * N) * K + k_first, static_cast<unsigned>(K));
  }
  for (int64_t k = k_first; k < K; k += kTcWarps * kTile) {
    __nv_bfloat16* hi = x_hi[warp] + t * kTile + c0;
    __nv_bfloat16* lo = x_lo[warp] + t * kTile + c0;
    float v[8] = {};
    if (t < T) {
      const float4* xr = reinterpret_cast<const float4*>(X + t * ld_x + k + c0);
      const float4 p = xr[0], q = xr[1];  // written by the kernel before: not the read-only path
      v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w, v[4] = q.x, v[5] = q.y, v[6] = q.z, v[7] = q.w;
      if constexpr (kNormed) {
        const float4* g = reinterpret_cast<const float4*>(gamma + k + c0);
        const float4 ga = __ldg(g), gb = __ldg(g + 1);
        const float gs[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          ss += v[i] * v[i];
          v[i] *= gs[i];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      hi[i] = __float2bfloat16_rn(v[i]);
      lo[i] = __float2bfloat16_rn(v[i] - __bfloat162float(hi[i]));
    }
    __syncwarp();
    wmma::load_matrix_sync(b_hi, x_hi[warp], kTile);
    wmma::load_matrix_sync(b_lo, x_lo[warp], kTile);
    wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major> cur[kAcc];
#pragma unroll
    for (int r = 0; r < kAcc; ++r) cur[r] = next[r];
    if (k + kTcWarps * kTile < K) {
#pragma unroll
      for (int r = 0; r < kAcc; ++r) {
        wmma::load_matrix_sync(next[r], w + (n0 + r * N) * K + k + kTcWarps * kTile, static_cast<unsigned>(K));
      }
    }
#pragma unroll
    for (int r = 0; r < kAcc; ++r) {
      wmma::mma_sync(acc[r], cur[r], b_hi, acc[r]);
      wmma::mma_sync(acc[r], cur[r], b_lo, acc[r]);
    }
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < kAcc; ++r) wmma::store_matrix_sync(partial[r][warp], acc[r], kTile, wmma::mem_row_major);
  if constexpr (kNormed) {
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);  // the two lanes of row t
    if ((lane & 1) == 0) sumsq[warp][t] = ss;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
    const int n = i / kTile, tt = i % kTile;
    if (tt >= T || n0 + n >= N) continue;
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kTcWarps; ++v) sum += partial[0][v][i];
    if constexpr (kNormed) {
      float row_ss = 0.0f;
#pragma unroll
      for (int v = 0; v < kTcWarps; ++v) row_ss += sumsq[v][tt];
      const float inv = rsqrtf(row_ss / static_cast<float>(K) + eps);
      sum *= inv;
      if constexpr (F == Fuse::kNormSwiGlu) {
        float up = 0.0f;
#pragma unroll
        for (int v = 0; v < kTcWarps; ++v) up += partial[kAcc - 1][v][i];
        sum = sum / (1.0f + expf(-sum)) * (up * inv);
      }
    }
    float* y = Y + tt * ldy + n0 + n;
    *y = accumulate ? *y + sum : sum;
  }
}

template <Fuse F>
bool run_tc(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y, int64_t ldy,
            bool accumulate, const float* gamma, float eps, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(W) % 32 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(gamma) % 16 == 0;
  if (T < 1 || T > kSkinnyTcMaxRows || N < kTile || N % kTile != 0 || K < kTile || K % kTile != 0 || ld_x % 4 != 0 ||
      !aligned) {
    return false;
  }
  launch_pdl(skinny_tc_kernel<F>, dim3(static_cast<unsigned>(N / kTile)), dim3(kTcWarps * 32), 0, stream, W, N, K, X,
             ld_x, static_cast<int>(T), Y, ldy, accumulate, gamma, eps);
  return true;
}

// The three conversions below run under programmatic launch (pdl.cuh): their inputs come from the
// kernel before, so they are not `const __restrict__`, and they wait before the first load.
__global__ void f32_to_bf16_split_kernel(const float* in, int64_t n, bf16_bits* hi, bf16_bits* lo) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(in[i]);
    hi[i] = __bfloat16_as_ushort(h);
    lo[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i] - __bfloat162float(h)));
  }
}

__global__ void add_split_halves_kernel(const float* y2, int64_t T, int64_t N, float* Y, int64_t ldy, bool accumulate) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < T * N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / N, n = i % N;
    const float sum = y2[i] + y2[T * N + i];
    float* y = Y + t * ldy + n;
    *y = accumulate ? *y + sum : sum;
  }
}

// A grid-stride launch over n elements: 256 threads a block, at most 65535 blocks.
unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

__global__ void f32_to_bf16_kernel(const float* in, int64_t n, bf16_bits* out) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
}

}  // namespace

void set_skinny_outputs_per_warp(int outputs) { g_outputs_per_warp = outputs; }
void set_skinny_row_group(int rows) { g_row_group = rows; }
void set_skinny_norm_row_staged(bool on) { g_norm_row_staged = on; }

bool skinny_gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y,
                 int64_t ldy, bool accumulate, cudaStream_t stream) {
  return run<Fuse::kPlain>(W, N, K, X, ld_x, T, Y, ldy, accumulate, nullptr, 0.0f, stream);
}

bool skinny_gemm_norm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T,
                      const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream) {
  if (gamma == nullptr) return false;
  return run<Fuse::kNorm>(W, N, K, X, ld_x, T, Y, ldy, false, gamma, eps, stream);
}

bool skinny_gemm_norm_swiglu(const bf16_bits* W, int64_t ffn, int64_t K, const float* X, int64_t ld_x, int64_t T,
                             const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream) {
  if (gamma == nullptr) return false;
  return run<Fuse::kNormSwiGlu>(W, ffn, K, X, ld_x, T, Y, ldy, false, gamma, eps, stream);
}

bool skinny_gemm_tc(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y,
                    int64_t ldy, bool accumulate, cudaStream_t stream) {
  return run_tc<Fuse::kPlain>(W, N, K, X, ld_x, T, Y, ldy, accumulate, nullptr, 0.0f, stream);
}

bool skinny_gemm_tc_norm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T,
                         const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream) {
  if (gamma == nullptr) return false;
  return run_tc<Fuse::kNorm>(W, N, K, X, ld_x, T, Y, ldy, false, gamma, eps, stream);
}

bool skinny_gemm_tc_norm_swiglu(const bf16_bits* W, int64_t ffn, int64_t K, const float* X, int64_t ld_x, int64_t T,
                                const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream) {
  if (gamma == nullptr) return false;
  return run_tc<Fuse::kNormSwiGlu>(W, ffn, K, X, ld_x, T, Y, ldy, false, gamma, eps, stream);
}

void add_split_halves(const float* y2, int64_t T, int64_t N, float* Y, int64_t ldy, bool accumulate,
                      cudaStream_t stream) {
  if (T <= 0 || N <= 0) return;
  launch_pdl(add_split_halves_kernel, dim3(grid_for(T * N)), dim3(256), 0, stream, y2, T, N, Y, ldy, accumulate);
}

void f32_to_bf16_split(const float* in, int64_t n, bf16_bits* hi, bf16_bits* lo, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(f32_to_bf16_split_kernel, dim3(grid_for(n)), dim3(256), 0, stream, in, n, hi, lo);
}

void f32_to_bf16(const float* in, int64_t n, bf16_bits* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(f32_to_bf16_kernel, dim3(grid_for(n)), dim3(256), 0, stream, in, n, out);
}

}  // namespace specula::cuda
