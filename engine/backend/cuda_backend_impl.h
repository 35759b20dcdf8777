#pragma once
// Internals of the CUDA backend shared by its sources: cuda_backend.cpp (the backend, weights,
// scratch), cuda_gemm.cpp (Impl's GEMM routing, LtGemm) and cuda_session.cpp with
// cuda_session_sparse.cpp (CudaSession, cuda_session.h). Not part of the engine's public
// surface, nor installed; included only where SPECULA_HAVE_CUDA is defined.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/backend/cuda_backend.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/qkv_extras.h"
#include "kernels/cuda/skinny_gemm.h"

namespace specula {

// Named, not anonymous, as the backend's sources share them; the using-directive after it gives
// their code the unqualified names it had when they were one file.
namespace cuda_detail {

using cuda::bf16_bits;

inline Error cuda_error(const std::string& what, cudaError_t status) {
  return make_error("CUDA backend: " + what + " failed: " + cudaGetErrorString(status));
}

#define SPECULA_CUDA_TRY(expr, what)                                                                  \
  do {                                                                                                \
    if (const cudaError_t status_ = (expr); status_ != cudaSuccess) return cuda_error(what, status_); \
  } while (0)

inline std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  Status allocate(size_t n, const char* what) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = 0;
    if (n == 0) return {};
    void* p = nullptr;
    SPECULA_CUDA_TRY(cudaMalloc(&p, n * sizeof(T)),
                     std::string("cudaMalloc of ") + what + " (" + gib(n * sizeof(T)) + ")");
    ptr_ = static_cast<T*>(p);
    n_ = n;
    return {};
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

struct GpuLayer {
  DeviceBuffer<float> attn_norm, ffn_norm;
  // Row-major (out, in), like the CPU's fused matrices; MoE layers have no gate_up and down.
  DeviceBuffer<bf16_bits> qkv, wo, gate_up, down;
  // Qwen2/Qwen3-MoE and OLMoE attention (engine/model/qkv_extras.h), f32 as the CPU keeps them;
  // empty when the model has none.
  DeviceBuffer<float> qkv_bias, o_bias, q_norm, k_norm;
  // An MoE layer's FFN in kernels/cuda/moe.h's layouts (bf16; shared_gate f32); empty otherwise.
  DeviceBuffer<bf16_bits> router, experts_gate_up, experts_down, shared_gate_up, shared_down;
  DeviceBuffer<float> shared_gate;
  size_t bytes() const {
    size_t total = 0;
    for (const auto* b : {&attn_norm, &ffn_norm, &qkv_bias, &o_bias, &q_norm, &k_norm, &shared_gate})
      total += b->bytes();
    for (const auto* b :
         {&qkv, &wo, &gate_up, &down, &router, &experts_gate_up, &experts_down, &shared_gate_up, &shared_down}) {
      total += b->bytes();
    }
    return total;
  }
  cuda::MoeDeviceWeights moe_weights() const {
    return {router.get(),         experts_gate_up.get(), experts_down.get(),
            shared_gate_up.get(), shared_down.get(),     shared_gate.get()};
  }
  cuda::QkvExtrasParams extras(const ModelConfig& c) const {
    cuda::QkvExtrasParams p;
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.head_dim = c.head_dim;
    p.bias = qkv_bias.get();
    p.norm = c.qk_norm == QkNorm::PerHead ? cuda::QkNormKind::kPerHead
             : c.qk_norm == QkNorm::Full  ? cuda::QkNormKind::kFull
                                          : cuda::QkNormKind::kNone;
    p.q_norm = q_norm.get();
    p.k_norm = k_norm.get();
    p.eps = c.rms_eps;
    p.clip = c.clip_qkv;
    return p;
  }
};

// Y (N, cols) column-major = W(N, K) · x(K, cols), bf16 in, f32 out and compute, on cuBLASLt
// with one algorithm per shape picked by timing: the heuristic's first kCandidates, each run
// kReps times on the real operands into a scratch output, at the shape's first use (which must
// not be under graph capture: Impl::launch_graph runs each new shape eagerly first). Operands
// must be 256-byte aligned (cudaMalloc'd starts), what the heuristic assumes by default. The
// choice is kept for the process (per device and shape), so every backend of one process sums in
// the same order (graphed and launched forwards agree bit for bit); another process may time a
// different algorithm, whose sums differ in the last bits.
class LtGemm {
 public:
  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm();

  Status run(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols, float* Y, cudaStream_t stream);

 private:
  static constexpr int kCandidates = 8;
  static constexpr int kReps = 10;
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
  };

  static Error lt_error(const std::string& what, cublasStatus_t st) {
    return make_error("CUDA backend: cuBLASLt " + what + " failed: " + cublasGetStatusString(st));
  }

  Status launch(const Plan& p, const bf16_bits* W, const bf16_bits* x, float* Y, cudaStream_t stream);

  // The algorithm each (device, N, K, cols) was given, for the process.
  struct Chosen {
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
  };
  static std::map<std::tuple<int, int64_t, int64_t, int64_t>, Chosen>& chosen(std::mutex*& lock);

  Expected<Plan> tune(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<float> scratch_;  // the tuning runs' output (the real Y may be accumulated into)
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> plans_;
};

}  // namespace cuda_detail

using namespace cuda_detail;

// A session's KV cache memory and the forward graphs captured over it (CudaSession::mem_). A
// finished session leaves it to the backend (Impl::spare_kv), and the next session with the same
// block size that fits takes it over (CudaSession::init), so a run of many
// prompts captures and instantiates each decode and verify shape once, not once a prompt: that
// cost ~2.4 ms a verify shape, about 40% of a 123-token ngram run's verify time on the H100
// (bench/results/cuda_graph_reuse_s10_h100_2026-11-24.txt). The graphs stay valid because
// every pointer they hold is this memory or the backend's scratch (whose moves they track by
// graph_generation), and they read the committed length on the device.
struct KvMemory {
  int64_t block_size = 0, rows = 0;  // rows: the physical capacity the buffers hold
  DeviceBuffer<bf16_bits> keys, values;
  DeviceBuffer<bf16_bits> kmin, kmax;  // block key min/max, bf16 and exact (cuda::PagedKvLayer)
  DeviceBuffer<float> split_partial;
  DeviceBuffer<int32_t> table, split_counters;
  cuda::AttentionSplit split;
  std::map<int64_t, cudaGraphExec_t> graphs;
  std::set<int64_t> eager_shapes;
  int64_t graph_generation = -1;

  KvMemory() = default;
  KvMemory(const KvMemory&) = delete;
  KvMemory& operator=(const KvMemory&) = delete;
  ~KvMemory() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  }
};

struct CudaBackend::Impl {
  ModelConfig cfg;
  bool synthetic = false;
  int device = 0;
  std::string device_name;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::vector<GpuLayer> layers;
  DeviceBuffer<bf16_bits> embd, output_own;
  const bf16_bits* output = nullptr;
  DeviceBuffer<float> output_norm;
  uint64_t weight_bytes = 0;

  // Scratch for up to scratch_T tokens.
  int64_t scratch_T = 0;
  DeviceBuffer<float> x, qkv, gu, logits;
  DeviceBuffer<float> xn, att;     // projection inputs, f32 (kernels/cuda/skinny_gemm.h)
  DeviceBuffer<bf16_bits> x_bf16;  // a projection input split for cuBLAS (prefill): hi (T, K) then lo (T, K)
  DeviceBuffer<float> y_split;     // (2T, N): the hi and lo products of one stacked GEMM
  DeviceBuffer<int32_t> ids;       // tokens (T), positions (T), step {committed, first_new}
  DeviceBuffer<uint8_t> mask;      // (T, T)
  int64_t scratch_generation = 0;  // bumped when the scratch moves (captured graphs go stale)
  bool cuda_graphs = true;
  bool tree_attention_kernels = false;
  bool fused_decode_attention = true;  // CudaBackendOptions::fused_decode_attention
  using GemmRoute = CudaBackendOptions::GemmRoute;
  GemmRoute layer_route = GemmRoute::kAuto, head_route = GemmRoute::kAuto;  // CudaBackendOptions
  bool cublaslt_tuned = false;                                              // CudaBackendOptions
  bool verify_gemm = true;                                                  // CudaBackendOptions
  int64_t verify_gemm_large_rows = 0;                                       // CudaBackendOptions
  int64_t tree_attention_from_context = 256;                                // CudaBackendOptions
  LtGemm lt;
  void set_options(const CudaBackendOptions& o) {
    cuda_graphs = o.cuda_graphs;
    tree_attention_kernels = o.tree_attention_kernels;
    fused_decode_attention = o.fused_decode_attention;
    layer_route = o.layer_route;
    head_route = o.head_route;
    cublaslt_tuned = o.cublaslt_tuned;
    verify_gemm = o.verify_gemm;
    verify_gemm_large_rows = o.verify_gemm_large_rows;
    tree_attention_from_context = o.tree_attention_from_context;
  }
  int32_t* host_ids = nullptr;         // pinned staging: tokens (T), positions (T), step (committed, first_new)
  uint8_t* host_mask = nullptr;        // pinned, scratch_T²
  std::unique_ptr<KvMemory> spare_kv;  // the last finished session's (CudaSession::~CudaSession)

  ~Impl() {
    spare_kv.reset();  // its graphs before the stream they were captured on
    if (host_ids) cudaFreeHost(host_ids);
    if (host_mask) cudaFreeHost(host_mask);
    if (cublas) cublasDestroy(cublas);
    if (stream) cudaStreamDestroy(stream);
  }

  // MoE models (kernels/cuda/moe.h): the FFN of every layer; its scratch for kMoeMaxTokens rows
  // at a time, and each layer's routing of the last forward (ids and weights (T, k), skipped (T)
  // for up to scratch_T rows a layer), which the session downloads for the observer and stats.
  cuda::MoeShape moe_shape;
  DeviceBuffer<uint8_t> moe_scratch_mem;
  cuda::MoeScratch moe_scratch;
  DeviceBuffer<int32_t> moe_ids, moe_skipped;
  DeviceBuffer<float> moe_weights;
  // The expert-skip thresholds of the sparse config last run (tau[l][s - 1], moe_threshold_stride a layer).
  DeviceBuffer<double> moe_thresholds;
  std::vector<std::vector<double>> moe_thresholds_host;
  int64_t moe_threshold_stride = 0;

  int64_t q_dim() const { return cfg.n_heads * cfg.head_dim; }
  int64_t kv_dim() const { return cfg.n_kv_heads * cfg.head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }

  // Device, weights and scratch (cuda_backend.cpp).
  Status init(int dev);
  uint64_t weight_bytes_needed() const;
  Status check_free_memory(uint64_t need, const std::string& what) const;
  Status allocate_weights();
  Status upload_bf16(const TensorRef& t, bf16_bits* dst, int64_t row0);
  Status upload_f32(const TensorRef& t, float* dst);
  Status upload_moe(const LayerWeights& s, GpuLayer& d);
  Status load(const Model& model);
  Status generate_synthetic(const ModelConfig& config, uint64_t seed);
  Status ensure_scratch(int64_t T);

  // Y(T, N) (+)= X(T, K) · W(N, K)ᵀ; W bf16, X f32 (row stride K), f32 compute and out, on the
  // route() picks: our f32 skinny kernel, our tensor-core kernel, or cuBLAS.
  // The last two split X into bf16 hi + lo halves (kernels/cuda/skinny_gemm.h): rounding X to
  // bf16 alone cost up to 3e-2 relative L2 in SmolLM2's logits, the halves keep products within
  // ~1e-5 of f32 X. Up to kStackedRows rows, cuBLAS takes both halves as 2T columns of one GEMM
  // (the weights are read once, what a verify step is bound by) and add_split_halves sums them;
  // above, two GEMMs (a long prefill is compute-bound either way).
  static constexpr int64_t kStackedRows = 64;
  // A small matrix (SmolLM2's projections): its GEMM's time is launch latency more than bytes.
  static constexpr int64_t kSmallMatrixWeights = int64_t{4} << 20;
  // Up to this many rows a verify's products take our f32 skinny kernel, whose every row keeps
  // the products and sums of a one-row decode step in the same order: a greedy verify then picks
  // the tokens plain greedy decoding picks (the fidelity invariant; CudaBackendTest.
  // ChainVerifyRowsEqualDecodeStepsBitForBit checks the bits). cuBLAS's split halves put a
  // verify row 2-9e-4 (relative L2) from its decode step, and flipped near-ties in
  // engine_cuda_cuda_speculative_test on the merged session-9 build. Small matrices and the
  // logits GEMM take it to 16 rows (SmolLM2's whole 16-row verify 1.87 ms against 0.96 on
  // cuBLAS, gpu_verify_routes_s9_h100_2026-11-24.json: the price of exactness), large ones to 8
  // (Llama-8B's: 6.62 against 6.36 ms at 2 rows); past them cuBLAS's stacked halves.
  static constexpr int64_t kExactVerifyRowsSmall = 16;
  static constexpr int64_t kExactVerifyRowsLarge = 8;
  // Up to this many rows, small matrices' stacked products take kernels/cuda/verify_gemm.h instead
  // of cublasGemmEx. SmolLM2's verifies (forward_greedy, ms, cuBLAS -> ours, interleaved rounds):
  // 17 rows 0.950-0.958 -> 0.865-0.891 and 25 rows 0.958-0.966 -> 0.913-0.941 on the real model
  // (verify_gemm_e2e_s18_h200_2026-12-02.json); with 65-96 stacked rows in two 64-row blocks, 33
  // rows 1.006-1.008 -> 0.958-0.976 and 45 rows 1.024-1.030 -> 0.987-0.997, but 61 rows
  // 1.047-1.064 -> 1.072-1.077 (synthetic SmolLM2, same file): the route stops at 48 (46-48 not
  // measured). Alone its graph-timed products are 0.3-1.3 us slower than cuBLAS's at these shapes
  // (verify_gemm_sweep_s18d_*); in the verify it starts under programmatic launch and streams its
  // weights before the kernel ahead of it ends, which cuBLAS does not (with --pdl false it lost).
  static constexpr int64_t kVerifyGemmRows = 48;

  // GEMMs (cuda_gemm.cpp).
  GemmRoute route(int64_t N, int64_t K, int64_t T, bool head) const;
  Status gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t T, float* Y, int64_t ldy,
              bool accumulate, bool head = false);
  bool stacked(int64_t N, int64_t K, int64_t T) const;
  Status gemm_halves(const bf16_bits* W, int64_t N, int64_t K, int64_t T);
  Status cublas_bf16(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols, float* Y, int64_t ldy,
                     const float* beta);
  Status gemm_norm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t T, const float* gamma, float* Y,
                   int64_t ldy, bool head = false);
  Status gate_up_swiglu(const GpuLayer& L, const float* X, int64_t T);
};

}  // namespace specula
