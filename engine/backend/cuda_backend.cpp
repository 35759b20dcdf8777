#include "engine/backend/cuda_backend.h"

#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/moe.h"  // its shape limits (plain C++, also without CUDA)

#if defined(SPECULA_HAVE_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/backend/cuda_backend_impl.h"
#include "engine/backend/cuda_session.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/tensor_type.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"
#endif

namespace specula {

std::string cuda_backend_unsupported(const ModelConfig& c) {
  // kernels/cuda/model_ops.h: attention_at.
  if (c.head_dim % 8 != 0 || c.head_dim > 256) {
    return "head_dim " + std::to_string(c.head_dim) + " (a multiple of 8 up to 256 only)";
  }
  if (!c.is_moe()) return "";
  // kernels/cuda/moe.h: moe_ffn's checks.
  if (c.dim % 8 != 0 || c.expert_ffn_dim < 8 || c.expert_ffn_dim % 8 != 0 || c.shared_expert_ffn_dim % 8 != 0) {
    return "MoE widths dim " + std::to_string(c.dim) + ", expert FFN " + std::to_string(c.expert_ffn_dim) +
           ", shared expert FFN " + std::to_string(c.shared_expert_ffn_dim) + " (multiples of 8 only)";
  }
  if (c.n_experts > cuda::kMoeMaxExperts || c.n_experts_used < 1 || c.n_experts_used > c.n_experts ||
      c.n_experts_used > cuda::kMoeMaxTopK) {
    return "MoE routing of top-" + std::to_string(c.n_experts_used) + " of " + std::to_string(c.n_experts) +
           " experts (at most " + std::to_string(cuda::kMoeMaxExperts) + " experts, top-k at most " +
           std::to_string(cuda::kMoeMaxTopK) + ")";
  }
  return "";
}

bool cuda_backend_supports(const ModelConfig& c) { return cuda_backend_unsupported(c).empty(); }

Status cuda_sparse_supported(const SparseConfig& c) {
  const auto refuse = [](const std::string& option) {
    return make_error("sparse verification on the CUDA backend does not support " + option + "; use --backend cpu");
  };
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
    // MoE shapes: experts, top-k, expert and shared-expert widths, renormalized top-k, q/k norm,
    // q/k/v biases; 0 / false / None for dense ones.
    int64_t experts = 0, top_k = 0, expert_ffn = 0, shared_ffn = 0;
    bool norm_topk = false;
    QkNorm qk_norm = QkNorm::None;
    bool qkv_bias = false;
  };
  static constexpr Shape kShapes[] = {
      {"llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, false, false},
      // 141 GB of bf16: more than an H100 holds
      {"llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072, 500000.0f, false, false},
      // 811 GB: more than any one GPU holds
      {"llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, 131072, 500000.0f, false, false},
      {"smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f, true, true},
      // MoE: Mixtral-8x7B-v0.1 (93 GB of bf16: an H200 holds it, an H100 does not), Qwen1.5-MoE-A2.7B
      // (60 experts + a shared expert, q/k/v biases), OLMoE-1B-7B-0924 (64 experts, q/k norms over
      // the whole projection).
      {"mixtral-8x7b", 32, 4096, 32, 8, 128, 0, 32000, 32768, 1000000.0f, false, false, 8, 2, 14336, 0, true},
      {"qwen1.5-moe-a2.7b", 24, 2048, 16, 16, 128, 0, 151936, 8192, 1000000.0f, false, false, 60, 4, 1408, 5632, false,
       QkNorm::None, true},
      {"olmoe-1b-7b", 16, 2048, 16, 16, 128, 0, 50304, 4096, 10000.0f, false, false, 64, 8, 1024, 0, false,
       QkNorm::Full},
  };
  std::string known;
  for (const Shape& s : kShapes) {
    known += (known.empty() ? "" : ", ") + std::string(s.name);
    if (name != s.name) continue;
    ModelConfig c;
    c.architecture = s.experts == 0                  ? "llama"
                     : name.rfind("mixtral", 0) == 0 ? "mixtral"
                     : name.rfind("qwen", 0) == 0    ? "qwen2_moe"
                                                     : "olmoe";
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
    c.n_experts = s.experts;
    c.n_experts_used = s.top_k;
    c.expert_ffn_dim = s.expert_ffn;
    c.shared_expert_ffn_dim = s.shared_ffn;
    c.norm_topk_prob = s.norm_topk;
    c.qk_norm = s.qk_norm;
    c.qkv_bias = s.qkv_bias;
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
int64_t cuda_session_graph_count(const BackendSession&) { return -1; }
Expected<std::unique_ptr<CudaBackend>> make_synthetic_cuda_backend(const ModelConfig&, uint64_t,
                                                                   const CudaBackendOptions&) {
  return make_error("--synthetic: this specula-cli was built without CUDA (nvcc was not found at configure time)");
}

#else

bool cuda_gpu_available() { return cuda::device_count() > 0; }
void set_cuda_programmatic_launch(bool on) { cuda::set_programmatic_dependent_launch(on); }

namespace {

cuda::MoeShape moe_shape_of(const ModelConfig& c) {
  return {c.dim, c.n_experts, c.n_experts_used, c.expert_ffn_dim, c.shared_expert_ffn_dim, c.norm_topk_prob};
}

// Round to nearest even, as __float2bfloat16_rn does (weights are finite).
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace

Status CudaBackend::Impl::init(int dev) {
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

uint64_t CudaBackend::Impl::weight_bytes_needed() const {
  const uint64_t ffn =
      cfg.is_moe() ? cfg.n_experts * (1 + 3 * cfg.expert_ffn_dim) + 3 * cfg.shared_expert_ffn_dim : 3 * cfg.ffn_dim;
  const uint64_t per_layer = 2 * (qkv_dim() * cfg.dim + cfg.dim * q_dim() + ffn * cfg.dim) + 8 * cfg.dim +
                             4 * (qkv_dim() + 2 * cfg.dim + q_dim() + kv_dim());  // at most: extras, shared gate
  uint64_t total = cfg.n_layers * per_layer + 2ull * cfg.vocab_size * cfg.dim + 4 * cfg.dim;
  if (!cfg.tied_embeddings) total += 2ull * cfg.vocab_size * cfg.dim;
  return total;
}

Status CudaBackend::Impl::check_free_memory(uint64_t need, const std::string& what) const {
  size_t free = 0, total = 0;
  SPECULA_CUDA_TRY(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  const uint64_t margin = 256ull << 20;  // cuBLAS workspace, scratch, context
  if (need + margin > free) {
    return make_error(what + " needs " + gib(need) + " of GPU memory, but only " + gib(free) + " of " + gib(total) +
                      " is free on " + device_name);
  }
  return {};
}

Status CudaBackend::Impl::allocate_weights() {
  if (auto ok = check_free_memory(weight_bytes_needed(), "the model (" + cfg.name + ", bf16 weights)"); !ok) return ok;
  layers.resize(static_cast<size_t>(cfg.n_layers));
  for (auto& L : layers) {
    if (auto ok = L.attn_norm.allocate(cfg.dim, "attn_norm"); !ok) return ok;
    if (auto ok = L.ffn_norm.allocate(cfg.dim, "ffn_norm"); !ok) return ok;
    if (auto ok = L.qkv.allocate(qkv_dim() * cfg.dim, "wqkv"); !ok) return ok;
    if (auto ok = L.wo.allocate(cfg.dim * q_dim(), "wo"); !ok) return ok;
    if (cfg.is_moe()) {
      const int64_t E = cfg.n_experts, F = cfg.expert_ffn_dim, S = cfg.shared_expert_ffn_dim;
      if (auto ok = L.router.allocate(E * cfg.dim, "ffn_gate_inp"); !ok) return ok;
      if (auto ok = L.experts_gate_up.allocate(E * 2 * F * cfg.dim, "ffn_gate_up_exps"); !ok) return ok;
      if (auto ok = L.experts_down.allocate(E * cfg.dim * F, "ffn_down_exps"); !ok) return ok;
      if (S > 0) {
        if (auto ok = L.shared_gate_up.allocate(2 * S * cfg.dim, "ffn_gate_up_shexp"); !ok) return ok;
        if (auto ok = L.shared_down.allocate(cfg.dim * S, "ffn_down_shexp"); !ok) return ok;
        if (auto ok = L.shared_gate.allocate(cfg.dim, "ffn_gate_inp_shexp"); !ok) return ok;
      }
    } else {
      if (auto ok = L.gate_up.allocate(2 * cfg.ffn_dim * cfg.dim, "w_gate_up"); !ok) return ok;
      if (auto ok = L.down.allocate(cfg.dim * cfg.ffn_dim, "w_down"); !ok) return ok;
    }
    if (cfg.qkv_bias) {
      if (auto ok = L.qkv_bias.allocate(qkv_dim(), "attn_qkv bias"); !ok) return ok;
    }
    if (cfg.output_bias) {
      if (auto ok = L.o_bias.allocate(cfg.dim, "attn_output bias"); !ok) return ok;
    }
    if (cfg.qk_norm != QkNorm::None) {
      const bool per_head = cfg.qk_norm == QkNorm::PerHead;
      if (auto ok = L.q_norm.allocate(per_head ? cfg.head_dim : q_dim(), "attn_q_norm"); !ok) return ok;
      if (auto ok = L.k_norm.allocate(per_head ? cfg.head_dim : kv_dim(), "attn_k_norm"); !ok) return ok;
    }
  }
  if (auto ok = embd.allocate(cfg.vocab_size * cfg.dim, "token_embd"); !ok) return ok;
  if (auto ok = output_norm.allocate(cfg.dim, "output_norm"); !ok) return ok;
  if (!cfg.tied_embeddings) {
    if (auto ok = output_own.allocate(cfg.vocab_size * cfg.dim, "output"); !ok) return ok;
    output = output_own.get();
  } else {
    output = embd.get();
  }
  // The bytes one decode token reads: an MoE layer's router, top-k experts and shared expert.
  weight_bytes = 0;
  for (const auto& L : layers) {
    weight_bytes += L.bytes() - L.experts_gate_up.bytes() - L.experts_down.bytes();
    if (cfg.is_moe()) weight_bytes += 2ull * cfg.n_experts_used * 3 * cfg.expert_ffn_dim * cfg.dim;
  }
  weight_bytes += output_norm.bytes() + 2ull * cfg.vocab_size * cfg.dim;  // output projection
  return {};
}

// Dequantizes `t` on the host and uploads it as bf16 rows [row0, row0 + t.rows()) of dst.
Status CudaBackend::Impl::upload_bf16(const TensorRef& t, bf16_bits* dst, int64_t row0) {
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

Status CudaBackend::Impl::upload_f32(const TensorRef& t, float* dst) {
  std::vector<float> f(static_cast<size_t>(t.cols() * t.rows()));
  const auto res = dequantize_row(t.type, t.data.data(), f.data(), static_cast<int64_t>(f.size()));
  if (!res.ok) return make_error("CUDA backend: " + t.name + ": " + res.error);
  SPECULA_CUDA_TRY(cudaMemcpy(dst, f.data(), f.size() * 4, cudaMemcpyHostToDevice), "upload of " + t.name);
  return {};
}

// An MoE layer's router and experts in kernels/cuda/moe.h's layouts: expert e's gate rows then up
// rows at rows e·2F of experts_gate_up, its down rows at e·dim of experts_down.
Status CudaBackend::Impl::upload_moe(const LayerWeights& s, GpuLayer& d) {
  const int64_t F = cfg.expert_ffn_dim, S = cfg.shared_expert_ffn_dim;
  if (static_cast<int64_t>(s.experts.size()) != cfg.n_experts) {
    return make_error("CUDA backend: an MoE layer has " + std::to_string(s.experts.size()) + " experts, the config " +
                      std::to_string(cfg.n_experts));
  }
  if (auto ok = upload_bf16(s.router, d.router.get(), 0); !ok) return ok;
  for (int64_t e = 0; e < cfg.n_experts; ++e) {
    const ExpertWeights& x = s.experts[static_cast<size_t>(e)];
    if (auto ok = upload_bf16(x.gate, d.experts_gate_up.get(), e * 2 * F); !ok) return ok;
    if (auto ok = upload_bf16(x.up, d.experts_gate_up.get(), e * 2 * F + F); !ok) return ok;
    if (auto ok = upload_bf16(x.down, d.experts_down.get(), e * cfg.dim); !ok) return ok;
  }
  if (S > 0) {
    if (auto ok = upload_bf16(s.shared_expert.gate, d.shared_gate_up.get(), 0); !ok) return ok;
    if (auto ok = upload_bf16(s.shared_expert.up, d.shared_gate_up.get(), S); !ok) return ok;
    if (auto ok = upload_bf16(s.shared_expert.down, d.shared_down.get(), 0); !ok) return ok;
    if (auto ok = upload_f32(s.shared_expert_gate, d.shared_gate.get()); !ok) return ok;
  }
  return {};
}

Status CudaBackend::Impl::load(const Model& model) {
  cfg = model.config;
  if (cfg.head_dim > 256 || cfg.head_dim % 2 != 0) {
    return make_error("CUDA backend: head_dim " + std::to_string(cfg.head_dim) + " unsupported (even, at most 256)");
  }
  moe_shape = moe_shape_of(cfg);
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
    if (ok && s.is_moe()) {
      ok = upload_moe(s, d);
    } else if (ok) {
      ok = upload_bf16(s.w_gate, d.gate_up.get(), 0);
      if (ok) ok = upload_bf16(s.w_up, d.gate_up.get(), cfg.ffn_dim);
      if (ok) ok = upload_bf16(s.w_down, d.down.get(), 0);
    }
    if (ok && d.qkv_bias.get()) {
      ok = upload_f32(s.bq, d.qkv_bias.get());
      if (ok) ok = upload_f32(s.bk, d.qkv_bias.get() + q_dim());
      if (ok) ok = upload_f32(s.bv, d.qkv_bias.get() + q_dim() + kv_dim());
    }
    if (ok && d.o_bias.get()) ok = upload_f32(s.bo, d.o_bias.get());
    if (ok && d.q_norm.get()) ok = upload_f32(s.q_norm, d.q_norm.get());
    if (ok && d.k_norm.get()) ok = upload_f32(s.k_norm, d.k_norm.get());
    if (!ok) return ok;
  }
  if (auto ok = upload_bf16(w.token_embd, embd.get(), 0); !ok) return ok;
  if (auto ok = upload_f32(w.output_norm, output_norm.get()); !ok) return ok;
  if (!cfg.tied_embeddings) {
    if (auto ok = upload_bf16(w.output, output_own.get(), 0); !ok) return ok;
  }
  return {};
}

Status CudaBackend::Impl::generate_synthetic(const ModelConfig& config, uint64_t seed) {
  cfg = config;
  synthetic = true;
  moe_shape = moe_shape_of(cfg);
  if (auto ok = allocate_weights(); !ok) return ok;
  uint64_t k = seed * 1000003ull;
  auto fill = [&](DeviceBuffer<bf16_bits>& b, int64_t fan_in) {
    cuda::fill_uniform_bf16(b.get(), static_cast<int64_t>(b.size()), ++k, 1.0f / std::sqrt(static_cast<float>(fan_in)),
                            stream);
  };
  const int64_t down_fan_in = cfg.is_moe() ? cfg.expert_ffn_dim : cfg.ffn_dim;
  for (auto& L : layers) {
    // Norm weights 1, biases 0: the shapes' costs, not a model's numbers.
    for (auto* b : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm}) {
      if (b->size()) cuda::fill_f32(b->get(), static_cast<int64_t>(b->size()), 1.0f, stream);
    }
    for (auto* b : {&L.qkv_bias, &L.o_bias}) {
      if (b->size()) cuda::fill_f32(b->get(), static_cast<int64_t>(b->size()), 0.0f, stream);
    }
    fill(L.qkv, cfg.dim);
    fill(L.wo, q_dim());
    for (auto* b : {&L.gate_up, &L.router, &L.experts_gate_up, &L.shared_gate_up}) {
      if (b->size()) fill(*b, cfg.dim);
    }
    if (L.down.size()) fill(L.down, down_fan_in);
    if (L.experts_down.size()) fill(L.experts_down, down_fan_in);
    if (L.shared_down.size()) fill(L.shared_down, cfg.shared_expert_ffn_dim);
    if (L.shared_gate.size()) cuda::fill_f32(L.shared_gate.get(), cfg.dim, 0.0f, stream);
  }
  cuda::fill_uniform_bf16(embd.get(), static_cast<int64_t>(embd.size()), ++k, 1.0f, stream);
  cuda::fill_f32(output_norm.get(), cfg.dim, 1.0f, stream);
  if (!cfg.tied_embeddings) fill(output_own, cfg.dim);
  SPECULA_CUDA_TRY(cudaGetLastError(), "synthetic weight generation");
  SPECULA_CUDA_TRY(cudaStreamSynchronize(stream), "synthetic weight generation");
  return {};
}

Status CudaBackend::Impl::ensure_scratch(int64_t T) {
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
  if (cfg.is_moe()) {
    const int64_t chunk = std::min(T, cuda::kMoeMaxTokens), k = cfg.n_experts_used;
    if (auto ok = moe_scratch_mem.allocate(cuda::moe_scratch_bytes(moe_shape, chunk), "MoE scratch"); !ok) return ok;
    moe_scratch = cuda::moe_scratch(moe_scratch_mem.get(), moe_shape, chunk);
    if (auto ok = moe_ids.allocate(cfg.n_layers * T * k, "MoE routed experts"); !ok) return ok;
    if (auto ok = moe_weights.allocate(cfg.n_layers * T * k, "MoE routing weights"); !ok) return ok;
    if (auto ok = moe_skipped.allocate(cfg.n_layers * T, "MoE skipped experts"); !ok) return ok;
  }
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

CudaBackend::CudaBackend() : impl_(std::make_unique<Impl>()) {}
CudaBackend::~CudaBackend() = default;
const ModelConfig& CudaBackend::config() const { return impl_->cfg; }
std::string CudaBackend::device() const { return impl_->device_name; }
bool CudaBackend::synthetic() const { return impl_->synthetic; }
int CudaBackend::warmup_steps() const { return impl_->cuda_graphs ? 1 : 0; }
uint64_t CudaBackend::weight_bytes_per_token() const { return impl_->weight_bytes; }
uint64_t CudaBackend::device_bytes() const {
  uint64_t total = impl_->embd.bytes() + impl_->output_own.bytes() + impl_->output_norm.bytes();
  for (const auto& L : impl_->layers) total += L.bytes();
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

int64_t cuda_session_graph_count(const BackendSession& session) {
  const auto* cuda_session = dynamic_cast<const CudaSession*>(&session);
  return cuda_session ? cuda_session->graph_count() : -1;
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
  if (const std::string why = cuda_backend_unsupported(model.config); !why.empty()) {
    return make_error("CUDA backend: " + model.config.architecture + " model with " + why +
                      " is not supported; use --backend cpu");
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  if (auto ok = backend->impl_->init(options.device); !ok) return ok.error();
  backend->impl_->set_options(options);
  if (auto ok = backend->impl_->load(model); !ok) return ok.error();
  if (auto ok = warm_up(*backend); !ok) return ok.error();
  return backend;
}

Expected<std::unique_ptr<CudaBackend>> make_synthetic_cuda_backend(const ModelConfig& config, uint64_t seed,
                                                                   const CudaBackendOptions& options) {
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  if (auto ok = backend->impl_->init(options.device); !ok) return ok.error();
  backend->impl_->set_options(options);
  if (auto ok = backend->impl_->generate_synthetic(config, seed); !ok) return ok.error();
  if (auto ok = warm_up(*backend); !ok) return ok.error();
  return backend;
}

#endif  // SPECULA_HAVE_CUDA

}  // namespace specula
