#pragma once
// The sparse SwiGLU FFN on the GPU: the CPU's sparse_ffn_activation (engine/model/
// cpu_transformer.cpp) without its dense up and down projections. For rows X (T, dim) f32 (the
// layer's RMS-normalized input, 1 ≤ T ≤ 64) and the CUDA backend's layouts, bf16 row-major:
//   gate_up (2F, dim): gate rows [0, F), up rows [F, 2F) (the fused matrix the CUDA backend loads);
//   down (dim, F);
// it computes
//   gate = X · W_gateᵀ                                  (dense: every channel's gate is needed)
//   keep[t][c] = |silu(gate[t][c])| ≥ tau               (per row), or, with union_rows,
//   keep[t][c] = OR_t' keep[t'][c]                      (a channel kept for one row is kept for all)
//   active = ascending list of channels kept by any row (compacted on the device, no host sync)
//   act[t][j] = keep[t][active[j]] ? silu(gate[t][c]) · (X[t] · W_up[c]) : 0, c = active[j]
//   Y (+)= act · W_down[:, active]ᵀ
// which is what the CPU computes: its act is zero on the dropped channels, so their up rows and
// down columns contribute nothing. Only the active up rows and down columns are read.
//
// The down projection's active columns are 2-byte gathers from each row of W_down; DRAM serves
// them in 32-byte sectors (16 channels), so with scattered channels a sector is read whenever
// any of its 16 channels is active (at 10% random channels, 1 − 0.9^16 ≈ 81% of them).
// bench/ffn_moe_bench.cpp measures what that costs. All launches are asynchronous on `stream`.
//
// Where it pays: the up and down kernels use the skinny kernel's f32 inner loop, whose cost
// grows with every row beyond ~2 (kernels/cuda/skinny_gemm.h; Llama-8B's down took 47 us at 1
// row, 90 at 4, 352 at 16 against cuBLAS's ~50, bench/results/skinny_gemm_h100_2026-11-22.json).
// Measured on the H100 (bench/results/ffn_moe_h100_2026-11-24.json, kernels/cuda/ffn_moe_notes.md):
// 1.02x the dense FFN at one row and 10% of channels, a loss everywhere else.
#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

using bf16_bits = uint16_t;

inline constexpr int64_t kSparseFfnMaxRows = 64;

// Device scratch of one call, carved from one allocation by sparse_ffn_scratch (sizes for up to
// max_rows rows of an F-channel FFN).
struct SparseFfnScratch {
  float* gate = nullptr;          // (T, F) the dense gate projection
  float* act = nullptr;           // (T, F) act[t][j] for the active list's slots j (row stride F)
  int32_t* active = nullptr;      // (F + 8) active channel ids, ascending, padded to a multiple of 8
  int32_t* rows_kept = nullptr;   // (F) rows keeping channel c
  // counts[0]: kept (row, channel) pairs, Σ_t |{c : keep[t][c]}|, the CPU's return value (with
  //            union_rows, T · counts[1]); counts[1]: channels in `active`.
  int32_t* counts = nullptr;      // (2)
};
size_t sparse_ffn_scratch_bytes(int64_t max_rows, int64_t F);
// base: device memory of sparse_ffn_scratch_bytes(max_rows, F) bytes, 16-byte aligned.
SparseFfnScratch sparse_ffn_scratch(void* base, int64_t max_rows, int64_t F);

// Needs dim % 8 == 0, F % 8 == 0, 16-byte aligned X rows (ld_x % 4 == 0) and weights, and
// 1 ≤ T ≤ kSparseFfnMaxRows; returns false (launching nothing) otherwise. Y: (T, dim) f32 with
// row stride ldy; accumulate adds to it (the residual stream). Every launch goes on `stream`;
// scratch.counts holds the counts when the stream reaches the end of the call.
bool sparse_ffn(const bf16_bits* gate_up, const bf16_bits* down, int64_t dim, int64_t F, const float* X, int64_t ld_x,
                int64_t T, float tau, bool union_rows, float* Y, int64_t ldy, bool accumulate,
                const SparseFfnScratch& scratch, cudaStream_t stream);
// The same after the gate: scratch.gate (T, F) already holds X · W_gateᵀ (for the backend's
// routing of the dense gate GEMM, e.g. cuBLAS above 16 rows); same constraints.
bool sparse_ffn_from_gate(const bf16_bits* gate_up, const bf16_bits* down, int64_t dim, int64_t F, const float* X,
                          int64_t ld_x, int64_t T, float tau, bool union_rows, float* Y, int64_t ldy, bool accumulate,
                          const SparseFfnScratch& scratch, cudaStream_t stream);

}  // namespace specula::cuda
