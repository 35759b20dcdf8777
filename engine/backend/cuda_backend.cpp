#include "engine/backend/cuda_backend.h"

#include <string>
#include <utility>
#include <vector>

#if defined(SPECULA_HAVE_CUDA)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/tensor_type.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/sparse_ffn.h"
#include "kernels/cuda/sparse_verify.h"
#endif

namespace specula {

bool cuda_backend_supports(const ModelConfig& c) {
  return !c.is_moe() && c.qk_norm == QkNorm::None && !c.qkv_bias && !c.output_bias && c.clip_qkv == 0.0f &&
         c.head_dim % 8 == 0 && c.head_dim <= 256;  // kernels/cuda/model_ops.h: attention_at
}

Status cuda_sparse_supported(const SparseConfig& c) {
  const auto refuse = [](const std::string& option) {
    return make_error("sparse verification on the CUDA backend does not support " + option + "; use --backend cpu");
  };
  if (c.moe || c.moe_skip_budget > 0) return refuse("MoE expert skipping (moe, moe_skip_budget)");
  if (c.scoring != "quest") return refuse("scoring \"" + c.scoring + "\" (only \"quest\")");
  if (c.group_score != "logit-sum") return refuse("group_score \"" + c.group_score + "\" (only \"logit-sum\")");
  if (c.successor_blocks != 0) return refuse("successor_blocks " + std::to_string(c.successor_blocks) + " (only 0)");
  return {};
}

int64_t CudaBackend::kv_row_bytes() const {
  const ModelConfig& c = config();
  return c.n_layers * c.n_kv_heads * c.head_dim * 2 * 2;
}

Expected<ModelConfig> synthetic_config(const std::string& name) {
  // Published shapes (config.json of each model). Llama 3.1: half-split RoPE, theta 5e5;
  // smollm2-135m is the default model's (SmolLM2-135M-Instruct: tied embeddings, theta 1e5,
  // adjacent pairs as the loader sets them for a llama GGUF), to time its decode step without
  // carrying the GGUF.
  struct Shape {
    const char* name;
    int64_t layers, dim, heads, kv_heads, head_dim, ffn, vocab, context;
    float rope_theta;
    bool tied, adjacent;
  };
  static constexpr Shape kShapes[] = {
      {"llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, false, false},
      // 141 GB of bf16: more than an H100 holds
      {"llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072, 500000.0f, false, false},
      // 811 GB: more than any one GPU holds
      {"llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, 131072, 500000.0f, false, false},
      {"smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f, true, true},
  };
  std::string known;
  for (const Shape& s : kShapes) {
    known += (known.empty() ? "" : ", ") + std::string(s.name);
    if (name != s.name) continue;
    ModelConfig c;
    c.architecture = "llama";
    c.name = "synthetic " + name + " (random bf16 weights)";
    c.n_layers = s.layers;
    c.dim = s.dim;
    c.n_heads = s.heads;
    c.n_kv_heads = s.kv_heads;
    c.head_dim = s.head_dim;
    c.ffn_dim = s.ffn;
    c.vocab_size = s.vocab;
    c.context_length = s.context;
    c.rope_theta = s.rope_theta;
    c.rms_eps = 1e-5f;
    c.tied_embeddings = s.tied;
    c.rope_style = s.adjacent ? RopeStyle::AdjacentPairs : RopeStyle::HalfSplit;
    return c;
  }
  return make_error("--synthetic: unknown shape '" + name + "' (known: " + known + ")");
}

#if !defined(SPECULA_HAVE_CUDA)

bool cuda_gpu_available() { return false; }
void set_cuda_programmatic_launch(bool) {}
struct CudaBackend::Impl {
  ModelConfig cfg;
};
CudaBackend::CudaBackend() : impl_(std::make_unique<Impl>()) {}
CudaBackend::~CudaBackend() = default;
const ModelConfig& CudaBackend::config() const { return impl_->cfg; }
std::string CudaBackend::device() const { return "none"; }
Expected<std::unique_ptr<BackendSession>> CudaBackend::start(int, int64_t) {
  return make_error("CUDA backend: built without CUDA");
}
bool CudaBackend::synthetic() const { return false; }
int CudaBackend::warmup_steps() const { return 0; }
uint64_t CudaBackend::weight_bytes_per_token() const { return 0; }
uint64_t CudaBackend::device_bytes() const { return 0; }

Expected<std::unique_ptr<CudaBackend>> make_cuda_backend(const Model&, const CudaBackendOptions&) {
  return make_error("--backend cuda: this specula-cli was built without CUDA (nvcc was not found at configure time)");
}
Status cuda_fill_kv_random_for_bench(BackendSession&, int64_t, uint64_t) {
  return make_error("cuda_fill_kv_random_for_bench: built without CUDA");
}
Expected<std::unique_ptr<CudaBackend>> make_synthetic_cuda_backend(const ModelConfig&, uint64_t,
                                                                   const CudaBackendOptions&) {
  return make_error("--synthetic: this specula-cli was built without CUDA (nvcc was not found at configure time)");
}

#else

bool cuda_gpu_available() { return cuda::device_count() > 0; }
void set_cuda_programmatic_launch(bool on) { cuda::set_programmatic_dependent_launch(on); }

namespace {

using cuda::bf16_bits;

Error cuda_error(const std::string& what, cudaError_t status) {
  return make_error("CUDA backend: " + what + " failed: " + cudaGetErrorString(status));
}

#define SPECULA_CUDA_TRY(expr, what)                                                                  \
  do {                                                                                                \
    if (const cudaError_t status_ = (expr); status_ != cudaSuccess) return cuda_error(what, status_); \
  } while (0)

std::string gib(uint64_t bytes) {
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

// Round to nearest even, as __float2bfloat16_rn does (weights are finite).
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

struct GpuLayer {
  DeviceBuffer<float> attn_norm, ffn_norm;
  DeviceBuffer<bf16_bits> qkv, wo, gate_up, down;  // row-major (out, in), like the CPU's fused matrices
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
  ~LtGemm() {
    for (auto& [key, plan] : plans_) {
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.c);
      cublasLtMatmulDescDestroy(plan.desc);
    }
    if (handle_) cublasLtDestroy(handle_);
  }

  Status run(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols, float* Y,
             cudaStream_t stream) {
    auto found = plans_.find({N, K, cols});
    if (found == plans_.end()) {
      auto made = tune(W, N, K, x, cols, stream);
      if (!made) return made.error();
      found = plans_.emplace(std::tuple{N, K, cols}, *made).first;
    }
    return launch(found->second, W, x, Y, stream);
  }

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

  Status launch(const Plan& p, const bf16_bits* W, const bf16_bits* x, float* Y, cudaStream_t stream) {
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasLtMatmul(handle_, p.desc, &one, W, p.a, x, p.b, &zero, Y, p.c, Y, p.c, &p.algo,
                                             workspace_.get(), p.workspace, stream);
    return st == CUBLAS_STATUS_SUCCESS ? Status{} : Status{lt_error("matmul", st)};
  }

  // The algorithm each (device, N, K, cols) was given, for the process.
  struct Chosen {
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
  };
  static std::map<std::tuple<int, int64_t, int64_t, int64_t>, Chosen>& chosen(std::mutex*& lock) {
    static std::mutex m;
    static std::map<std::tuple<int, int64_t, int64_t, int64_t>, Chosen> table;
    lock = &m;
    return table;
  }

  Expected<Plan> tune(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols, cudaStream_t stream) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    SPECULA_CUDA_TRY(cudaStreamIsCapturing(stream, &capturing), "cuBLASLt tuning");
    if (capturing != cudaStreamCaptureStatusNone) {
      return make_error("CUDA backend: cuBLASLt shape " + std::to_string(N) + "x" + std::to_string(K) + " by " +
                        std::to_string(cols) + " columns first met under graph capture (it must be tuned eagerly)");
    }
    if (!handle_) {
      if (const cublasStatus_t st = cublasLtCreate(&handle_); st != CUBLAS_STATUS_SUCCESS)
        return lt_error("create", st);
      if (auto ok = workspace_.allocate(kWorkspaceBytes, "cuBLASLt workspace"); !ok) return ok.error();
    }
    if (scratch_.size() < static_cast<size_t>(N * cols)) {
      if (auto ok = scratch_.allocate(static_cast<size_t>(N * cols), "cuBLASLt tuning output"); !ok) return ok.error();
    }
    Plan p;
    const cublasOperation_t transposed = CUBLAS_OP_T;
    cublasStatus_t st = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof transposed);
    }
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, K, N, K);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, cols, K);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, N, cols, N);
    cublasLtMatmulPreference_t pref = nullptr;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
    const size_t ws = kWorkspaceBytes;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    }
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int returned = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, kCandidates, results, &returned);
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    const auto drop = [&p] {
      if (p.a) cublasLtMatrixLayoutDestroy(p.a);
      if (p.b) cublasLtMatrixLayoutDestroy(p.b);
      if (p.c) cublasLtMatrixLayoutDestroy(p.c);
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    };
    if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
      drop();
      return lt_error(
          "heuristic for " + std::to_string(N) + "x" + std::to_string(K) + " by " + std::to_string(cols) + " columns",
          st == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : st);
    }
    int device = 0;
    SPECULA_CUDA_TRY(cudaGetDevice(&device), "cuBLASLt tuning");
    std::mutex* lock = nullptr;
    auto& table = chosen(lock);
    const std::lock_guard<std::mutex> hold(*lock);
    if (auto known = table.find({device, N, K, cols}); known != table.end()) {
      p.algo = known->second.algo;
      p.workspace = known->second.workspace;
      return p;
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    float best_ms = 0.0f;
    int best = -1;
    for (int i = 0; i < returned; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      p.algo = results[i].algo;
      p.workspace = results[i].workspaceSize;
      if (!launch(p, W, x, scratch_.get(), stream)) continue;  // warm-up; an algorithm that fails is skipped
      cudaEventRecord(start, stream);
      for (int r = 0; r < kReps; ++r) (void)launch(p, W, x, scratch_.get(), stream);
      cudaEventRecord(stop, stream);
      float ms = 0.0f;
      if (cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) continue;
      if (best < 0 || ms < best_ms) {
        best = i;
        best_ms = ms;
      }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (best < 0) {
      drop();
      return lt_error("tuning of " + std::to_string(N) + "x" + std::to_string(K), CUBLAS_STATUS_NOT_SUPPORTED);
    }
    p.algo = results[best].algo;
    p.workspace = results[best].workspaceSize;
    table[{device, N, K, cols}] = Chosen{p.algo, p.workspace};
    return p;
  }

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<float> scratch_;  // the tuning runs' output (the real Y may be accumulated into)
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> plans_;
};

}  // namespace

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
  LtGemm lt;
  int32_t* host_ids = nullptr;   // pinned staging: tokens (T), positions (T), step (committed, first_new)
  uint8_t* host_mask = nullptr;  // pinned, scratch_T²

  ~Impl() {
    if (host_ids) cudaFreeHost(host_ids);
    if (host_mask) cudaFreeHost(host_mask);
    if (cublas) cublasDestroy(cublas);
    if (stream) cudaStreamDestroy(stream);
  }

  int64_t q_dim() const { return cfg.n_heads * cfg.head_dim; }
  int64_t kv_dim() const { return cfg.n_kv_heads * cfg.head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }

  Status init(int dev) {
    device = dev;
    if (cuda::device_count() <= dev)
      return make_error("--backend cuda: no CUDA GPU found (" + cuda::no_device_reason() + ")");
    SPECULA_CUDA_TRY(cudaSetDevice(dev), "cudaSetDevice");
    cudaDeviceProp prop{};
    SPECULA_CUDA_TRY(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    device_name = prop.name;
    SPECULA_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return make_error("CUDA backend: cublasCreate failed");
    cublasSetStream(cublas, stream);
    return {};
  }

  uint64_t weight_bytes_needed() const {
    const uint64_t per_layer = 2 * (qkv_dim() * cfg.dim + cfg.dim * q_dim() + 3 * cfg.ffn_dim * cfg.dim) + 8 * cfg.dim;
    uint64_t total = cfg.n_layers * per_layer + 2ull * cfg.vocab_size * cfg.dim + 4 * cfg.dim;
    if (!cfg.tied_embeddings) total += 2ull * cfg.vocab_size * cfg.dim;
    return total;
  }

  Status check_free_memory(uint64_t need, const std::string& what) const {
    size_t free = 0, total = 0;
    SPECULA_CUDA_TRY(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    const uint64_t margin = 256ull << 20;  // cuBLAS workspace, scratch, context
    if (need + margin > free) {
      return make_error(what + " needs " + gib(need) + " of GPU memory, but only " + gib(free) + " of " + gib(total) +
                        " is free on " + device_name);
    }
    return {};
  }

  Status allocate_weights() {
    if (auto ok = check_free_memory(weight_bytes_needed(), "the model (" + cfg.name + ", bf16 weights)"); !ok)
      return ok;
    layers.resize(static_cast<size_t>(cfg.n_layers));
    for (auto& L : layers) {
      if (auto ok = L.attn_norm.allocate(cfg.dim, "attn_norm"); !ok) return ok;
      if (auto ok = L.ffn_norm.allocate(cfg.dim, "ffn_norm"); !ok) return ok;
      if (auto ok = L.qkv.allocate(qkv_dim() * cfg.dim, "wqkv"); !ok) return ok;
      if (auto ok = L.wo.allocate(cfg.dim * q_dim(), "wo"); !ok) return ok;
      if (auto ok = L.gate_up.allocate(2 * cfg.ffn_dim * cfg.dim, "w_gate_up"); !ok) return ok;
      if (auto ok = L.down.allocate(cfg.dim * cfg.ffn_dim, "w_down"); !ok) return ok;
    }
    if (auto ok = embd.allocate(cfg.vocab_size * cfg.dim, "token_embd"); !ok) return ok;
    if (auto ok = output_norm.allocate(cfg.dim, "output_norm"); !ok) return ok;
    if (!cfg.tied_embeddings) {
      if (auto ok = output_own.allocate(cfg.vocab_size * cfg.dim, "output"); !ok) return ok;
      output = output_own.get();
    } else {
      output = embd.get();
    }
    weight_bytes = 0;
    for (const auto& L : layers) {
      weight_bytes +=
          L.attn_norm.bytes() + L.ffn_norm.bytes() + L.qkv.bytes() + L.wo.bytes() + L.gate_up.bytes() + L.down.bytes();
    }
    weight_bytes += output_norm.bytes() + 2ull * cfg.vocab_size * cfg.dim;  // output projection
    return {};
  }

  // Dequantizes `t` on the host and uploads it as bf16 rows [row0, row0 + t.rows()) of dst.
  Status upload_bf16(const TensorRef& t, bf16_bits* dst, int64_t row0) {
    const auto traits = tensor_type_traits(t.type);
    if (!traits) return make_error("CUDA backend: " + t.name + " has an unknown tensor type");
    const int64_t cols = t.cols(), row_bytes = cols / traits->block_elems * traits->block_bytes;
    std::vector<float> f(static_cast<size_t>(cols));
    std::vector<uint16_t> h(static_cast<size_t>(cols * t.rows()));
    for (int64_t r = 0; r < t.rows(); ++r) {
      const auto res = dequantize_row(t.type, t.data.data() + r * row_bytes, f.data(), cols);
      if (!res.ok) return make_error("CUDA backend: " + t.name + ": " + res.error);
      for (int64_t c = 0; c < cols; ++c) h[static_cast<size_t>(r * cols + c)] = to_bf16(f[static_cast<size_t>(c)]);
    }
    SPECULA_CUDA_TRY(cudaMemcpy(dst + row0 * cols, h.data(), h.size() * 2, cudaMemcpyHostToDevice),
                     "upload of " + t.name);
    return {};
  }

  Status upload_f32(const TensorRef& t, float* dst) {
    std::vector<float> f(static_cast<size_t>(t.cols() * t.rows()));
    const auto res = dequantize_row(t.type, t.data.data(), f.data(), static_cast<int64_t>(f.size()));
    if (!res.ok) return make_error("CUDA backend: " + t.name + ": " + res.error);
    SPECULA_CUDA_TRY(cudaMemcpy(dst, f.data(), f.size() * 4, cudaMemcpyHostToDevice), "upload of " + t.name);
    return {};
  }

  Status load(const Model& model) {
    cfg = model.config;
    if (cfg.head_dim > 256 || cfg.head_dim % 2 != 0) {
      return make_error("CUDA backend: head_dim " + std::to_string(cfg.head_dim) + " unsupported (even, at most 256)");
    }
    if (auto ok = allocate_weights(); !ok) return ok;
    const auto& w = model.weights;
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      const LayerWeights& s = w.layers[static_cast<size_t>(l)];
      GpuLayer& d = layers[static_cast<size_t>(l)];
      Status ok = upload_f32(s.attn_norm, d.attn_norm.get());
      if (ok) ok = upload_f32(s.ffn_norm, d.ffn_norm.get());
      if (ok) ok = upload_bf16(s.wq, d.qkv.get(), 0);
      if (ok) ok = upload_bf16(s.wk, d.qkv.get(), q_dim());
      if (ok) ok = upload_bf16(s.wv, d.qkv.get(), q_dim() + kv_dim());
      if (ok) ok = upload_bf16(s.wo, d.wo.get(), 0);
      if (ok) ok = upload_bf16(s.w_gate, d.gate_up.get(), 0);
      if (ok) ok = upload_bf16(s.w_up, d.gate_up.get(), cfg.ffn_dim);
      if (ok) ok = upload_bf16(s.w_down, d.down.get(), 0);
      if (!ok) return ok;
    }
    if (auto ok = upload_bf16(w.token_embd, embd.get(), 0); !ok) return ok;
    if (auto ok = upload_f32(w.output_norm, output_norm.get()); !ok) return ok;
    if (!cfg.tied_embeddings) {
      if (auto ok = upload_bf16(w.output, output_own.get(), 0); !ok) return ok;
    }
    return {};
  }

  Status generate_synthetic(const ModelConfig& config, uint64_t seed) {
    cfg = config;
    synthetic = true;
    if (auto ok = allocate_weights(); !ok) return ok;
    uint64_t k = seed * 1000003ull;
    auto fill = [&](DeviceBuffer<bf16_bits>& b, int64_t fan_in) {
      cuda::fill_uniform_bf16(b.get(), static_cast<int64_t>(b.size()), ++k,
                              1.0f / std::sqrt(static_cast<float>(fan_in)), stream);
    };
    for (auto& L : layers) {
      cuda::fill_f32(L.attn_norm.get(), cfg.dim, 1.0f, stream);
      cuda::fill_f32(L.ffn_norm.get(), cfg.dim, 1.0f, stream);
      fill(L.qkv, cfg.dim);
      fill(L.wo, q_dim());
      fill(L.gate_up, cfg.dim);
      fill(L.down, cfg.ffn_dim);
    }
    cuda::fill_uniform_bf16(embd.get(), static_cast<int64_t>(embd.size()), ++k, 1.0f, stream);
    cuda::fill_f32(output_norm.get(), cfg.dim, 1.0f, stream);
    if (!cfg.tied_embeddings) fill(output_own, cfg.dim);
    SPECULA_CUDA_TRY(cudaGetLastError(), "synthetic weight generation");
    SPECULA_CUDA_TRY(cudaStreamSynchronize(stream), "synthetic weight generation");
    return {};
  }

  Status ensure_scratch(int64_t T) {
    if (T <= scratch_T) return {};
    // Every buffer below is freed before it is reallocated, so a failure part-way (the GPU out of
    // memory mid-run) must not leave scratch_T promising buffers that are gone, nor graphs
    // pointing at them: the next forward then starts the growth over.
    scratch_T = 0;
    ++scratch_generation;
    const int64_t wide = std::max(cfg.dim, cfg.ffn_dim);
    if (auto ok = x.allocate(T * cfg.dim, "x"); !ok) return ok;
    if (auto ok = qkv.allocate(T * qkv_dim(), "qkv"); !ok) return ok;
    if (auto ok = gu.allocate(T * 2 * cfg.ffn_dim, "gate_up"); !ok) return ok;
    if (auto ok = logits.allocate(T * cfg.vocab_size, "logits"); !ok) return ok;
    if (auto ok = xn.allocate(T * wide, "xn"); !ok) return ok;
    if (auto ok = att.allocate(T * q_dim(), "attention out"); !ok) return ok;
    if (auto ok = x_bf16.allocate(2 * T * std::max(wide, q_dim()), "bf16 projection input"); !ok) return ok;
    const int64_t widest_out = std::max({qkv_dim(), 2 * cfg.ffn_dim, cfg.dim, cfg.vocab_size});
    if (auto ok = y_split.allocate(2 * std::min(T, kStackedRows) * widest_out, "split GEMM output"); !ok) return ok;
    if (auto ok = ids.allocate(2 * T + 2, "token ids"); !ok) return ok;
    if (auto ok = mask.allocate(T * T, "mask"); !ok) return ok;
    if (host_ids) cudaFreeHost(host_ids);
    if (host_mask) cudaFreeHost(host_mask);
    host_ids = nullptr;
    host_mask = nullptr;
    SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_ids), (2 * T + 2) * sizeof(int32_t)),
                     "cudaMallocHost");
    SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_mask), T * T), "cudaMallocHost");
    scratch_T = T;
    return {};
  }

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

  // The route of a T-row product with W (N, K): one row always our skinny kernel (a decode
  // step); else the forced route of CudaBackendOptions where it can run, else by shape. The
  // tensor-core kernel is never picked: in whole verifies it lost to both others at every size
  // from 2 to 16 rows (1.9-2.6 ms on SmolLM2, 23-28 against 6.4 ms on Llama-8B), and it is not
  // exact either. head: the logits GEMM (28M weights on SmolLM2, exact like the small ones: its
  // rows are the logits a greedy verify compares).
  GemmRoute route(int64_t N, int64_t K, int64_t T, bool head) const {
    if (T == 1) return GemmRoute::kSkinny;
    const GemmRoute forced = head ? head_route : layer_route;
    if (forced == GemmRoute::kSkinny && T <= cuda::kSkinnyMaxRows) return GemmRoute::kSkinny;
    const bool tc_fits = T <= cuda::kSkinnyTcMaxRows && N % 16 == 0 && K % 16 == 0;
    if (forced == GemmRoute::kTensorCore && tc_fits) return GemmRoute::kTensorCore;
    if (forced != GemmRoute::kAuto) return GemmRoute::kCublas;
    const bool small = N * K <= kSmallMatrixWeights || head;
    if (T <= (small ? kExactVerifyRowsSmall : kExactVerifyRowsLarge)) return GemmRoute::kSkinny;
    return GemmRoute::kCublas;
  }

  Status gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t T, float* Y, int64_t ldy,
              bool accumulate, bool head = false) {
    const GemmRoute r = route(N, K, T, head);
    if (r == GemmRoute::kSkinny && cuda::skinny_gemm(W, N, K, X, K, T, Y, ldy, accumulate, stream)) return {};
    if (r == GemmRoute::kTensorCore && cuda::skinny_gemm_tc(W, N, K, X, K, T, Y, ldy, accumulate, stream)) return {};
    bf16_bits* hi = x_bf16.get();
    bf16_bits* lo = x_bf16.get() + T * K;
    cuda::f32_to_bf16_split(X, T * K, hi, lo, stream);
    if (T <= kStackedRows) {
      if (auto ok = gemm_halves(W, N, K, T); !ok) return ok;
      cuda::add_split_halves(y_split.get(), T, N, Y, ldy, accumulate, stream);
      return {};
    }
    const float one = 1.0f, zero = 0.0f;
    if (auto ok = cublas_bf16(W, N, K, hi, T, Y, ldy, accumulate ? &one : &zero); !ok) return ok;
    return cublas_bf16(W, N, K, lo, T, Y, ldy, &one);
  }

  // Whether gemm() takes the stacked cuBLAS path for this shape of a layer (route() says cuBLAS,
  // at most kStackedRows rows): there the forward's row ops may write the halves and sum the
  // products themselves (CudaSession::enqueue_forward, model_ops.h's split row ops).
  bool stacked(int64_t N, int64_t K, int64_t T) const {
    return route(N, K, T, false) == GemmRoute::kCublas && T <= kStackedRows;
  }

  // y_split (2T, N) = [hi; lo] · Wᵀ: the halves of X, hi (T, K) bf16 at x_bf16 and lo right after
  // it, as 2T columns of one cuBLAS GEMM (the weights read once).
  Status gemm_halves(const bf16_bits* W, int64_t N, int64_t K, int64_t T) {
    // cuBLASLt's timed pick only for large matrices: on Llama-8B's it took a 61-row 64K verify
    // from 13.41 to 13.13 ms, on SmolLM2's small ones it was 0.01-0.06 ms a verify slower.
    if (cublaslt_tuned && N * K > kSmallMatrixWeights) {
      return lt.run(W, N, K, x_bf16.get(), 2 * T, y_split.get(), stream);
    }
    const float zero = 0.0f;
    return cublas_bf16(W, N, K, x_bf16.get(), 2 * T, y_split.get(), N, &zero);
  }

  // Y (cols, N) = alpha · x (cols, K) · W(N, K)ᵀ + beta · Y, x bf16, f32 out and compute.
  Status cublas_bf16(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols, float* Y, int64_t ldy,
                     const float* beta) {
    const float one = 1.0f;
    const cublasStatus_t st =
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(cols), static_cast<int>(K),
                     &one, W, CUDA_R_16BF, static_cast<int>(K), x, CUDA_R_16BF, static_cast<int>(K), beta, Y,
                     CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st == CUBLAS_STATUS_SUCCESS) return {};
    return make_error("CUDA backend: cublasGemmEx (" + std::to_string(N) + "x" + std::to_string(K) + " by " +
                      std::to_string(cols) + " columns) failed: " + cublasGetStatusString(st));
  }

  // Y(T, N) = rmsnorm(X; gamma) · Wᵀ. One kernel for a decode step (the norm fused into the
  // skinny GEMM), else RMSNorm into xn and gemm(). X rows have stride K.
  Status gemm_norm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t T, const float* gamma, float* Y,
                   int64_t ldy, bool head = false) {
    const GemmRoute r = route(N, K, T, head);
    if (r == GemmRoute::kSkinny && cuda::skinny_gemm_norm(W, N, K, X, K, T, gamma, cfg.rms_eps, Y, ldy, stream)) {
      return {};
    }
    if (r == GemmRoute::kTensorCore &&
        cuda::skinny_gemm_tc_norm(W, N, K, X, K, T, gamma, cfg.rms_eps, Y, ldy, stream)) {
      return {};
    }
    cuda::rmsnorm_rows(X, K, gamma, T, K, cfg.rms_eps, xn.get(), stream);
    return gemm(W, N, K, xn.get(), T, Y, ldy, false, head);
  }

  // xn(T, ffn) = SwiGLU of rmsnorm(X; gamma) · gate_upᵀ: one kernel for a decode step, else
  // RMSNorm, the GEMM into gu and SwiGLU.
  Status gate_up_swiglu(const GpuLayer& L, const float* X, int64_t T) {
    const int64_t dim = cfg.dim, ffn = cfg.ffn_dim;
    const GemmRoute r = route(2 * ffn, dim, T, false);
    if (r == GemmRoute::kSkinny && cuda::skinny_gemm_norm_swiglu(L.gate_up.get(), ffn, dim, X, dim, T, L.ffn_norm.get(),
                                                                 cfg.rms_eps, xn.get(), ffn, stream)) {
      return {};
    }
    if (r == GemmRoute::kTensorCore &&
        cuda::skinny_gemm_tc_norm_swiglu(L.gate_up.get(), ffn, dim, X, dim, T, L.ffn_norm.get(), cfg.rms_eps, xn.get(),
                                         ffn, stream)) {
      return {};
    }
    cuda::rmsnorm_rows(X, dim, L.ffn_norm.get(), T, dim, cfg.rms_eps, xn.get(), stream);
    if (auto ok = gemm(L.gate_up.get(), 2 * ffn, dim, xn.get(), T, gu.get(), 2 * ffn, false); !ok) return ok;
    cuda::swiglu_rows(gu.get(), T, ffn, xn.get(), stream);
    return {};
  }
};

namespace {

class CudaSession final : public BackendSession {
 public:
  CudaSession(CudaBackend::Impl* b, int block_size, int64_t capacity) : b_(b), B_(block_size), capacity_(capacity) {}

  Status init() {
    const auto& c = b_->cfg;
    n_blocks_ = (capacity_ + B_ - 1) / B_;
    const int64_t kv_per_layer = n_blocks_ * c.n_kv_heads * B_ * c.head_dim;
    const int64_t meta_per_layer = n_blocks_ * c.n_kv_heads * c.head_dim;
    const uint64_t need = static_cast<uint64_t>(c.n_layers) * (2 * kv_per_layer * 2 + 2 * meta_per_layer * 4);
    if (auto ok = b_->check_free_memory(need, "a KV cache of " + std::to_string(capacity_) + " tokens"); !ok) return ok;
    if (auto ok = keys_.allocate(c.n_layers * kv_per_layer, "KV keys"); !ok) return ok;
    if (auto ok = values_.allocate(c.n_layers * kv_per_layer, "KV values"); !ok) return ok;
    if (auto ok = kmin_.allocate(c.n_layers * meta_per_layer, "KV key min"); !ok) return ok;
    if (auto ok = kmax_.allocate(c.n_layers * meta_per_layer, "KV key max"); !ok) return ok;
    if (auto ok = table_.allocate(n_blocks_, "KV block table"); !ok) return ok;
    // Decode steps and verifies (up to kMaxGraphRows tokens) split long contexts over blocks.
    split_ = cuda::attention_split_for(capacity_, c.head_dim);
    if (split_.splits > 1) {
      if (auto ok =
              split_partial_.allocate(kMaxGraphRows * c.n_heads * split_.partial_floats_per_pair, "attention split");
          !ok) {
        return ok;
      }
      if (auto ok = split_counters_.allocate(kMaxGraphRows * c.n_heads, "attention split counters"); !ok) return ok;
      SPECULA_CUDA_TRY(cudaMemset(split_counters_.get(), 0, kMaxGraphRows * c.n_heads * sizeof(int32_t)),
                       "attention split counters");
      split_.partial = split_partial_.get();
      split_.counters = split_counters_.get();
    }
    // One sequence: logical block i is physical block i. The table is there so a shared pool
    // (prefix sharing, several sequences) can later hand out blocks in any order.
    std::vector<int32_t> table(static_cast<size_t>(n_blocks_));
    for (int64_t i = 0; i < n_blocks_; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    SPECULA_CUDA_TRY(cudaMemcpy(table_.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice),
                     "block table upload");
    for (int64_t l = 0; l < c.n_layers; ++l) {
      cuda::PagedKvLayer k;
      k.keys = keys_.get() + l * kv_per_layer;
      k.values = values_.get() + l * kv_per_layer;
      k.key_min = kmin_.get() + l * meta_per_layer;
      k.key_max = kmax_.get() + l * meta_per_layer;
      k.block_table = table_.get();
      k.n_kv_heads = c.n_kv_heads;
      k.head_dim = c.head_dim;
      k.block_size = B_;
      layers_.push_back(k);
    }
    // One launch moves rows (commit) or recomputes min/max (commit, rollback) in every layer.
    layer_strides_ = cuda::KvLayerStrides{kv_per_layer, meta_per_layer, static_cast<int>(c.n_layers)};
    return {};
  }

  Status forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                 std::span<float> logits, LogitRows rows, const ForwardContext* context) override {
    const int64_t V = b_->cfg.vocab_size;
    const int64_t n_out = rows == LogitRows::All ? static_cast<int64_t>(tokens.size()) : 1;
    if (static_cast<int64_t>(logits.size()) != n_out * V) {
      return make_error("forward: logits buffer has " + std::to_string(logits.size()) + " floats, need " +
                        std::to_string(n_out * V));
    }
    return run_forward(tokens, positions, mask, rows, context, [&]() -> Status {
      SPECULA_CUDA_TRY(
          cudaMemcpyAsync(logits.data(), b_->logits.get(), n_out * V * 4, cudaMemcpyDeviceToHost, b_->stream),
          "logits download");
      return {};
    });
  }

  // The forward with each output row's argmax taken on the GPU (kernels/cuda/sampling.h): only
  // the ids come back, through a pinned buffer.
  Status forward_greedy(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                        std::span<int32_t> greedy, LogitRows rows, const ForwardContext* context) override {
    const int64_t n_out = rows == LogitRows::All ? static_cast<int64_t>(tokens.size()) : 1;
    if (static_cast<int64_t>(greedy.size()) != n_out) {
      return make_error("forward_greedy: room for " + std::to_string(greedy.size()) + " tokens, the forward gives " +
                        std::to_string(n_out));
    }
    if (auto ok = ensure_choice_buffers(n_out); !ok) return ok;
    auto ran = run_forward(tokens, positions, mask, rows, context, [&]() -> Status {
      cuda::argmax_rows(b_->logits.get(), n_out, b_->cfg.vocab_size, choice_ids_.get(), b_->stream);
      SPECULA_CUDA_TRY(cudaGetLastError(), "argmax launch");
      SPECULA_CUDA_TRY(cudaMemcpyAsync(host_choice_ids_, choice_ids_.get(), n_out * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, b_->stream),
                       "greedy token download");
      return {};
    });
    if (!ran) return ran;
    std::memcpy(greedy.data(), host_choice_ids_, greedy.size_bytes());
    return {};
  }

  // The last row's top-k under softmax(logits / temperature) on the GPU; k ids and k
  // probabilities come back.
  Status forward_top_k(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                       float temperature, std::span<int32_t> ids, std::span<float> probs,
                       const ForwardContext* context) override {
    const auto k = static_cast<int64_t>(ids.size());
    if (k < 1 || k > cuda::kTopKMax || probs.size() != ids.size()) {
      return make_error("forward_top_k: " + std::to_string(ids.size()) + " ids and " + std::to_string(probs.size()) +
                        " probabilities; want the same count, 1.." + std::to_string(cuda::kTopKMax));
    }
    if (!(temperature > 0))
      return make_error("forward_top_k: temperature " + std::to_string(temperature) + " is not > 0");
    if (k > b_->cfg.vocab_size) return make_error("forward_top_k: more ids than the vocabulary has tokens");
    if (auto ok = ensure_choice_buffers(k); !ok) return ok;
    auto ran = run_forward(tokens, positions, mask, LogitRows::Last, context, [&]() -> Status {
      cuda::top_k_softmax_row(b_->logits.get(), b_->cfg.vocab_size, static_cast<int>(k), temperature, choice_ids_.get(),
                              choice_probs_.get(), b_->stream);
      SPECULA_CUDA_TRY(cudaGetLastError(), "top-k launch");
      SPECULA_CUDA_TRY(
          cudaMemcpyAsync(host_choice_ids_, choice_ids_.get(), k * sizeof(int32_t), cudaMemcpyDeviceToHost, b_->stream),
          "top-k id download");
      SPECULA_CUDA_TRY(cudaMemcpyAsync(host_choice_probs_, choice_probs_.get(), k * sizeof(float),
                                       cudaMemcpyDeviceToHost, b_->stream),
                       "top-k probability download");
      return {};
    });
    if (!ran) return ran;
    std::memcpy(ids.data(), host_choice_ids_, ids.size_bytes());
    std::memcpy(probs.data(), host_choice_probs_, probs.size_bytes());
    return {};
  }

  int64_t vocab_size() const override { return b_->cfg.vocab_size; }

  // Validates, uploads and launches a forward (a graph replay where its shape has one), then
  // enqueue_outputs() queues what comes back to the host (logits, or ids picked on the GPU), and
  // the forward waits for it.
  Status run_forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                     LogitRows rows, const ForwardContext* context, const std::function<Status()>& enqueue_outputs) {
    auto& b = *b_;
    const auto& c = b.cfg;
    const auto T = static_cast<int64_t>(tokens.size());
    if (T == 0) return make_error("forward: no tokens");
    const SparseConfig* sparse = context && context->sparse && !context->sparse->strict() ? context->sparse : nullptr;
    if (sparse) {
      if (auto ok = cuda_sparse_supported(*sparse); !ok) return ok;
    }
    if (static_cast<int64_t>(positions.size()) != T) {
      return make_error("forward: " + std::to_string(T) + " tokens but " + std::to_string(positions.size()) +
                        " positions");
    }
    if (mask && mask->size() != T) {
      return make_error("forward: attention mask is " + std::to_string(mask->size()) + "x" +
                        std::to_string(mask->size()) + " for " + std::to_string(T) + " tokens");
    }
    const int64_t V = c.vocab_size;
    for (int64_t t = 0; t < T; ++t) {
      if (tokens[t] < 0 || tokens[t] >= V) {
        return make_error("forward: token id " + std::to_string(tokens[t]) + " outside the vocabulary (0.." +
                          std::to_string(V - 1) + ")");
      }
      if (positions[t] < 0) return make_error("forward: negative position " + std::to_string(positions[t]));
    }
    const int64_t first_new = committed_ + provisional_;
    if (first_new + T > capacity_) {
      return make_error("forward: KV cache full (" + std::to_string(first_new) + " + " + std::to_string(T) +
                        " rows > capacity " + std::to_string(capacity_) + ")");
    }
    if (auto ok = b.ensure_scratch(T); !ok) return ok;
    const SparseConfig* ffn_sparse = sparse && sparse->ffn ? sparse : nullptr;
    if (ffn_sparse) {
      if (auto ok = prepare_sparse_ffn(T); !ok) return ok;
    }
    // Sparse verification past L_b, or a dense verify on the tree-attention kernels.
    std::optional<SparsePlan> plan;
    if (auto ok = plan_tree_verify(T, mask, first_new, sparse, context, &plan); !ok) return ok;
    if (min_max_stale_) update_min_max(committed_ + provisional_);
    provisional_ += T;

    cudaStream_t s = b.stream;
    std::memcpy(b.host_ids, tokens.data(), T * 4);
    std::memcpy(b.host_ids + T, positions.data(), T * 4);
    b.host_ids[2 * T] = static_cast<int32_t>(committed_);
    b.host_ids[2 * T + 1] = static_cast<int32_t>(first_new);
    SPECULA_CUDA_TRY(cudaMemcpyAsync(b.ids.get(), b.host_ids, (2 * T + 2) * 4, cudaMemcpyHostToDevice, s),
                     "token upload");
    const uint8_t* mask_dev = nullptr;
    if (mask) {
      for (int64_t i = 0; i < T; ++i) std::memcpy(b.host_mask + i * T, mask->row(i), static_cast<size_t>(T));
      SPECULA_CUDA_TRY(cudaMemcpyAsync(b.mask.get(), b.host_mask, T * T, cudaMemcpyHostToDevice, s), "mask upload");
      mask_dev = b.mask.get();
    }
    // Decode steps and tree verifies replay graphs (one per shape); a prefill is launched. A
    // planned tree verify is launched too: its grids and list sizes follow the committed length
    // (select_blocks sizes its launches on the host), so a graph would be re-captured every step.
    // A sparse FFN forward is launched too: it is not one of the graphs' shapes, and its counts
    // are copied out per layer.
    const bool graphed = !plan && !ffn_sparse && b.cuda_graphs &&
                         ((T == 1 && !mask && rows == LogitRows::Last) || (mask && T <= kMaxGraphRows));
    if (plan) {
      SPECULA_CUDA_TRY(cudaMemsetAsync(listed_rows_.get(), 0, sizeof(unsigned long long), s), "sparse verify");
    }
    if (T > 1 && !plan) min_max_stale_ = true;  // enqueue_forward leaves it to the commit
    if (graphed) {
      if (auto ok = launch_graph(T, mask_dev, rows); !ok) return ok;
    } else if (auto ok = enqueue_forward(T, mask_dev, rows, plan ? &*plan : nullptr, ffn_sparse); !ok) {
      return ok;
    }
    SPECULA_CUDA_TRY(cudaGetLastError(), "kernel launch in forward");
    if (auto ok = enqueue_outputs(); !ok) return ok;
    if (plan) {
      SPECULA_CUDA_TRY(
          cudaMemcpyAsync(host_listed_rows_, listed_rows_.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, s),
          "sparse verify");
    }
    // The forward's one host synchronization: its outputs must be on the host.
    SPECULA_CUDA_TRY(cudaStreamSynchronize(s), "forward");
    if (ffn_sparse && context) report_sparse_ffn(T, *context);
    if (context && context->sparse && context->stats) {
      // Bytes this backend reads: bf16 K and V rows, f32 block min/max for scoring.
      const int64_t row_bytes = c.head_dim * 2 * 2;
      const int64_t dense_bytes = c.n_layers * c.n_kv_heads * committed_ * row_bytes;
      context->stats->kv_bytes_dense += dense_bytes;
      context->stats->kv_bytes_read +=
          plan ? static_cast<int64_t>(*host_listed_rows_) * row_bytes + plan->meta_bytes + plan->dense_layer_bytes
               : dense_bytes;
    }
    return {};
  }

  // Bench only: see cuda_fill_kv_random_for_bench.
  Status fill_kv_random(int64_t rows, uint64_t seed) {
    if (rows <= 0 || rows > capacity_) {
      return make_error("fill_kv_random: " + std::to_string(rows) + " rows outside 1.." + std::to_string(capacity_));
    }
    cuda::fill_uniform_bf16(keys_.get(), static_cast<int64_t>(keys_.size()), seed * 2 + 1, 1.0f, b_->stream);
    cuda::fill_uniform_bf16(values_.get(), static_cast<int64_t>(values_.size()), seed * 2 + 2, 1.0f, b_->stream);
    committed_ = 0;
    provisional_ = 0;
    if (auto ok = finish(rows); !ok) return ok;
    SPECULA_CUDA_TRY(cudaStreamSynchronize(b_->stream), "fill_kv_random");
    return {};
  }

  ~CudaSession() override {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (rows_uploaded_) cudaEventDestroy(rows_uploaded_);
    if (host_rows_) cudaFreeHost(host_rows_);
    if (host_listed_rows_) cudaFreeHost(host_listed_rows_);
    if (host_ffn_counts_) cudaFreeHost(host_ffn_counts_);
    if (host_choice_ids_) cudaFreeHost(host_choice_ids_);
    if (host_choice_probs_) cudaFreeHost(host_choice_probs_);
  }

  Status commit(std::span<const int> keep_rows) override {
    const auto n = static_cast<int64_t>(keep_rows.size());
    std::vector<bool> seen(static_cast<size_t>(provisional_), false);
    for (int64_t i = 0; i < n; ++i) {
      const int r = keep_rows[static_cast<size_t>(i)];
      if (r < 0 || r >= provisional_ || seen[static_cast<size_t>(r)]) {
        return make_error("commit: provisional row " + std::to_string(r) + " is out of range (0.." +
                          std::to_string(provisional_ - 1) + ") or repeated");
      }
      seen[static_cast<size_t>(r)] = true;
    }
    if (n > 0) {
      const auto& c = b_->cfg;
      if (n > move_capacity_) {
        if (auto ok = move_rows_.allocate(2 * n, "commit rows"); !ok) return ok;
        if (auto ok = move_scratch_.allocate(c.n_layers * n * 2 * c.n_kv_heads * c.head_dim, "commit scratch"); !ok) {
          return ok;
        }
        if (host_rows_) cudaFreeHost(host_rows_);
        host_rows_ = nullptr;
        SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_rows_), 2 * n * sizeof(int32_t)),
                         "cudaMallocHost");
        move_capacity_ = n;
      }
      // The staging buffer may still feed the last commit's copy if no forward (which waits for
      // the stream) came between: wait for that copy only.
      if (rows_uploaded_) SPECULA_CUDA_TRY(cudaEventSynchronize(rows_uploaded_), "commit");
      for (int64_t i = 0; i < n; ++i) {
        host_rows_[i] = static_cast<int32_t>(committed_ + keep_rows[static_cast<size_t>(i)]);
        host_rows_[n + i] = static_cast<int32_t>(committed_ + i);
      }
      SPECULA_CUDA_TRY(
          cudaMemcpyAsync(move_rows_.get(), host_rows_, 2 * n * sizeof(int32_t), cudaMemcpyHostToDevice, b_->stream),
          "commit");
      if (!rows_uploaded_)
        SPECULA_CUDA_TRY(cudaEventCreateWithFlags(&rows_uploaded_, cudaEventDisableTiming), "commit");
      SPECULA_CUDA_TRY(cudaEventRecord(rows_uploaded_, b_->stream), "commit");
      cuda::kv_move_rows_layers(layers_.front(), layer_strides_, move_rows_.get(), move_rows_.get() + n, n,
                                move_scratch_.get(), b_->stream);
    }
    return finish(n);
  }

  void commit_all() override {
    if (min_max_stale_) update_min_max(committed_ + provisional_);
    committed_ += provisional_;
    provisional_ = 0;
  }
  void rollback() override { (void)finish(0); }
  Status truncate(int64_t rows) override {
    if (rows < 0 || rows > committed_) {
      return make_error("KV truncate: " + std::to_string(rows) + " rows outside 0.." + std::to_string(committed_));
    }
    committed_ = rows;
    provisional_ = 0;
    return finish(0);  // the block min/max of the cut block, over the rows left in it
  }
  int64_t committed() const override { return committed_; }
  int64_t capacity() const override { return capacity_; }

 private:
  // Key min/max of the blocks from the last committed row's block up to `rows`, over the rows
  // present, in every layer (one launch): after a commit, a rollback or a cut, and where a forward of
  // several rows without a sparse plan left it stale (enqueue_forward does not update it then).
  void update_min_max(int64_t rows) {
    cuda::kv_update_min_max_layers(layers_.front(), layer_strides_, committed_ / B_, (rows + B_ - 1) / B_, rows,
                                   b_->stream);
    min_max_stale_ = false;
  }

  // Keeps n rows after the committed ones; block min/max is recomputed over the rows present.
  Status finish(int64_t n) {
    const int64_t rows = committed_ + n;
    update_min_max(rows);
    committed_ = rows;
    provisional_ = 0;
    // No wait for the GPU: the moves and min/max run before the next forward on the same stream,
    // and that forward's wait for its logits reports any error they hit.
    SPECULA_CUDA_TRY(cudaGetLastError(), "KV commit");
    return {};
  }

  // A tree verify that does not take attention_at's dense graph path: sparse verification past
  // L_b (engine/sparse/sparse_config.h), or (tree_attention_kernels) a dense verify on the
  // tree-attention kernels. Mirrors the CPU's SparseSelection (engine/sparse/sparse_attention.cpp)
  // layer by layer: dense_layers dense, anchors refresh, the other layers reuse the last refresh.
  struct SparsePlan {
    const SparseConfig* cfg = nullptr;  // null: every layer dense (tree_attention_kernels)
    const ForwardContext* context = nullptr;
    bool fast = false;              // tree_attention_sparse/dense (16-token blocks, head_dim 128); else attention_at
    int64_t committed = 0, nb = 0;  // committed rows and blocks
    cuda::SelectParams sp;
    std::vector<int32_t> order;     // kernel node i = forward row order[i]
    int64_t meta_bytes = 0;         // f32 block min/max read by refresh layers' scoring
    int64_t dense_layer_bytes = 0;  // K/V of the layers that attend densely
    bool lists_on_host = false;     // the last refresh's lists, downloaded for the observer
    std::vector<int32_t> blocks, counts;
    std::vector<uint64_t> members;
  };

  // Decides whether forward() takes a planned path and sizes its buffers. The budget is the CPU's:
  // k = kept_blocks(L) blocks per KV head among the committed ones, sink and local included.
  // select_blocks forces the sink blocks, the blocks from prefix_len / B - local on (which holds a
  // partly committed last block and the tree's rows) and takes top_k more by score; so local is
  // passed one lower when the last committed block is partial, and top_k = k minus the forced
  // committed blocks: the same kept set as the CPU (with local_blocks 0 and a partial last block,
  // the CUDA path keeps that block too, as it holds the tree's own rows).
  Status plan_tree_verify(int64_t T, const AttentionMask* mask, int64_t first_new, const SparseConfig* sparse,
                          const ForwardContext* context, std::optional<SparsePlan>* out) {
    const auto& c = b_->cfg;
    const bool fast_shape = c.head_dim == cuda::kAttnHeadDim && B_ == cuda::kAttnBlockSize && first_new == committed_ &&
                            T <= cuda::kAttnMaxNodes;
    const int64_t nb = (committed_ + B_ - 1) / B_;
    const int64_t k = sparse ? kept_blocks(*sparse, committed_, static_cast<int>(B_)) : nb;
    const bool sparse_active = sparse && sparse->attention && committed_ > 0 && k < nb;
    const bool dense_fast = !sparse_active && b_->tree_attention_kernels && mask && fast_shape && committed_ > 0;
    if (!sparse_active && !dense_fast) return {};
    if (sparse_active && T > cuda::kAttnMaxNodes) {
      return make_error("forward: sparse verification on the CUDA backend takes at most " +
                        std::to_string(cuda::kAttnMaxNodes) + " rows (the pending token and " +
                        std::to_string(cuda::kAttnMaxNodes - 1) + " tree nodes), got " + std::to_string(T));
    }
    if (sparse_active && c.head_dim != 64 && c.head_dim != 128) {
      return make_error("forward: sparse verification on the CUDA backend needs head_dim 64 or 128 (this model: " +
                        std::to_string(c.head_dim) + "); use --backend cpu");
    }
    SparsePlan& p = out->emplace();
    p.cfg = sparse_active ? sparse : nullptr;
    p.context = context;
    p.fast = fast_shape;
    p.committed = committed_;
    p.nb = nb;
    p.order.resize(static_cast<size_t>(T));
    std::iota(p.order.begin(), p.order.end(), 0);
    if (sparse_active && context && static_cast<int64_t>(context->query_order.size()) == T) {
      p.order.assign(context->query_order.begin(), context->query_order.end());
      std::vector<bool> seen(static_cast<size_t>(T), false);
      for (int32_t r : p.order) {
        if (r < 0 || r >= T || seen[static_cast<size_t>(r)])
          return make_error("forward: query_order is not a permutation of the rows");
        seen[static_cast<size_t>(r)] = true;
      }
    }
    if (sparse_active) {
      const SparseConfig& cfg = *sparse;
      int64_t forced = 0;
      for (int64_t blk = 0; blk < nb; ++blk) forced += (blk < cfg.sink_blocks || blk >= nb - cfg.local_blocks) ? 1 : 0;
      p.sp.top_k = static_cast<int>(std::max<int64_t>(0, k - forced));
      p.sp.sink_blocks = cfg.sink_blocks;
      p.sp.local_blocks = committed_ % B_ != 0 && cfg.local_blocks > 0 ? cfg.local_blocks - 1 : cfg.local_blocks;
      p.sp.group_size = cfg.group_size;
      switch (cfg.query_mode) {
        case QueryMode::kFirst:
          p.sp.mode = cuda::QueryMode::kFirstQuery;
          break;
        case QueryMode::kPerQuery:
          p.sp.mode = cuda::QueryMode::kPerQuery;
          break;
        case QueryMode::kGroupUnion:
          p.sp.mode = cuda::QueryMode::kGroupUnion;
          break;
        case QueryMode::kGroupShared:
          p.sp.mode = cuda::QueryMode::kGroupShared;
          break;
      }
      p.sp.block_size = static_cast<int>(B_);
      p.sp.head_dim = static_cast<int>(c.head_dim);
    }
    // Host staging: order (T int32) then ancestors (T uint64, node order) for the fast kernels.
    std::vector<uint64_t> ancestors(static_cast<size_t>(T), 0);
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t j = 0; j < T; ++j) {
        const int32_t r = p.order[static_cast<size_t>(i)], q = p.order[static_cast<size_t>(j)];
        const bool sees = mask ? mask->row(r)[q] != 0 : q <= r;
        if (sees) ancestors[static_cast<size_t>(i)] |= uint64_t{1} << j;
      }
    }
    // Device buffers, grown to this verify's sizes.
    cuda::TreeQueries tq{
        nullptr, nullptr, static_cast<int>(T), static_cast<int>(c.n_heads), static_cast<int>(committed_), 0.0f};
    const int kvh = static_cast<int>(c.n_kv_heads);
    size_t select_ws = 0, attn_ws = 0, list_entries = 0;
    if (sparse_active) {
      int groups = 0, gs = 0, max_blocks = 0;
      cuda::select_list_shape(tq, p.sp, &groups, &gs, &max_blocks);
      select_ws = cuda::select_workspace_bytes(tq, kvh, p.sp);
      list_entries = size_t(groups) * kvh * max_blocks;
      if (p.fast) attn_ws = cuda::attention_workspace_bytes(tq, kvh, groups, gs, max_blocks);
    }
    if (p.fast) {
      const int all_blocks = static_cast<int>((committed_ + T + B_ - 1) / B_);
      attn_ws = std::max(attn_ws, cuda::attention_workspace_bytes(tq, kvh, 1, static_cast<int>(T), all_blocks));
    }
    const size_t qd = static_cast<size_t>(b_->q_dim());
    if (auto ok = grow(sparse_q_, size_t(T) * qd, "sparse verify queries"); !ok) return ok;
    if (auto ok = grow(sparse_out_, size_t(T) * qd, "sparse verify output"); !ok) return ok;
    if (auto ok = grow(select_ws_, select_ws, "block selection workspace"); !ok) return ok;
    if (auto ok = grow(attn_ws_, attn_ws, "tree attention workspace"); !ok) return ok;
    if (auto ok = grow(list_blocks_, list_entries, "block lists"); !ok) return ok;
    if (auto ok = grow(list_members_, list_entries, "block list members"); !ok) return ok;
    if (auto ok = grow(list_counts_, size_t(T) * kvh, "block list counts"); !ok) return ok;
    if (!p.fast && sparse_active) {
      if (auto ok = grow(visible_, size_t(T) * kvh * nb, "block visibility"); !ok) return ok;
    }
    if (auto ok = grow(order_dev_, size_t(cuda::kAttnMaxNodes), "row order"); !ok) return ok;
    if (auto ok = grow(ancestors_dev_, size_t(cuda::kAttnMaxNodes), "tree ancestors"); !ok) return ok;
    if (auto ok = grow(listed_rows_, 1, "listed rows"); !ok) return ok;
    if (!host_listed_rows_) {
      SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_listed_rows_), sizeof(unsigned long long)),
                       "cudaMallocHost");
    }
    // Synchronous copies from pageable memory: these buffers may still feed the previous
    // forward's kernels only if it had not returned, and forward() always waits for its logits.
    SPECULA_CUDA_TRY(cudaMemcpy(order_dev_.get(), p.order.data(), size_t(T) * 4, cudaMemcpyHostToDevice),
                     "row order upload");
    SPECULA_CUDA_TRY(cudaMemcpy(ancestors_dev_.get(), ancestors.data(), size_t(T) * 8, cudaMemcpyHostToDevice),
                     "ancestors upload");
    return {};
  }

  // Layer l's attention under the plan: att (T, q_dim) f32 from the rows' queries in b.qkv.
  Status planned_attention(SparsePlan& p, int l, const cuda::PagedKvLayer& kv, int64_t T, const uint8_t* mask_dev,
                           const int32_t* step_dev) {
    auto& b = *b_;
    const auto& c = b.cfg;
    cudaStream_t s = b.stream;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const int64_t qd = b.q_dim(), ld = b.qkv_dim();
    const int kvh = static_cast<int>(c.n_kv_heads);
    const bool dense = !p.cfg || l < p.cfg->dense_layers;
    // A layer whose anchor attends densely has no selection to reuse: it selects itself (as on the CPU).
    const bool reuse = !dense && p.cfg->reuses(l) && p.cfg->anchor_for(l) >= p.cfg->dense_layers;
    cuda::PagedKv pkv;
    pkv.k = kv.keys;
    pkv.v = kv.values;
    pkv.block_table = kv.block_table;
    pkv.kv_heads = kvh;
    const cuda::TreeQueries tq{sparse_q_.get(),
                               ancestors_dev_.get(),
                               static_cast<int>(T),
                               static_cast<int>(c.n_heads),
                               static_cast<int>(p.committed),
                               scale};
    if (p.fast || (!dense && !reuse))
      cuda::q_rows_to_bf16(b.qkv.get(), ld, T, qd, order_dev_.get(), sparse_q_.get(), s);
    std::string error;
    const auto failed = [&](const char* what) {
      return make_error("CUDA backend: layer " + std::to_string(l) + " " + what + ": " + error);
    };
    if (dense) {
      p.dense_layer_bytes += c.n_kv_heads * p.committed * c.head_dim * 2 * 2;
      if (p.fast) {
        if (!cuda::tree_attention_dense(pkv, tq, sparse_out_.get(), attn_ws_.get(), attn_ws_.size(), s, &error)) {
          return failed("dense tree attention");
        }
        cuda::rows_bf16_to_f32(sparse_out_.get(), T, qd, order_dev_.get(), b.att.get(), s);
      } else {
        cuda::attention_at(b.qkv.get(), ld, T, c.n_heads, kv, step_dev, mask_dev, scale, b.att.get(), s, split_);
      }
      return p.cfg ? observe_selection(p, l, T, false, true) : Status{};
    }
    if (!reuse) {
      p.sp.block_min_f32 = kv.key_min;
      p.sp.block_max_f32 = kv.key_max;
      lists_ = cuda::BlockLists{list_blocks_.get(), list_members_.get(), list_counts_.get(), 0, 0, 0};
      if (!cuda::select_blocks(pkv, tq, p.sp, &lists_, select_ws_.get(), select_ws_.size(), nullptr, s, &error)) {
        return failed("block selection");
      }
      p.meta_bytes += c.n_kv_heads * p.nb * 2 * c.head_dim * 4;
      if (!p.fast) {
        cuda::block_lists_to_visibility(lists_, static_cast<int>(T), kvh, static_cast<int>(p.nb), order_dev_.get(),
                                        visible_.get(), s);
      }
      p.lists_on_host = false;
    }
    cuda::add_listed_rows(lists_, kvh, p.committed, static_cast<int>(B_), listed_rows_.get(), s);
    if (p.fast) {
      if (!cuda::tree_attention_sparse(pkv, tq, lists_, sparse_out_.get(), attn_ws_.get(), attn_ws_.size(), s,
                                       &error)) {
        return failed("sparse tree attention");
      }
      cuda::rows_bf16_to_f32(sparse_out_.get(), T, qd, order_dev_.get(), b.att.get(), s);
    } else {
      cuda::attention_at(b.qkv.get(), ld, T, c.n_heads, kv, step_dev, mask_dev, scale, b.att.get(), s, split_,
                         visible_.get());
    }
    return observe_selection(p, l, T, reuse, false);
  }

  // The CPU's layer-selection events (engine/sparse/sparse_attention.cpp, observe()): the union
  // over rows, each group's union under grouped modes, and (kQuerySelection) each row's blocks;
  // bit h·nb + b is committed block b of KV head h. Downloads the lists (a host sync per refresh
  // layer), so only when someone listens.
  Status observe_selection(SparsePlan& p, int l, int64_t T, bool reuse, bool dense) {
    Observer* observer = p.context ? p.context->observer : nullptr;
    if (!observes(observer, EventKind::kLayerSelection)) return {};
    const int64_t H = b_->cfg.n_kv_heads, nb = p.nb;
    // rows[h][r]: committed blocks row r reads on KV head h.
    std::vector<std::vector<std::vector<int32_t>>> rows(static_cast<size_t>(H),
                                                        std::vector<std::vector<int32_t>>(static_cast<size_t>(T)));
    if (dense) {
      std::vector<int32_t> all(static_cast<size_t>(nb));
      std::iota(all.begin(), all.end(), 0);
      for (auto& per_head : rows) {
        for (auto& r : per_head) r = all;
      }
    } else {
      if (!p.lists_on_host) {
        const size_t entries = size_t(lists_.groups) * H * lists_.max_blocks;
        p.blocks.resize(entries);
        p.members.resize(entries);
        p.counts.resize(size_t(lists_.groups) * H);
        SPECULA_CUDA_TRY(
            cudaMemcpyAsync(p.blocks.data(), lists_.blocks, entries * 4, cudaMemcpyDeviceToHost, b_->stream),
            "block lists download");
        SPECULA_CUDA_TRY(
            cudaMemcpyAsync(p.members.data(), lists_.members, entries * 8, cudaMemcpyDeviceToHost, b_->stream),
            "block lists download");
        SPECULA_CUDA_TRY(
            cudaMemcpyAsync(p.counts.data(), lists_.counts, p.counts.size() * 4, cudaMemcpyDeviceToHost, b_->stream),
            "block lists download");
        SPECULA_CUDA_TRY(cudaStreamSynchronize(b_->stream), "block lists download");
        p.lists_on_host = true;
      }
      for (int g = 0; g < lists_.groups; ++g) {
        for (int64_t h = 0; h < H; ++h) {
          const size_t base = (size_t(g) * H + h) * lists_.max_blocks;
          for (int e = 0; e < p.counts[size_t(g) * H + h]; ++e) {
            const int32_t blk = p.blocks[base + e];
            if (blk >= nb) continue;
            for (int i = 0; i < T; ++i) {
              if (p.members[base + e] >> i & 1) rows[size_t(h)][size_t(p.order[size_t(i)])].push_back(blk);
            }
          }
        }
      }
      for (auto& per_head : rows) {
        for (auto& r : per_head) std::sort(r.begin(), r.end());
      }
    }
    const auto event = [&](int32_t query, int32_t group, const std::function<bool(int64_t row)>& includes) {
      LayerSelectionEvent e;
      e.round = p.context->round;
      e.layer = l;
      e.query = query;
      e.group = group;
      e.mode = reuse ? SelectionMode::kReuse : SelectionMode::kRefresh;
      e.anchor_layer = reuse ? p.cfg->anchor_for(l) : -1;
      e.total_blocks = static_cast<int32_t>(H * nb);
      std::vector<int32_t> ids;
      for (int64_t h = 0; h < H; ++h) {
        std::vector<bool> in(static_cast<size_t>(nb), false);
        for (int64_t r = 0; r < T; ++r) {
          if (!includes(r)) continue;
          for (int32_t blk : rows[size_t(h)][size_t(r)]) in[size_t(blk)] = true;
        }
        for (int64_t blk = 0; blk < nb; ++blk) {
          if (in[size_t(blk)]) ids.push_back(static_cast<int32_t>(h * nb + blk));
        }
      }
      e.block_bits = pack_block_bits(ids, e.total_blocks);
      observer->on_event(e);
    };
    event(-1, -1, [](int64_t) { return true; });
    const QueryMode mode = p.cfg->query_mode;
    const int64_t C = p.cfg->group_size;
    const bool grouped = mode == QueryMode::kGroupUnion || mode == QueryMode::kGroupShared;
    std::vector<int32_t> group_of(static_cast<size_t>(T), -1);  // row -> its group (traversal order)
    if (grouped) {
      for (int64_t i = 0; i < T; ++i) group_of[size_t(p.order[size_t(i)])] = static_cast<int32_t>(i / C);
      for (int32_t g = 0; g * C < T; ++g) event(-1, g, [&](int64_t r) { return group_of[size_t(r)] == g; });
    }
    if (observes(observer, EventKind::kQuerySelection)) {
      for (int64_t r = 0; r < T; ++r) {
        event(static_cast<int32_t>(r), group_of[size_t(r)], [r](int64_t row) { return row == r; });
      }
    }
    return {};
  }

  // Enqueues the forward of T new tokens, from the embedding to the logits GEMM, reading the
  // tokens, positions and step scalars that forward() uploaded to b.ids.
  Status enqueue_forward(int64_t T, const uint8_t* mask_dev, LogitRows rows, SparsePlan* plan = nullptr,
                         const SparseConfig* ffn_sparse = nullptr) {
    auto& b = *b_;
    const auto& c = b.cfg;
    cudaStream_t s = b.stream;
    const int32_t* tok_dev = b.ids.get();
    const int32_t* pos_dev = b.ids.get() + T;
    const int32_t* step_dev = b.ids.get() + 2 * T;
    const int64_t dim = c.dim, qd = b.q_dim(), kvd = b.kv_dim(), ld = b.qkv_dim(), ffn = c.ffn_dim, V = c.vocab_size;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const bool adjacent = c.rope_style == RopeStyle::AdjacentPairs;
    // Every projection on cuBLAS's stacked split path (a verify of more rows than the skinny
    // kernels take, e.g. a 60-node tree): the row ops between two GEMMs then read the product
    // halves and write the next GEMM's input halves themselves (model_ops.h), 5 small launches a
    // layer instead of 11 (add, norm, split, add, SwiGLU, split, add of the unfused path).
    const bool split_ops = !ffn_sparse && b.stacked(ld, dim, T) && b.stacked(dim, qd, T) &&
                           b.stacked(2 * ffn, dim, T) && b.stacked(dim, ffn, T) && cuda::split_row_ops_fit(dim, ffn);
    bf16_bits* halves = b.x_bf16.get();
    // The new rows' block key min/max only where this forward's sparse selection reads it (a plan
    // with a config; a plan without one attends densely in every layer); else the commit
    // recomputes it for all layers at once: a launch a layer less in every verify (5.7 us each at 5
    // rows on the H100, bench/results/cuda_verify_profile_smollm2_h100_2026-11-24.json; 7.4 us at
    // 61 rows of the 8B, cuda_verify_8b_64k_profile_s9_db2b338_h100_2026-11-24.json).
    const bool min_max_now = plan && plan->cfg;
    if (T > 1 && !min_max_now) min_max_stale_ = true;
    cuda::embed_rows(b.embd.get(), tok_dev, T, dim, b.x.get(), s);
    if (split_ops) cuda::rmsnorm_split_rows(b.x.get(), dim, b.layers[0].attn_norm.get(), T, dim, c.rms_eps, halves, s);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const GpuLayer& L = b.layers[static_cast<size_t>(l)];
      const cuda::PagedKvLayer& kv = layers_[static_cast<size_t>(l)];
      // Five launches a layer at decode: norm+QKV, RoPE+append+attention, Wo (+residual),
      // norm+gate_up+SwiGLU, down (+residual); larger batches split the fused ones.
      if (split_ops) {
        // The halves of rmsnorm(x) are in x_bf16 (the launch before the loop or the last layer's).
        if (auto ok = b.gemm_halves(L.qkv.get(), ld, dim, T); !ok) return ok;
      } else if (auto ok = b.gemm_norm(L.qkv.get(), ld, dim, b.x.get(), T, L.attn_norm.get(), b.qkv.get(), ld); !ok) {
        return ok;
      }
      // A decode step's RoPE, K/V append and attention in one launch (kernels/cuda/decode_attention.h;
      // it takes head_dim 64 and 128), else RoPE+append, then attention.
      const bool fused = T == 1 && !mask_dev && !plan && b.fused_decode_attention &&
                         cuda::decode_attention_at(b.qkv.get(), c.n_heads, qd + kvd, pos_dev, c.rope_theta, adjacent,
                                                   kv, step_dev, scale, b.att.get(), split_, s);
      if (!fused) {
        if (T == 1) {
          cuda::rope_append_decode_at(b.qkv.get(), c.n_heads, c.n_kv_heads, c.head_dim, pos_dev, c.rope_theta, adjacent,
                                      kv, qd + kvd, step_dev, s);
        } else if (split_ops) {
          cuda::rope_append_halves_at(b.y_split.get(), b.qkv.get(), ld, T, c.n_heads, c.n_kv_heads, c.head_dim, pos_dev,
                                      c.rope_theta, adjacent, kv, qd + kvd, step_dev, min_max_now, s);
        } else {
          cuda::rope_append_at(b.qkv.get(), ld, T, c.n_heads, c.n_kv_heads, c.head_dim, pos_dev, c.rope_theta, adjacent,
                               kv, qd + kvd, step_dev, min_max_now, s);
        }
        if (plan) {
          if (auto ok = planned_attention(*plan, static_cast<int>(l), kv, T, mask_dev, step_dev); !ok) return ok;
        } else {
          cuda::attention_at(b.qkv.get(), ld, T, c.n_heads, kv, step_dev, mask_dev, scale, b.att.get(), s,
                             T <= kMaxGraphRows ? split_ : cuda::AttentionSplit{});
        }
      }
      if (split_ops) {
        // x += att·Woᵀ, then the halves of rmsnorm(x; ffn_norm) for gate_up, SwiGLU's halves for
        // down, and x += down's product with the next layer's norm halves (or a plain add after
        // the last layer: the logits GEMM has a norm of its own).
        cuda::f32_to_bf16_split(b.att.get(), T * qd, halves, halves + T * qd, s);
        if (auto ok = b.gemm_halves(L.wo.get(), dim, qd, T); !ok) return ok;
        cuda::add_halves_rmsnorm_split_rows(b.y_split.get(), T, dim, b.x.get(), L.ffn_norm.get(), c.rms_eps, halves, s);
        if (auto ok = b.gemm_halves(L.gate_up.get(), 2 * ffn, dim, T); !ok) return ok;
        cuda::swiglu_halves_split_rows(b.y_split.get(), T, ffn, halves, s);
        if (auto ok = b.gemm_halves(L.down.get(), dim, ffn, T); !ok) return ok;
        if (l + 1 < c.n_layers) {
          cuda::add_halves_rmsnorm_split_rows(b.y_split.get(), T, dim, b.x.get(),
                                              b.layers[static_cast<size_t>(l + 1)].attn_norm.get(), c.rms_eps, halves,
                                              s);
        } else {
          cuda::add_split_halves(b.y_split.get(), T, dim, b.x.get(), dim, true, s);
        }
        continue;
      }
      if (auto ok = b.gemm(L.wo.get(), dim, qd, b.att.get(), T, b.x.get(), dim, true); !ok) return ok;
      if (ffn_sparse) {
        if (auto ok = sparse_ffn_layer(L, T, *ffn_sparse, l); !ok) return ok;
        continue;
      }
      if (auto ok = b.gate_up_swiglu(L, b.x.get(), T); !ok) return ok;
      if (auto ok = b.gemm(L.down.get(), dim, ffn, b.xn.get(), T, b.x.get(), dim, true); !ok) return ok;
    }
    const int64_t first_out = rows == LogitRows::All ? 0 : T - 1;
    const int64_t n_out = T - first_out;
    return b.gemm_norm(b.output, V, dim, b.x.get() + first_out * dim, n_out, b.output_norm.get(), b.logits.get(), V,
                       true);
  }

  // A scratch buffer grown to at least n elements (kept across forwards).
  template <class T>
  static Status grow(DeviceBuffer<T>& buffer, size_t n, const char* what) {
    return n > buffer.size() ? buffer.allocate(n, what) : Status{};
  }

  // Sparse FFN (SparseConfig::ffn, kernels/cuda/sparse_ffn.h): its scratch, carved for the
  // kernels' largest batch, and pinned room for every layer's counts.
  Status prepare_sparse_ffn(int64_t T) {
    const auto& c = b_->cfg;
    if (T > cuda::kSparseFfnMaxRows) {
      return make_error("sparse FFN on the CUDA backend takes at most " + std::to_string(cuda::kSparseFfnMaxRows) +
                        " rows a forward (a draft tree of at most " + std::to_string(cuda::kSparseFfnMaxRows - 1) +
                        " nodes), not " + std::to_string(T) + "; use --backend cpu or a smaller tree");
    }
    const size_t bytes = cuda::sparse_ffn_scratch_bytes(cuda::kSparseFfnMaxRows, c.ffn_dim);
    if (auto ok = grow(ffn_scratch_, (bytes + 3) / 4, "sparse FFN scratch"); !ok) return ok;
    if (!host_ffn_counts_) {
      SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_ffn_counts_), size_t(c.n_layers) * 2 * 4),
                       "cudaMallocHost");
    }
    return {};
  }

  // x += the sparse SwiGLU FFN of rmsnorm(x) for layer l: the dense gate through gemm() above
  // one row (cuBLAS where it pays), the rest in sparse_ffn's kernels; the layer's counts are
  // copied to host_ffn_counts_, read after the forward's synchronization.
  Status sparse_ffn_layer(const GpuLayer& L, int64_t T, const SparseConfig& sc, int64_t l) {
    auto& b = *b_;
    const auto& c = b.cfg;
    const int64_t dim = c.dim, F = c.ffn_dim;
    const auto scratch = cuda::sparse_ffn_scratch(ffn_scratch_.get(), cuda::kSparseFfnMaxRows, F);
    const auto tau = static_cast<float>(sc.ffn_threshold);
    cuda::rmsnorm_rows(b.x.get(), dim, L.ffn_norm.get(), T, dim, c.rms_eps, b.xn.get(), b.stream);
    bool launched = false;
    if (T == 1) {
      launched = cuda::sparse_ffn(L.gate_up.get(), L.down.get(), dim, F, b.xn.get(), dim, T, tau, sc.ffn_union,
                                  b.x.get(), dim, true, scratch, b.stream);
    } else {
      if (auto ok = b.gemm(L.gate_up.get(), F, dim, b.xn.get(), T, scratch.gate, F, false); !ok) return ok;
      launched = cuda::sparse_ffn_from_gate(L.gate_up.get(), L.down.get(), dim, F, b.xn.get(), dim, T, tau,
                                            sc.ffn_union, b.x.get(), dim, true, scratch, b.stream);
    }
    if (!launched) {
      return make_error("sparse FFN: the kernels refused layer " + std::to_string(l) + " (dim " + std::to_string(dim) +
                        ", ffn " + std::to_string(F) + ", " + std::to_string(T) +
                        " rows; both must be multiples of 8)");
    }
    SPECULA_CUDA_TRY(cudaMemcpyAsync(host_ffn_counts_ + 2 * l, scratch.counts, 2 * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, b.stream),
                     "sparse FFN counts");
    return {};
  }

  // What the CPU reports of a sparse FFN forward: kept (row, channel) pairs into the stats, and
  // one FfnStatsEvent a layer with the mean channels kept per row.
  void report_sparse_ffn(int64_t T, const ForwardContext& context) {
    const auto& c = b_->cfg;
    Observer* observer = context.observer;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const int64_t kept = host_ffn_counts_[2 * l];
      if (context.stats) {
        context.stats->ffn_active += kept;
        context.stats->ffn_total += T * c.ffn_dim;
      }
      if (observes(observer, EventKind::kFfnStats)) {
        observer->on_event(FfnStatsEvent{context.round, static_cast<int32_t>(l), static_cast<int32_t>(kept / T),
                                         static_cast<int32_t>(c.ffn_dim), false});
      }
    }
  }

  // A decode step or a tree verify as one graph launch. Each shape (rows T, all logits or the
  // last, mask or none) is captured on its first use and again after the shared scratch moved;
  // every launch parameter it holds is a device pointer, and what changes per step (tokens,
  // positions, committed, first_new, the mask) is read on the device from b.ids and b.mask.
  static constexpr int64_t kMaxGraphRows = 65;  // the pending token + a 64-node tree
  Status launch_graph(int64_t T, const uint8_t* mask_dev, LogitRows rows) {
    auto& b = *b_;
    if (graph_generation_ != b.scratch_generation) {
      for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
      graphs_.clear();
      graph_generation_ = b.scratch_generation;
    }
    const int64_t key = T * 4 + (rows == LogitRows::All ? 2 : 0) + (mask_dev ? 1 : 0);
    auto found = graphs_.find(key);
    // A shape's first forward runs eagerly: the stacked GEMMs' cuBLASLt algorithms are timed at
    // their first use (LtGemm), which a capture cannot hold.
    if (found == graphs_.end() && b.cublaslt_tuned && eager_shapes_.insert(key).second) {
      return enqueue_forward(T, mask_dev, rows);
    }
    if (found == graphs_.end()) {
      cudaGraph_t graph = nullptr;
      SPECULA_CUDA_TRY(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal), "forward graph capture");
      const Status enqueued = enqueue_forward(T, mask_dev, rows);
      const cudaError_t captured = cudaStreamEndCapture(b.stream, &graph);
      if (!enqueued) {
        if (graph) cudaGraphDestroy(graph);
        return enqueued;
      }
      SPECULA_CUDA_TRY(captured, "forward graph capture");
      cudaGraphExec_t exec = nullptr;
      const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      SPECULA_CUDA_TRY(made, "forward graph instantiation");
      found = graphs_.emplace(key, exec).first;
    }
    SPECULA_CUDA_TRY(cudaGraphLaunch(found->second, b.stream), "forward graph launch");
    return {};
  }

  // Room for n ids and n probabilities picked on the GPU (forward_greedy, forward_top_k), on the
  // device and pinned on the host; grown, never shrunk. Only called between forwards: the last
  // forward waited for its downloads, so the old buffers are idle.
  Status ensure_choice_buffers(int64_t n) {
    if (n <= choice_capacity_) return {};
    const int64_t want = std::max<int64_t>({n, 2 * choice_capacity_, int64_t{cuda::kTopKMax}});
    if (auto ok = choice_ids_.allocate(static_cast<size_t>(want), "greedy token ids"); !ok) return ok;
    if (auto ok = choice_probs_.allocate(static_cast<size_t>(want), "top-k probabilities"); !ok) return ok;
    choice_capacity_ = 0;
    if (host_choice_ids_) cudaFreeHost(host_choice_ids_);
    if (host_choice_probs_) cudaFreeHost(host_choice_probs_);
    host_choice_ids_ = nullptr;
    host_choice_probs_ = nullptr;
    SPECULA_CUDA_TRY(
        cudaMallocHost(reinterpret_cast<void**>(&host_choice_ids_), static_cast<size_t>(want) * sizeof(int32_t)),
        "pinned greedy token ids");
    SPECULA_CUDA_TRY(
        cudaMallocHost(reinterpret_cast<void**>(&host_choice_probs_), static_cast<size_t>(want) * sizeof(float)),
        "pinned top-k probabilities");
    choice_capacity_ = want;
    return {};
  }

  CudaBackend::Impl* b_;
  DeviceBuffer<int32_t> choice_ids_;  // ensure_choice_buffers
  DeviceBuffer<float> choice_probs_;
  int32_t* host_choice_ids_ = nullptr;  // pinned
  float* host_choice_probs_ = nullptr;  // pinned
  int64_t choice_capacity_ = 0;
  std::map<int64_t, cudaGraphExec_t> graphs_;  // by shape key (launch_graph)
  std::set<int64_t> eager_shapes_;             // shape keys whose first forward ran eagerly
  cuda::AttentionSplit split_;                 // attention over long contexts (init())
  cuda::KvLayerStrides layer_strides_;         // layers_[l] = layers_[0] + l strides
  DeviceBuffer<float> split_partial_;
  DeviceBuffer<int32_t> split_counters_;
  int32_t* host_rows_ = nullptr;         // pinned staging of commit()'s row moves (from, to)
  int64_t move_capacity_ = 0;            // rows move_rows_, move_scratch_ and host_rows_ hold
  cudaEvent_t rows_uploaded_ = nullptr;  // the last commit's staging copy
  int64_t graph_generation_ = -1;
  int64_t B_;
  int64_t capacity_;
  int64_t n_blocks_ = 0;
  int64_t committed_ = 0, provisional_ = 0;
  // A forward of several rows without a sparse plan left the key min/max of its blocks for the
  // commit to recompute: finish() does for commit(), rollback() and truncate(), update_min_max() for
  // commit_all() and for a forward that comes before any of them (its decode step updates the
  // min/max incrementally, and sparse selection reads it).
  bool min_max_stale_ = false;
  DeviceBuffer<bf16_bits> keys_, values_, move_scratch_;
  DeviceBuffer<float> kmin_, kmax_;
  DeviceBuffer<int32_t> table_, move_rows_;
  std::vector<cuda::PagedKvLayer> layers_;
  // Planned tree verifies (plan_tree_verify): bf16 queries and outputs [T][Hq][D], the current
  // block lists (the last refresh layer's), scratch, and the committed rows the lists load.
  DeviceBuffer<bf16_bits> sparse_q_, sparse_out_;
  DeviceBuffer<uint8_t> select_ws_, attn_ws_, visible_;
  DeviceBuffer<int32_t> list_blocks_, list_counts_, order_dev_;
  DeviceBuffer<uint64_t> list_members_, ancestors_dev_;
  DeviceBuffer<unsigned long long> listed_rows_;
  unsigned long long* host_listed_rows_ = nullptr;  // pinned
  DeviceBuffer<float> ffn_scratch_;                 // sparse_ffn_scratch_bytes, as floats
  int32_t* host_ffn_counts_ = nullptr;              // pinned, [n_layers][2] (kept pairs, active channels)
  cuda::BlockLists lists_;
};

}  // namespace

CudaBackend::CudaBackend() : impl_(std::make_unique<Impl>()) {}
CudaBackend::~CudaBackend() = default;
const ModelConfig& CudaBackend::config() const { return impl_->cfg; }
std::string CudaBackend::device() const { return impl_->device_name; }
bool CudaBackend::synthetic() const { return impl_->synthetic; }
int CudaBackend::warmup_steps() const { return impl_->cuda_graphs ? 1 : 0; }
uint64_t CudaBackend::weight_bytes_per_token() const { return impl_->weight_bytes; }
uint64_t CudaBackend::device_bytes() const {
  uint64_t total = impl_->embd.bytes() + impl_->output_own.bytes() + impl_->output_norm.bytes();
  for (const auto& L : impl_->layers) {
    total +=
        L.attn_norm.bytes() + L.ffn_norm.bytes() + L.qkv.bytes() + L.wo.bytes() + L.gate_up.bytes() + L.down.bytes();
  }
  return total;
}

Expected<std::unique_ptr<BackendSession>> CudaBackend::start(int block_size, int64_t capacity) {
  if (block_size < 8 || block_size > 128) {
    return make_error("CUDA backend: KV block size " + std::to_string(block_size) + " outside 8..128");
  }
  if (capacity <= 0) capacity = impl_->cfg.context_length;
  if (capacity <= 0) return make_error("CUDA backend: KV capacity must be positive");
  auto session = std::make_unique<CudaSession>(impl_.get(), block_size, capacity);
  if (auto ok = session->init(); !ok) return ok.error();
  return std::unique_ptr<BackendSession>(std::move(session));
}

Status cuda_fill_kv_random_for_bench(BackendSession& session, int64_t rows, uint64_t seed) {
  auto* cuda_session = dynamic_cast<CudaSession*>(&session);
  if (!cuda_session) return make_error("cuda_fill_kv_random_for_bench: not a CUDA backend session");
  return cuda_session->fill_kv_random(rows, seed);
}

namespace {
// One 2-token forward, so cuBLAS's lazy setup and kernel loading stay out of the first
// prefill's timing.
Status warm_up(CudaBackend& backend) {
  auto session = backend.start(16, 2);
  if (!session) return session.error();
  const int32_t tokens[2] = {0, 0}, positions[2] = {0, 1};
  std::vector<float> logits(static_cast<size_t>(backend.config().vocab_size));
  return (*session)->forward(tokens, positions, nullptr, logits, LogitRows::Last);
}
}  // namespace

Expected<std::unique_ptr<CudaBackend>> make_cuda_backend(const Model& model, const CudaBackendOptions& options) {
  if (!cuda_backend_supports(model.config)) {
    return make_error("CUDA backend: architecture '" + model.config.architecture +
                      "' is not supported yet (llama only); use --backend cpu");
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  if (auto ok = backend->impl_->init(options.device); !ok) return ok.error();
  backend->impl_->cuda_graphs = options.cuda_graphs;
  backend->impl_->tree_attention_kernels = options.tree_attention_kernels;
  backend->impl_->fused_decode_attention = options.fused_decode_attention;
  backend->impl_->layer_route = options.layer_route;
  backend->impl_->head_route = options.head_route;
  backend->impl_->cublaslt_tuned = options.cublaslt_tuned;
  if (auto ok = backend->impl_->load(model); !ok) return ok.error();
  if (auto ok = warm_up(*backend); !ok) return ok.error();
  return backend;
}

Expected<std::unique_ptr<CudaBackend>> make_synthetic_cuda_backend(const ModelConfig& config, uint64_t seed,
                                                                   const CudaBackendOptions& options) {
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  if (auto ok = backend->impl_->init(options.device); !ok) return ok.error();
  backend->impl_->cuda_graphs = options.cuda_graphs;
  backend->impl_->tree_attention_kernels = options.tree_attention_kernels;
  backend->impl_->fused_decode_attention = options.fused_decode_attention;
  backend->impl_->layer_route = options.layer_route;
  backend->impl_->head_route = options.head_route;
  backend->impl_->cublaslt_tuned = options.cublaslt_tuned;
  if (auto ok = backend->impl_->generate_synthetic(config, seed); !ok) return ok.error();
  if (auto ok = warm_up(*backend); !ok) return ok.error();
  return backend;
}

#endif  // SPECULA_HAVE_CUDA

}  // namespace specula
