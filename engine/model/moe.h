#pragma once
// The mixture-of-experts FFN on the CPU (layouts: engine/model/moe_loader.h). For a token x
// (the layer's RMS-normalized input, (dim)):
//   p = softmax(router · x) over all n_experts;
//   the k largest p_i are routed (ties: lower id first), w_i = p_i, renormalized to Σ w = 1
//   when norm_topk_prob (Mixtral, Qwen3-MoE);
//   y = Σ_i w_i · down_i(silu(gate_i · x) ⊙ (up_i · x))
//       [+ sigmoid(g · x) · shared(x), Qwen2-MoE's shared expert].
//
// Sparse MoE (seed 000, section 3.5). With a token's routed weights in descending order
// w_1 ≥ … ≥ w_k, skipping its s lowest-weight experts has the ratio
//   r_s = (w_{k-s+1} + … + w_k) / (w_1 + … + w_{k-s}),
// the skipped routing mass over the kept mass. The seed's formulas were lost in extraction; it
// generalizes Lu et al. 2024, who skip the second of two experts when w_2 / w_1 is below the
// median of that ratio over calibration tokens, and r_1 is exactly that ratio for k = 2.
// Calibration (moe_calibration.h) sets tau_{l,s} = median over tokens of r_s in layer l. At run
// time a token skips the largest s ≤ min(budget, k - 1) with r_s < tau_{l,s}; when none holds,
// all k run. Skipped experts are dropped; the kept weights are not renormalized.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul.h"

namespace specula {

// Routes one token: ids and weights (k each) in descending weight.
void route_token(std::span<const float> router_logits, bool normalize, std::span<int32_t> ids,
                 std::span<float> weights);
// r_s for weights in descending order (1 ≤ s < weights.size()).
double skip_ratio(std::span<const float> weights_desc, int s);
// The largest s ≤ min(budget, k - 1) with r_s < thresholds[s - 1] (s beyond thresholds.size()
// is never taken); 0 when none.
int skip_count(std::span<const float> weights_desc, std::span<const double> thresholds, int budget);

// What the router chose for one token of a forward, and how many of them the skip rule dropped.
struct MoeTokenRouting {
  std::vector<int32_t> experts;  // routed experts, descending weight (k)
  std::vector<float> weights;    // their routing weights
  int32_t skipped = 0;           // the last `skipped` experts did not run
};

// One MoE layer of one forward: a row per new token, in the forward's token order.
struct MoeLayerStats {
  int32_t layer = 0;
  int32_t n_experts = 0;
  std::vector<MoeTokenRouting> tokens;
  int64_t routed() const;   // (token, expert) pairs the router chose
  int64_t skipped() const;  // of those, pairs the skip rule dropped
  // Experts that ran for at least one token, ascending; experts chosen for some token but run
  // for none (their weights were never read), ascending.
  std::vector<int32_t> experts_run() const;
  std::vector<int32_t> experts_skipped() const;
};

// Per-forward MoE statistics for the loop to emit or keep: one entry per MoE layer, appended
// by CpuTransformer::forward (ForwardContext::moe_stats); the caller clears it between forwards.
struct MoeForwardStats {
  std::vector<MoeLayerStats> layers;
  int64_t routed() const;
  int64_t skipped() const;
  void clear() { layers.clear(); }
};

// The skip rule for one layer: tau_{l,s} for s = 1..k-1 and the budget (0 = never skip).
struct MoeSkip {
  int budget = 0;
  std::span<const double> thresholds;
};

// out[t] = W · in[t] for `rows` rows (the transformer's precision and threads).
using MoeProjector = std::function<void(const PackedMatrix& w, const float* in, int64_t ld_in, int64_t rows, float* out,
                                        int64_t ld_out)>;

// Scratch shared by every MoE layer of a transformer (grown to the largest batch seen).
struct MoeScratch {
  AlignedBuffer<float> logits;   // (T, n_experts)
  AlignedBuffer<float> rows;     // (n, dim): the tokens routed to one expert
  AlignedBuffer<float> gate_up;  // (n, 2 ffn)
  AlignedBuffer<float> act;      // (n, ffn)
  AlignedBuffer<float> out;      // (n, dim)
  std::vector<int32_t> ids;      // (T, k)
  std::vector<float> weights;    // (T, k)
};

class MoeFfn {
 public:
  // Packs the router, the experts and the shared expert of an MoE layer (layer.is_moe()).
  MoeFfn(const ModelConfig& config, const LayerWeights& layer, bool exact);
  size_t bytes() const;
  // Rounds the router and every expert matrix to bf16 in place (Precision::Bf16Storage: the
  // numbers the CUDA backend stores); the shared expert's gate stays f32, as it does there.
  // Needs the constructor's `exact` (f32 matrices).
  void round_to_bf16();

  // xn: (T, dim) the layer's normalized input; x: (T, dim) the residual stream, += the output.
  // skip: null runs every routed expert. stats: when not null, filled with the routing.
  void forward(const float* xn, int64_t T, float* x, const MoeProjector& project, const MoeSkip* skip,
               MoeScratch& scratch, MoeLayerStats* stats) const;

 private:
  int64_t dim_ = 0, ffn_ = 0, shared_ffn_ = 0, k_ = 0;
  bool normalize_ = false;
  PackedMatrix router_;                // (n_experts, dim)
  std::vector<PackedMatrix> experts_;  // per expert (2 ffn, dim): gate rows, then up rows
  std::vector<PackedMatrix> downs_;    // per expert (dim, ffn)
  PackedMatrix shared_gate_up_;        // (2 shared_ffn, dim)
  PackedMatrix shared_down_;           // (dim, shared_ffn)
  std::vector<float> shared_gate_;     // (dim)

  // y = down · swiglu(gate_up · in) for n rows of in (n, dim), into scratch.out.
  void expert(const PackedMatrix& gate_up, const PackedMatrix& down, int64_t ffn, const float* in, int64_t n,
              const MoeProjector& project, MoeScratch& scratch) const;
};

}  // namespace specula
