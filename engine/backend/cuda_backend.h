#pragma once
// TransformerBackend on one CUDA GPU: bf16 weights and KV cache, f32 residual stream and
// accumulation, cuBLAS GEMMs (bf16 in, f32 compute and out), kernels/cuda/model_ops for the
// rest. Built only with SPECULA_HAVE_CUDA; otherwise every entry point returns "built without
// CUDA". One forward at a time per backend (sessions share its stream and scratch).
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend/transformer_backend.h"
#include "engine/sparse/sparse_config.h"

namespace specula {

struct CudaBackendOptions {
  int device = 0;
  // Decode steps (one token, last logits, no mask) and tree verifies (a mask, up to 65 rows)
  // replay a CUDA graph captured on the first use of each shape: one launch instead of ~6 per
  // layer. Off: every kernel is launched each step.
  bool cuda_graphs = true;
  // Dense tree verifies (a mask, up to 64 rows) of caches with 16-token blocks and head_dim 128
  // run kernels/cuda/attention.h's tree_attention_dense (bf16 queries; K/V loads shared across
  // the tree and the GQA group) instead of attention_at (f32 queries; over a split cache 4 (row,
  // q head) pairs a block share each K/V load, kernels/cuda/shared_kv_attention.h), without a
  // graph. Off by default: the greedy fidelity tests cover attention_at, whose verify rows keep
  // the decode step's bits. The price, on the H200 for the Llama-8B shape's 61-row verify: 10.2 ms
  // at 64K rows with these kernels (bench/results/cuda_verify_8b_64k_profile_s19_h200_2026-12-02.json),
  // 106 ms at 32K on attention_at (shared_kv_attention_s19_h200_2026-12-02.json).
  // Sparse verifies of such caches always use the tree-attention kernels.
  bool tree_attention_kernels = false;
  // With tree_attention_kernels off, a dense verify whose projections already left the exact
  // path (the QKV GEMM on the stacked split halves: more rows than Impl::kExactVerifyRows*, so
  // its rows are close to the decode step's but not its bits) takes those kernels from this many
  // committed rows on; 0: never. bench_cuda_decode --tree-attention-from-context, for the A/B.
  // 256: on the H200 in the Llama-8B shape, against attention_at, the kernels lose 4-5% at 64
  // committed rows with 9-17 rows verified, break even at 256 (0.997-1.15x), win from 512 on and
  // by 9.6-13x at 16K-32K with 61 rows
  // (bench/results/tree_attention_crossover_8b_s21_h200_2026-12-02.json).
  int64_t tree_attention_from_context = 256;
  // A decode step's RoPE, K/V append and attention in one launch (kernels/cuda/decode_attention.h)
  // instead of two; the same results. Off: the two launches (for A/B timing and ruling it out).
  bool fused_decode_attention = true;
  // Which kernel a projection GEMM of 2..64 rows takes (a decode step's single row always takes
  // the f32 skinny kernel): kAuto picks by rows and shape (Impl::route in cuda_gemm.cpp, from
  // bench/results/gpu_verify_routes_s9_h100_2026-11-24.json); the others force one route where it
  // can run (skinny f32 up to 64 rows, tensor-core up to 16, cuBLAS always) for A/B timing.
  // layer_route covers the layers' projections, head_route the logits GEMM.
  enum class GemmRoute : uint8_t { kAuto, kSkinny, kTensorCore, kCublas };
  GemmRoute layer_route = GemmRoute::kAuto;
  GemmRoute head_route = GemmRoute::kAuto;
  // The stacked split-halves GEMMs (2..64 rows on cuBLAS) of large matrices (Llama-8B's, not
  // SmolLM2's) through cuBLASLt, each shape's algorithm picked by timing the heuristic's first
  // candidates once, at its first use (before any graph captures it); off, or for small
  // matrices: cublasGemmEx with its default algorithm. Off by default: a timed pick may differ
  // between processes, and with it the logits' last bits, so two sessions of one model and
  // prompt could disagree; it gained 1-3% on Llama-8B's verify GEMMs
  // (bench/results/gpu_verify_rows_s9_h100_2026-11-24.json). bench_cuda_decode --cublaslt.
  bool cublaslt_tuned = false;
  // The stacked split-halves GEMMs of 17..48 rows of small matrices (SmolLM2's projections) on
  // our wgmma kernel (kernels/cuda/verify_gemm.h) where the device runs it (sm_90), instead of
  // cublasGemmEx: a 17-row verify of SmolLM2 0.95 -> 0.87 ms (Impl::kVerifyGemmRows says where
  // it pays). Off: cuBLAS (A/B timing; bench_cuda_decode --verify-gemm).
  bool verify_gemm = true;
  // Up to this many rows, large matrices' stacked products (Llama-8B's) take that kernel too; 0:
  // never, the default: on the 8B it wins 2-3% at 17-32 rows but loses at 13 and 48-61
  // (bench/results/verify_gemm_large_rows_8b_s20_h200_2026-12-02.json). bench_cuda_decode
  // --verify-gemm-large-rows, for the A/B.
  int verify_gemm_large_rows = 0;
};

// True when built with CUDA and at least one GPU is visible (never prints).
bool cuda_gpu_available();
// Programmatic dependent launch of the decode and verify kernels (on by default): a kernel starts
// early and waits for the one before, which saves launch gaps but makes a profiler's kernel
// durations include that wait. Off for CUPTI-recorded runs; graphs captured before a change keep
// how they were captured. A no-op without CUDA.
void set_cuda_programmatic_launch(bool on);
// The CUDA backend runs the llama family and the MoE layouts of engine/model/moe_loader.h
// (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE: their q/k/v biases, q/k norms and clipping too) with
// head_dim a multiple of 8, at most 256, and MoE shapes kernels/cuda/moe.h covers (dim and expert
// widths multiples of 8, at most 1024 experts, top-k at most 16). cuda_backend_unsupported says
// why not in a phrase ("" when supported).
bool cuda_backend_supports(const ModelConfig& config);
std::string cuda_backend_unsupported(const ModelConfig& config);

// Whether sparse verification with `config` runs on the CUDA backend: sparse attention only
// (Quest scoring, logit-sum group scores, no successor blocks); an error naming the first option
// it cannot honour otherwise. Strict configs are supported.
Status cuda_sparse_supported(const SparseConfig& config);

// Bench only (bench/cuda_decode.cpp): makes rows 0..rows-1 of a CUDA session's KV cache random
// bf16 keys and values (uniform in [-1, 1), every layer) with block min/max computed from them,
// and commits them, so a long-context verify can be timed without a prefill. Not a model state:
// logits after it are meaningless. Error for a session of another backend.
Status cuda_fill_kv_random_for_bench(BackendSession& session, int64_t rows, uint64_t seed);

// Tests and benches: how many forward graphs a CUDA session holds (its own and those it took over
// from the session before it, KvMemory in cuda_backend_impl.h); -1 for a session of another backend.
int64_t cuda_session_graph_count(const BackendSession& session);

class CudaBackend : public TransformerBackend {
 public:
  ~CudaBackend() override;
  const ModelConfig& config() const override;
  std::string name() const override { return "cuda"; }
  int64_t kv_row_bytes() const override;  // bf16 K and V
  int warmup_steps() const override;      // 1 with CUDA graphs (the first decode step captures)
  std::string device() const override;
  Expected<std::unique_ptr<BackendSession>> start(int block_size, int64_t capacity) override;

  bool synthetic() const;
  // Bytes of weights one decode step reads: every layer matrix + the output projection + norms.
  uint64_t weight_bytes_per_token() const;
  uint64_t device_bytes() const;  // everything allocated for weights

  struct Impl;

 private:
  friend Expected<std::unique_ptr<CudaBackend>> make_cuda_backend(const Model&, const CudaBackendOptions&);
  friend Expected<std::unique_ptr<CudaBackend>> make_synthetic_cuda_backend(const ModelConfig&, uint64_t,
                                                                            const CudaBackendOptions&);
  CudaBackend();
  std::unique_ptr<Impl> impl_;
};

// Real weights: dequantized on the host, uploaded as bf16. `model` must outlive the backend.
Expected<std::unique_ptr<CudaBackend>> make_cuda_backend(const Model& model, const CudaBackendOptions& options);
// Random bf16 weights of `config`'s shapes, generated on the GPU (timing only).
Expected<std::unique_ptr<CudaBackend>> make_synthetic_cuda_backend(const ModelConfig& config, uint64_t seed,
                                                                   const CudaBackendOptions& options);
// Shapes of a known model for --synthetic: "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b" (the last two
// larger than an 80 GB GPU).
Expected<ModelConfig> synthetic_config(const std::string& name);

}  // namespace specula
