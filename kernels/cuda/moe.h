#pragma once
// The mixture-of-experts FFN on the GPU, the CPU's MoeFfn::forward (engine/model/moe.h) with
// routing, skipping and bucketing on the device (no host sync). For T tokens xn (T, dim) f32
// (the layer's RMS-normalized input, 1 ≤ T ≤ 64):
//   logits = xn · routerᵀ; p = softmax(logits) (the CPU's f32 softmax, its sum in double);
//   ids/weights = the k largest p, descending, ties to the lower id; renormalized to Σ = 1 when
//   normalize (Mixtral, Qwen3-MoE) — route_token;
//   skipped = skip_count(weights, thresholds, budget) in double, the CPU's rule exactly; the
//   last `skipped` experts of a token do not run, the kept weights are not renormalized;
//   y (+)= Σ_{i < k − skipped} w_i · down_e(silu(gate_e · x) ⊙ (up_e · x))
//          [+ sigmoid(shared_gate · x) · shared(x), Qwen2-MoE's shared expert].
// The (token, expert) pairs are bucketed by expert (counts, offsets, pairs in token order) on
// the device; one launch runs gate_up + SwiGLU of every routed expert with tokens, one the
// down projections (a grid row per possibly-active expert; rows past the active count exit).
// Each pair's output goes to its own row and a last kernel sums a token's rows in its routing
// order (then the shared expert): no float atomics, the same bits on every run.
//
// Weight layouts, bf16 row-major, experts contiguous (the dense FFN's layout per expert):
//   router (n_experts, dim); gate_up (n_experts, 2·expert_ffn, dim): per expert gate rows then
//   up rows; down (n_experts, dim, expert_ffn); shared_gate_up (2·shared_ffn, dim);
//   shared_down (dim, shared_ffn); shared_gate (dim) f32 (the CPU keeps it f32 too).
#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

using bf16_bits = uint16_t;

inline constexpr int64_t kMoeMaxTokens = 64;
inline constexpr int64_t kMoeMaxExperts = 1024;
inline constexpr int64_t kMoeMaxTopK = 16;

struct MoeShape {
  int64_t dim = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t expert_ffn = 0;
  int64_t shared_ffn = 0;  // 0: no shared expert
  bool normalize = false;  // norm_topk_prob
};

struct MoeDeviceWeights {
  const bf16_bits* router = nullptr;
  const bf16_bits* gate_up = nullptr;
  const bf16_bits* down = nullptr;
  const bf16_bits* shared_gate_up = nullptr;
  const bf16_bits* shared_down = nullptr;
  const float* shared_gate = nullptr;
};

// The skip rule of one layer (engine/model/moe.h MoeSkip): tau_{l,s} for s = 1..n_thresholds in
// device memory (double), budget 0 = never skip.
struct MoeDeviceSkip {
  int budget = 0;
  const double* thresholds = nullptr;
  int n_thresholds = 0;
};

// Device scratch of one call, carved from one allocation by moe_scratch. P = max_tokens · top_k.
// After the call (on the stream), ids / weights / skipped hold every token's routing in the
// CPU's MoeTokenRouting terms, and n_active / active the experts that ran.
struct MoeScratch {
  float* logits = nullptr;        // (T, n_experts)
  int32_t* ids = nullptr;         // (T, k) routed experts, descending weight
  float* weights = nullptr;       // (T, k) their routing weights
  int32_t* skipped = nullptr;     // (T) the last skipped[t] of token t's experts did not run
  float* shared_scale = nullptr;  // (T) sigmoid(shared_gate · x)
  int32_t* expert_rows = nullptr; // (n_experts) pairs routed to each expert and kept
  int32_t* expert_first = nullptr;// (n_experts) its first row in the bucketed pairs
  int32_t* active = nullptr;      // (n_experts) experts with rows, ascending
  int32_t* n_active = nullptr;    // (1)
  int32_t* pair_token = nullptr;  // (P) bucketed row → token
  int32_t* pair_row = nullptr;    // (P) token t's i-th routed pair → its bucketed row, −1 if skipped
  float* act = nullptr;           // (P, expert_ffn) SwiGLU activations per bucketed row
  float* out = nullptr;           // (P, dim) expert outputs per bucketed row
  float* shared_act = nullptr;    // (T, shared_ffn)
  float* shared_out = nullptr;    // (T, dim)
};
size_t moe_scratch_bytes(const MoeShape& shape, int64_t max_tokens);
// base: device memory of moe_scratch_bytes(shape, max_tokens) bytes, 16-byte aligned.
MoeScratch moe_scratch(void* base, const MoeShape& shape, int64_t max_tokens);

// Needs dim, expert_ffn and shared_ffn multiples of 8, 1 ≤ top_k ≤ min(n_experts,
// kMoeMaxTopK), n_experts ≤ kMoeMaxExperts, 16-byte aligned weights and xn rows (ld_x % 4 ==
// 0), T ≤ max_tokens of the scratch and ≤ kMoeMaxTokens; returns false (launching nothing)
// otherwise. skip null or budget 0: every routed expert runs. y: (T, dim), row stride ldy;
// accumulate adds to it (the residual stream).
bool moe_ffn(const MoeShape& shape, const MoeDeviceWeights& weights, const float* xn, int64_t ld_x, int64_t T,
             const MoeDeviceSkip* skip, float* y, int64_t ldy, bool accumulate, const MoeScratch& scratch,
             cudaStream_t stream);

// moe_ffn's stages, in its order, for a caller that runs the shared expert (a dense FFN) through
// its own dense path: the expert kernels use the skinny f32 inner loop, which suits the few rows
// each routed expert gets, but the shared expert sees every token (kernels/cuda/skinny_gemm.h:
// above ~4 rows cuBLAS wins on matrices that size).
//   moe_route: router GEMM, routing, skip rule, shared_scale, buckets (checks as moe_ffn, except
//              the shared expert's projections); false: nothing launched.
//   moe_experts: the routed experts' gate_up + SwiGLU and down, into scratch.out.
//   moe_shared_expert: scratch.shared_out (T, dim) = the shared expert of xn, our kernels; false
//              (nothing launched) without a shared expert or its weights.
//   moe_combine: y (+)= Σ kept w · expert rows + shared_scale · shared_out (row stride dim;
//              ignored without a shared expert).
bool moe_route(const MoeShape& shape, const MoeDeviceWeights& weights, const float* xn, int64_t ld_x, int64_t T,
               const MoeDeviceSkip* skip, const MoeScratch& scratch, cudaStream_t stream);
void moe_experts(const MoeShape& shape, const MoeDeviceWeights& weights, const float* xn, int64_t ld_x, int64_t T,
                 const MoeScratch& scratch, cudaStream_t stream);
bool moe_shared_expert(const MoeShape& shape, const MoeDeviceWeights& weights, const float* xn, int64_t ld_x,
                       int64_t T, const MoeScratch& scratch, cudaStream_t stream);
void moe_combine(const MoeShape& shape, int64_t T, const float* shared_out, float* y, int64_t ldy, bool accumulate,
                 const MoeScratch& scratch, cudaStream_t stream);

// The bytes of expert weights a call reads, for pairs that ran on `experts_run` distinct experts
// (router and shared expert included): what bench/ffn_moe_bench.cpp reports bandwidth over.
inline int64_t moe_weight_bytes(const MoeShape& s, int64_t experts_run) {
  return 2 * (s.n_experts * s.dim + experts_run * 3 * s.expert_ffn * s.dim + 3 * s.shared_ffn * s.dim) +
         (s.shared_ffn > 0 ? 4 * s.dim : 0);
}

}  // namespace specula::cuda
