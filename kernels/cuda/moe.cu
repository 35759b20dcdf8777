#include "kernels/cuda/moe.h"

#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <type_traits>

#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/warp_dot.cuh"

namespace specula::cuda {
namespace {

using warp_dot::dot_rows_streamed;
using warp_dot::warp_sum;

constexpr int kWarps = 8;  // one output channel or column per warp
constexpr int kBucketThreads = 1024;
static_assert(kMoeMaxExperts <= kBucketThreads && kMoeMaxTokens * kMoeMaxTopK <= kBucketThreads);

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// Warps of route_bucket_kernel that route at once, each with E floats of probabilities in
// shared memory (6144 of them: 32 warps up to 192 experts, 6 at kMoeMaxExperts).
constexpr int kRouteFloats = 6144;
static_assert(kRouteFloats >= kMoeMaxExperts);

// Token t's routing by one warp: route_token and skip_count of engine/model/moe.cpp, and the
// shared expert's sigmoid gate. The softmax follows the CPU's: max, exp(x − max), the sum in
// double in index order, one f32 reciprocal. Top-k: k rounds of a warp argmax (larger p, then
// lower id), the winner marked taken (p ≥ 0, so −1 is below every candidate). p: E floats of
// the warp's; chosen: kMoeMaxTopK. ids_t and skipped_t: the routing, also kept in shared memory
// for the bucketing after it.
__device__ void route_token(int t, int lane, const float* logits, int E, int k, bool normalize, const float* xn,
                            int64_t ld_x, int64_t dim, const float* __restrict__ shared_gate,
                            const double* __restrict__ thresholds, int n_thresholds, int budget, float* p,
                            float* chosen, int32_t* ids, float* weights, int32_t* skipped, float* shared_scale,
                            int* ids_t, int* skipped_t) {
  const float* l = logits + static_cast<int64_t>(t) * E;
  float m = -INFINITY;
  for (int i = lane; i < E; i += 32) m = fmaxf(m, l[i]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const bool any = m > -INFINITY;  // the CPU's softmax gives all zeros otherwise
  for (int i = lane; i < E; i += 32) p[i] = any ? expf(l[i] - m) : 0.0f;
  __syncwarp();
  if (lane == 0 && any) {
    double sum = 0.0;
    for (int i = 0; i < E; ++i) sum += p[i];
    const float inv = static_cast<float>(1.0 / sum);
    for (int i = 0; i < E; ++i) p[i] *= inv;
  }
  __syncwarp();
  for (int r = 0; r < k; ++r) {
    float best = -2.0f;
    int best_id = E;
    for (int i = lane; i < E; i += 32) {
      if (p[i] > best) best = p[i], best_id = i;  // ascending i: the first of equals stays
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
      if (ob > best || (ob == best && oi < best_id)) best = ob, best_id = oi;
    }
    // Every lane's reads of p this round come before lane 0 marks the winner. The shuffles
    // order them already (lane 0's write depends on every lane's loads), but racecheck does not
    // follow a shuffle: without this it reported each round as a hazard.
    __syncwarp();
    if (lane == 0) {
      chosen[r] = best;
      ids[t * k + r] = ids_t[r] = best_id;
      p[best_id] = -1.0f;
    }
    __syncwarp();
  }
  if (lane == 0) {
    float w[kMoeMaxTopK];
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += (w[i] = chosen[i]);
    for (int i = 0; i < k; ++i) {
      if (normalize) w[i] /= sum;
      weights[t * k + i] = w[i];
    }
    // skip_count: the largest s ≤ min(budget, k − 1, n_thresholds) with r_s < tau_s.
    int s_taken = 0;
    const int most = min(min(budget, k - 1), n_thresholds);
    for (int s = most; s >= 1 && s_taken == 0; --s) {
      double skip = 0.0, kept = 0.0;
      for (int i = 0; i < k; ++i) (i >= k - s ? skip : kept) += w[i];
      const double ratio = kept > 0.0 ? skip / kept : INFINITY;
      if (ratio < thresholds[s - 1]) s_taken = s;
    }
    skipped[t] = *skipped_t = s_taken;
  }
  if (shared_gate != nullptr) {
    const float* x = xn + t * ld_x;
    float g = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) g += shared_gate[i] * x[i];
    g = warp_sum(g);
    if (lane == 0) shared_scale[t] = 1.0f / (1.0f + expf(-g));
  }
}

// One block routes the T tokens (route_token, min(32, kRouteFloats / E) warps at a time) and
// then buckets the kept (token, expert) pairs by expert: rows per expert (integer shared
// atomics: the counts are order-free), each expert's first row and the active list (block
// scans), then each pair's row = its expert's first row + the kept pairs of that expert before
// it (pair order = token order, as the CPU runs an expert's tokens). Routing and bucketing were
// two kernels, 5.4 and 2.9 us a layer of an OLMoE decode step
// (bench/results/moe_profile_olmoe_s16_h200_2026-12-01.json); one block does both, with the
// routing handed over in shared memory. logits and xn are written by the kernels before: not
// __restrict__ (kernels/cuda/pdl.cuh).
__global__ void __launch_bounds__(kBucketThreads)
    route_bucket_kernel(const float* logits, int T, int E, int k, bool normalize, const float* xn, int64_t ld_x,
                        int64_t dim, const float* __restrict__ shared_gate, const double* __restrict__ thresholds,
                        int n_thresholds, int budget, int32_t* __restrict__ ids, float* __restrict__ weights,
                        int32_t* __restrict__ skipped, float* __restrict__ shared_scale,
                        int32_t* __restrict__ expert_rows, int32_t* __restrict__ expert_first,
                        int32_t* __restrict__ active, int32_t* __restrict__ n_active, int32_t* __restrict__ pair_token,
                        int32_t* __restrict__ pair_row) {
  using Scan = cub::BlockScan<int, kBucketThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ float p[kRouteFloats];
  __shared__ float chosen[kBucketThreads / 32][kMoeMaxTopK];
  __shared__ int routed[kMoeMaxTokens * kMoeMaxTopK];
  __shared__ int routed_skipped[kMoeMaxTokens];
  __shared__ int rows[kMoeMaxExperts];
  __shared__ int first[kMoeMaxExperts];
  __shared__ int pair_expert[kMoeMaxTokens * kMoeMaxTopK];  // −1: skipped
  pdl_trigger();
  pdl_wait();  // the router logits
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, P = T * k;
  const int routers = min(kBucketThreads / 32, kRouteFloats / E);
  if (warp < routers) {
    for (int t = warp; t < T; t += routers) {
      route_token(t, lane, logits, E, k, normalize, xn, ld_x, dim, shared_gate, thresholds, n_thresholds, budget,
                  p + warp * E, chosen[warp], ids, weights, skipped, shared_scale, routed + t * k, routed_skipped + t);
    }
  }
  if (tid < E) rows[tid] = 0;
  __syncthreads();
  if (tid < P) {
    const int t = tid / k, i = tid % k;
    const int e = i < k - routed_skipped[t] ? routed[tid] : -1;
    pair_expert[tid] = e;
    if (e >= 0) atomicAdd(&rows[e], 1);
  }
  __syncthreads();
  const int my_rows = tid < E ? rows[tid] : 0;
  int my_first = 0, my_slot = 0, total_active = 0, total_rows = 0;
  Scan(scan_storage).ExclusiveSum(my_rows, my_first, total_rows);
  __syncthreads();
  Scan(scan_storage).ExclusiveSum(my_rows > 0 ? 1 : 0, my_slot, total_active);
  if (tid < E) {
    first[tid] = my_first;
    expert_rows[tid] = my_rows;
    expert_first[tid] = my_first;
    if (my_rows > 0) active[my_slot] = tid;
  }
  if (tid == 0) *n_active = total_active;
  __syncthreads();
  if (tid < P) {
    const int e = pair_expert[tid];
    if (e < 0) {
      pair_row[tid] = -1;
    } else {
      int rank = 0;
      for (int q = 0; q < tid; ++q) rank += pair_expert[q] == e;
      const int row = first[e] + rank;
      pair_row[tid] = row;
      pair_token[row] = tid / k;
    }
  }
}

// The grid row blockIdx.y is an expert slot: active[slot] with its bucketed rows, or with
// kShared the shared expert over every token in order.
struct Group {
  int expert = 0, first = 0, rows = 0;
};
template <bool kShared>
__device__ __forceinline__ bool group_of(const int32_t* active, const int32_t* n_active, const int32_t* expert_rows,
                                         const int32_t* expert_first, int T, Group* g) {
  if constexpr (kShared) {
    *g = {0, 0, T};
    return true;
  } else {
    const int slot = blockIdx.y;
    if (slot >= *n_active) return false;
    g->expert = active[slot];
    g->first = expert_first[g->expert];
    g->rows = expert_rows[g->expert];
    return true;
  }
}

// Weight steps a lane loads ahead (dot_rows_streamed's U) for a pass of P rows against R weight
// rows: 16 loads (64 registers) at one row (gate_up's row pair over a 2048-wide dim is one batch
// of 8), at most 8 steps (each step's activations are loaded ahead too), fewer as more rows need
// registers for their accumulators and activations.
__host__ __device__ constexpr int steps_ahead(int P, int R) {
  const int u = (P == 1 ? 16 : P <= 4 ? 8 : P <= 8 ? 4 : 1) / R;  // loads a lane, over R rows
  return u < 1 ? 1 : u > 8 ? 8 : u;
}

// Output columns per warp of the down projection for passes of at most TC rows an expert: its
// rows are short (K = expert FFN, 1024-1408 on OLMoE and Qwen: 4-6 steps a lane), so one column
// a warp left 2 KB in flight a warp behind a 3-4 round-trip chain of routing loads (21.8 us a
// layer for 33.5 MB on the H200 at one row, 36% of copy). More columns a warp share that chain.
__host__ __device__ constexpr int down_columns(int TC) { return TC == 1 ? 4 : TC <= 8 ? 2 : 1; }

// act[row][f] = silu(x · gate_e[f]) · (x · up_e[f]) for the group's rows, x = xn of the row's
// token; a warp per channel f, rows in passes of at most TC (two weight rows, so TC ≤ 16), each
// pass sized by the rows left (with_pass_rows).
template <int TC, bool kShared>
__global__ void __launch_bounds__(kWarps * 32, 2)
    expert_gate_up_kernel(const bf16_bits* __restrict__ gate_up, int64_t ffn, int64_t dim, const float* xn,
                          int64_t ld_x, int T, const int32_t* active, const int32_t* n_active,
                          const int32_t* expert_rows, const int32_t* expert_first, const int32_t* pair_token,
                          float* __restrict__ act) {
  pdl_trigger();
  pdl_wait();  // the buckets (and activations); the expert, so its weights, is known only after
  Group g;
  if (!group_of<kShared>(active, n_active, expert_rows, expert_first, T, &g)) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t f = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (f >= ffn) return;
  const bf16_bits* base = gate_up + static_cast<int64_t>(g.expert) * 2 * ffn * dim;
  const uint16_t* const w[2] = {base + f * dim, base + (ffn + f) * dim};
  for (int r0 = 0; r0 < g.rows; r0 += TC) {
    const int n = g.rows - r0 < TC ? g.rows - r0 : TC;
    warp_dot::with_pass_rows<TC>(n, [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      const float* x[P];
#pragma unroll
      for (int t = 0; t < P; ++t) {
        const int row = g.first + r0 + (t < n ? t : n - 1);
        x[t] = xn + (kShared ? row : pair_token[row]) * ld_x;
      }
      float acc[2][P] = {};
      dot_rows_streamed<P, 2, steps_ahead(P, 2)>(w, dim / 8, x, acc);
#pragma unroll
      for (int t = 0; t < P; ++t) {
        if (t < n) {  // uniform over the warp
          const float gate = warp_sum(acc[0][t]), up = warp_sum(acc[1][t]);
          if (lane == 0) act[(g.first + r0 + t) * ffn + f] = silu(gate) * up;
        }
      }
    });
  }
}

// out[row][d] = down_e[d] · act[row] for the group's rows; a warp per R = down_columns(TC)
// output columns d0..d0+R (dim % 8 == 0, so dim % R == 0), passes as in expert_gate_up_kernel.
template <int TC, bool kShared>
__global__ void __launch_bounds__(kWarps * 32, 2)
    expert_down_kernel(const bf16_bits* __restrict__ down, int64_t ffn, int64_t dim, int T, const int32_t* active,
                       const int32_t* n_active, const int32_t* expert_rows, const int32_t* expert_first,
                       const float* act, float* __restrict__ out) {
  constexpr int R = down_columns(TC);
  pdl_trigger();
  pdl_wait();  // the buckets (and activations); the expert, so its weights, is known only after
  Group g;
  if (!group_of<kShared>(active, n_active, expert_rows, expert_first, T, &g)) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t d0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (d0 >= dim) return;
  const uint16_t* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r) w[r] = down + (static_cast<int64_t>(g.expert) * dim + d0 + r) * ffn;
  for (int r0 = 0; r0 < g.rows; r0 += TC) {
    const int n = g.rows - r0 < TC ? g.rows - r0 : TC;
    warp_dot::with_pass_rows<TC>(n, [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      const float* x[P];
#pragma unroll
      for (int t = 0; t < P; ++t) x[t] = act + (g.first + r0 + (t < n ? t : n - 1)) * ffn;
      float acc[R][P] = {};
      dot_rows_streamed<P, R, steps_ahead(P, R)>(w, ffn / 8, x, acc);
#pragma unroll
      for (int t = 0; t < P; ++t) {
        if (t < n) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0) out[(g.first + r0 + t) * dim + d0 + r] = v;
          }
        }
      }
    });
  }
}

// y[t] (+)= Σ_i w_{t,i} · out[row of (t, i)] over the kept pairs in routing order, then the
// shared expert's sigmoid-gated row: a fixed order, so the same bits on every run. Here and in
// the expert kernels, what the kernels before wrote (the routing, buckets, activations, expert
// rows, the residual) is not __restrict__: ptxas may hoist an ld.global.nc above the PDL wait
// (kernels/cuda/pdl.cuh). Only weights are.
__global__ void combine_kernel(int k, int64_t dim, const float* weights, const int32_t* pair_row, const float* out,
                               const float* shared_scale, const float* shared_out, float* y, int64_t ldy,
                               bool accumulate) {
  pdl_trigger();
  pdl_wait();  // the expert rows
  const int t = blockIdx.y;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= dim) return;
  float* yt = y + t * ldy + d;
  float v = accumulate ? *yt : 0.0f;
  for (int i = 0; i < k; ++i) {
    const int row = pair_row[t * k + i];
    if (row >= 0) v += weights[t * k + i] * out[row * dim + d];
  }
  if (shared_out != nullptr) v += shared_scale[t] * shared_out[t * dim + d];
  *yt = v;
}

int64_t align16(int64_t bytes) { return (bytes + 15) & ~int64_t{15}; }

// Lays the scratch out from address `at` (0 to measure it); returns the end address.
uintptr_t lay_out(uintptr_t at, const MoeShape& s, int64_t max_tokens, MoeScratch* m) {
  auto take = [&](auto* type, int64_t count) {
    using T = std::remove_pointer_t<decltype(type)>;
    T* out = reinterpret_cast<T*>(at);
    at += static_cast<uintptr_t>(align16(count * static_cast<int64_t>(sizeof(T))));
    return out;
  };
  const int64_t T = max_tokens, P = max_tokens * s.top_k, E = s.n_experts;
  m->logits = take(static_cast<float*>(nullptr), T * E);
  m->ids = take(static_cast<int32_t*>(nullptr), P);
  m->weights = take(static_cast<float*>(nullptr), P);
  m->skipped = take(static_cast<int32_t*>(nullptr), T);
  m->shared_scale = take(static_cast<float*>(nullptr), T);
  m->expert_rows = take(static_cast<int32_t*>(nullptr), E);
  m->expert_first = take(static_cast<int32_t*>(nullptr), E);
  m->active = take(static_cast<int32_t*>(nullptr), E);
  m->n_active = take(static_cast<int32_t*>(nullptr), 1);
  m->pair_token = take(static_cast<int32_t*>(nullptr), P);
  m->pair_row = take(static_cast<int32_t*>(nullptr), P);
  m->act = take(static_cast<float*>(nullptr), P * s.expert_ffn);
  m->out = take(static_cast<float*>(nullptr), P * s.dim);
  m->shared_act = s.shared_ffn > 0 ? take(static_cast<float*>(nullptr), T * s.shared_ffn) : nullptr;
  m->shared_out = s.shared_ffn > 0 ? take(static_cast<float*>(nullptr), T * s.dim) : nullptr;
  return at;
}

}  // namespace

MoeScratch moe_scratch(void* base, const MoeShape& s, int64_t max_tokens) {
  MoeScratch m;
  lay_out(reinterpret_cast<uintptr_t>(base), s, max_tokens, &m);
  return m;
}

size_t moe_scratch_bytes(const MoeShape& s, int64_t max_tokens) {
  MoeScratch m;
  return static_cast<size_t>(lay_out(0, s, max_tokens, &m));
}

namespace {
bool a16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
unsigned blocks_for(int64_t outputs) { return static_cast<unsigned>((outputs + kWarps - 1) / kWarps); }
}  // namespace

bool moe_route(const MoeShape& s, const MoeDeviceWeights& w, const float* xn, int64_t ld_x, int64_t T,
               const MoeDeviceSkip* skip, const MoeScratch& m, cudaStream_t stream) {
  const bool shared = s.shared_ffn > 0;
  const bool ok = T >= 1 && T <= kMoeMaxTokens && s.dim >= 8 && s.dim % 8 == 0 && s.expert_ffn >= 8 &&
                  s.expert_ffn % 8 == 0 && s.shared_ffn % 8 == 0 && s.n_experts >= 1 &&
                  s.n_experts <= kMoeMaxExperts && s.top_k >= 1 && s.top_k <= s.n_experts &&
                  s.top_k <= kMoeMaxTopK && ld_x % 4 == 0 && a16(xn) && a16(w.router) && a16(w.gate_up) &&
                  a16(w.down) && m.logits != nullptr && m.act != nullptr && a16(m.act) &&
                  (!shared || w.shared_gate != nullptr);
  if (!ok) return false;
  if (!skinny_gemm(w.router, s.n_experts, s.dim, xn, ld_x, T, m.logits, s.n_experts, false, stream)) return false;
  const int rows = static_cast<int>(T), k = static_cast<int>(s.top_k), E = static_cast<int>(s.n_experts);
  const bool skipping = skip != nullptr && skip->budget > 0 && skip->thresholds != nullptr;
  launch_pdl(route_bucket_kernel, dim3(1), dim3(kBucketThreads), 0, stream, m.logits, rows, E, k, s.normalize, xn, ld_x,
             s.dim, shared ? w.shared_gate : nullptr, skipping ? skip->thresholds : nullptr,
             skipping ? skip->n_thresholds : 0, skipping ? skip->budget : 0, m.ids, m.weights, m.skipped,
             m.shared_scale, m.expert_rows, m.expert_first, m.active, m.n_active, m.pair_token, m.pair_row);
  return true;
}

void moe_experts(const MoeShape& s, const MoeDeviceWeights& w, const float* xn, int64_t ld_x, int64_t T,
                 const MoeScratch& m, cudaStream_t stream) {
  const int rows = static_cast<int>(T);
  // A grid row per expert that can be active: no more than the pairs, nor the experts.
  const auto slots = static_cast<unsigned>(T * s.top_k < s.n_experts ? T * s.top_k : s.n_experts);
  // Rows per expert: at most T (a token routes to an expert once). Passes of at most 8 rows: a
  // larger pass's kernel (16-32 accumulators a weight row) spilled and ran its 1-4-row experts,
  // a verify's, at 2 blocks an SM; an expert with more rows (a prefill chunk's) takes more passes
  // over its weights, the later ones from L2.
  warp_dot::with_rows<8>(T, [&](auto tc) {
    constexpr int TC = decltype(tc)::value;
    launch_pdl(expert_gate_up_kernel<TC, false>, dim3(blocks_for(s.expert_ffn), slots), dim3(kWarps * 32), 0, stream,
        w.gate_up, s.expert_ffn, s.dim, xn, ld_x, rows, m.active, m.n_active, m.expert_rows, m.expert_first,
        m.pair_token, m.act);
  });
  warp_dot::with_rows<8>(T, [&](auto tc) {
    constexpr int TC = decltype(tc)::value;
    launch_pdl(expert_down_kernel<TC, false>, dim3(blocks_for(s.dim / down_columns(TC)), slots), dim3(kWarps * 32), 0,
        stream, w.down, s.expert_ffn, s.dim, rows, m.active, m.n_active, m.expert_rows, m.expert_first, m.act, m.out);
  });
}

bool moe_shared_expert(const MoeShape& s, const MoeDeviceWeights& w, const float* xn, int64_t ld_x, int64_t T,
                       const MoeScratch& m, cudaStream_t stream) {
  if (s.shared_ffn <= 0 || !a16(w.shared_gate_up) || !a16(w.shared_down) || w.shared_gate_up == nullptr ||
      w.shared_down == nullptr || m.shared_act == nullptr || !a16(m.shared_act) || m.shared_out == nullptr) {
    return false;
  }
  const int rows = static_cast<int>(T);
  warp_dot::with_rows<16>(T, [&](auto tc) {
    constexpr int TC = decltype(tc)::value;
    launch_pdl(expert_gate_up_kernel<TC, true>, dim3(blocks_for(s.shared_ffn), 1), dim3(kWarps * 32), 0, stream,
        w.shared_gate_up, s.shared_ffn, s.dim, xn, ld_x, rows, nullptr, nullptr, nullptr, nullptr, nullptr,
        m.shared_act);
  });
  warp_dot::with_rows<32>(T, [&](auto tc) {
    constexpr int TC = decltype(tc)::value;
    launch_pdl(expert_down_kernel<TC, true>, dim3(blocks_for(s.dim / down_columns(TC)), 1), dim3(kWarps * 32), 0,
        stream, w.shared_down, s.shared_ffn, s.dim, rows, nullptr, nullptr, nullptr, nullptr, m.shared_act, m.shared_out);
  });
  return true;
}

void moe_combine(const MoeShape& s, int64_t T, const float* shared_out, float* y, int64_t ldy, bool accumulate,
                 const MoeScratch& m, cudaStream_t stream) {
  launch_pdl(combine_kernel, dim3(static_cast<unsigned>((s.dim + 255) / 256), static_cast<unsigned>(T)), dim3(256), 0,
      stream, static_cast<int>(s.top_k), s.dim, m.weights, m.pair_row, m.out, m.shared_scale,
      s.shared_ffn > 0 ? shared_out : nullptr, y, ldy, accumulate);
}

bool moe_ffn(const MoeShape& s, const MoeDeviceWeights& w, const float* xn, int64_t ld_x, int64_t T,
             const MoeDeviceSkip* skip, float* y, int64_t ldy, bool accumulate, const MoeScratch& m,
             cudaStream_t stream) {
  const bool shared = s.shared_ffn > 0;
  // The shared expert's inputs are checked before anything is launched.
  if (shared && (w.shared_gate_up == nullptr || w.shared_down == nullptr || !a16(w.shared_gate_up) ||
                 !a16(w.shared_down) || m.shared_act == nullptr || !a16(m.shared_act) || m.shared_out == nullptr)) {
    return false;
  }
  if (!moe_route(s, w, xn, ld_x, T, skip, m, stream)) return false;
  moe_experts(s, w, xn, ld_x, T, m, stream);
  if (shared && !moe_shared_expert(s, w, xn, ld_x, T, m, stream)) return false;
  moe_combine(s, T, m.shared_out, y, ldy, accumulate, m, stream);
  return true;
}

}  // namespace specula::cuda
