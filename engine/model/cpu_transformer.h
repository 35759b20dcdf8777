#pragma once
// The llama-family transformer on the CPU: embeddings → n_layers × (RMSNorm → QKV → RoPE →
// attention over the KV cache → output projection → RMSNorm → SwiGLU FFN) → RMSNorm → logits.
//
// Weights are repacked once at construction (kernels/cpu/matmul.h): Q4_0/Q4_1/Q8_0 stay
// quantized (4.5 / 8.5 bits per weight in memory), everything else becomes f32. Q, K and V
// are one fused matrix, as are gate and up, so a layer has four matmuls.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/expected.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/loader.h"
#include "engine/model/moe.h"
#include "engine/model/prefill_cache.h"
#include "engine/observer/observer.h"
#include "engine/sparse/sparse_attention.h"
#include "engine/sparse/sparse_config.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace specula {

// Which of the n new tokens each new token may attend to (n × n, row-major; row i, column j:
// token i sees token j). Every new token also sees the whole committed context.
class AttentionMask {
 public:
  AttentionMask() = default;
  explicit AttentionMask(int64_t n) : n_(n), allowed_(static_cast<size_t>(n * n), 0) {}
  static AttentionMask causal(int64_t n);
  // Tree mask from parent indices (parent[i] < i, -1 for a root): i sees itself and its ancestors.
  static AttentionMask from_parents(std::span<const int> parents);

  int64_t size() const { return n_; }
  bool allowed(int64_t i, int64_t j) const { return allowed_[static_cast<size_t>(i * n_ + j)] != 0; }
  void set(int64_t i, int64_t j, bool allowed) { allowed_[static_cast<size_t>(i * n_ + j)] = allowed ? 1 : 0; }
  const uint8_t* row(int64_t i) const { return allowed_.data() + i * n_; }

 private:
  int64_t n_ = 0;
  std::vector<uint8_t> allowed_;
};

enum class Precision {
  // Quantized weights dequantized in registers, f32 activations: the numbers of an f32 forward
  // over the dequantized weights (transformers' float32), up to summation order.
  Default,
  // Quantized weights × activations quantized to int8 per 32 values (ggml's q8_1 scheme):
  // integer dot products, but ~1e-2 relative error in the logits on SmolLM2.
  Int8Activations,
  // Every weight dequantized to f32 at construction (4-8x the memory): the reference.
  Exact,
  // Exact, then every weight, embedding row and K/V entry rounded to bf16, as the CUDA backend
  // stores them; the math stays f32. The reference the CUDA backend is checked against: the
  // same numbers in storage, so what remains is the kernels' error (bf16 weights are a slightly
  // different model than the quantized file, up to ~3e-2 relative L2 in SmolLM2's logits).
  Bf16Storage,
};

enum class LogitRows {
  All,   // logits for every new token: (n_tokens, vocab)
  Last,  // only the last new token: (vocab)
};

// The input checks every backend's forward() makes (the contract BackendSession::forward shares
// with CpuTransformer::forward): at least one token, one position per token, a T x T mask if
// any, token ids inside 0..vocab_size-1 and no negative position. Error text names the first
// failure.
Status check_forward_inputs(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                            const AttentionMask* mask, int64_t vocab_size);

// What the loop tells a forward about the round it serves. Each layer is an NVTX range "layer"
// and, when the observer wants CPU spans, a CpuSpanEvent {"layer", round, layer}. With a sparse
// config, attention reads only the selected committed blocks (engine/sparse/sparse_attention.h)
// and the FFN skips low-activation channels; both report to `stats` and the observer. On MoE
// models, sparse->moe with a budget and calibrated thresholds skips low-weight experts
// (engine/model/moe.h); every MoE layer reports its routing to `moe_stats` and the observer.
struct ForwardContext {
  Observer* observer = nullptr;
  int64_t round = -1;                    // -1: prefill
  const SparseConfig* sparse = nullptr;  // null or strict: dense, bit-identical to no context
  std::span<const int32_t> query_order;  // the new rows in traversal order (group modes)
  SparseStats* stats = nullptr;          // accumulates KV bytes read / dense, FFN channels kept
  MoeForwardStats* moe_stats = nullptr;  // MoE models: per-layer, per-token routing appended (not cleared)
};

struct CpuTransformerOptions {
  int threads = 0;  // 0 = all hardware threads
  Precision precision = Precision::Default;
};

class CpuTransformer {
 public:
  // `model` must outlive the transformer (norm weights and embeddings are read in place).
  explicit CpuTransformer(const Model& model, const CpuTransformerOptions& options = {});
  ~CpuTransformer();
  CpuTransformer(CpuTransformer&&) noexcept;
  CpuTransformer& operator=(CpuTransformer&&) noexcept;

  const ModelConfig& config() const;
  int threads() const;
  // The forward's worker threads. Another CPU computation that runs between forwards (a draft
  // head, engine/spec/head_drafter.h) can share them instead of starting its own, which on a
  // small machine would compete with these for the cores while they spin between regions.
  ThreadPool& thread_pool();
  Precision precision() const;
  size_t packed_weight_bytes() const;

  // A KV cache shaped for this model (capacity: max_tokens, or the context length when 0).
  Expected<KvCache> make_kv_cache(int block_size = 16, int64_t max_tokens = 0) const;

  // Runs n = tokens.size() new tokens at the given positions (RoPE), appends their K/V to
  // `kv` as provisional rows and writes logits. Each new token attends to kv's committed rows
  // and to the new tokens `mask` allows (nullptr = causal). Rows already provisional before
  // the call are not attended. logits: (n, vocab) for LogitRows::All, (vocab) for Last.
  // Plain prefill/decode: forward(causal) then kv.commit_all(). One call at a time per
  // transformer (it owns the scratch buffers and the thread pool).
  Status forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                 KvCache& kv, std::span<float> logits, LogitRows rows = LogitRows::All,
                 const ForwardContext* trace = nullptr);

  // The final-RMSNorm output (dim floats: the vector the output matrix multiplies) of logits row
  // `row` of the last forward(): row r of its logits for LogitRows::All, 0 for Last. The forward
  // keeps these rows anyway (its last matmul's input), so this is a copy. An error when the last
  // forward failed, was restored from the prefill cache (which keeps no features), or row is out
  // of range.
  Status last_features(int64_t row, std::span<float> out) const;

  // Prefills (an empty kv, causal, LogitRows::Last, no observer or statistics) are stored in and
  // restored from `cache` (engine/model/prefill_cache.h); null turns that off. Not owned.
  void set_prefill_cache(PrefillCache* cache);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PrefillCache* prefill_cache_ = nullptr;
};

}  // namespace specula
