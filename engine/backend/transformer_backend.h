#pragma once
// One interface over the CPU and CUDA transformers, so generation (and later the speculative
// loop) runs on either. A session is one sequence: its KV cache lives where the backend runs.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/core/expected.h"
#include "engine/model/cpu_transformer.h"  // AttentionMask, LogitRows, Precision
#include "engine/model/loader.h"

namespace specula {

class BackendSession {
 public:
  virtual ~BackendSession() = default;
  // n = tokens.size() new tokens at `positions`; their K/V become provisional rows. Each new
  // token sees the committed rows and the new tokens `mask` allows (nullptr = causal).
  // logits: (n, vocab) for LogitRows::All, (vocab) for Last. Same contract as
  // CpuTransformer::forward.
  virtual Status forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                         std::span<float> logits, LogitRows rows, const ForwardContext* context = nullptr) = 0;
  // forward(), then each output row's greedy token: greedy[r] = the lowest index of the largest
  // logit of row r (NaN never wins; a row starting with NaN gives 0), as argmax_f32 and
  // std::max_element pick it. greedy: T ids for LogitRows::All, 1 for Last. The CUDA backend
  // picks them on the GPU and downloads only the ids; this default runs forward() into a host
  // buffer and scans it.
  virtual Status forward_greedy(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                const AttentionMask* mask, std::span<int32_t> greedy, LogitRows rows,
                                const ForwardContext* context = nullptr);
  // forward() of the last row, then its ids.size() (1..64) most probable tokens under
  // softmax(logits / temperature), temperature > 0: ids by falling probability, ties lower id
  // first; probs[j] their probabilities over the whole vocabulary (what apply_sampling_filters
  // gives at that temperature without top-k or top-p). Tokens of probability 0 may close the
  // list; an id of -1 (probability 0) only when fewer than ids.size() logits are not NaN. This
  // default ranks by the host's float probabilities and matches apply_sampling_filters bit for
  // bit; the CUDA backend ranks by logit and sums in another order, so its probabilities may
  // differ in the last bits and two tokens of equal float probability may come in logit order.
  virtual Status forward_top_k(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                               const AttentionMask* mask, float temperature, std::span<int32_t> ids,
                               std::span<float> probs, const ForwardContext* context = nullptr);
  // The target's features for a draft head (engine/spec/head_drafter.h): the final-RMSNorm
  // output (dim floats, what the output matrix multiplies) of logits row `row` of this backend's
  // last forward, whichever session ran it (row r for LogitRows::All, 0 for Last). Only the CPU
  // backend keeps them; this default says so.
  virtual Status last_features(int64_t row, std::span<float> out);
  // Logits per output row (the model's vocabulary).
  virtual int64_t vocab_size() const = 0;
  // Keeps provisional rows keep_rows[0], keep_rows[1], ... (relative to the first provisional
  // row) as the next committed rows; drops the rest.
  virtual Status commit(std::span<const int> keep_rows) = 0;
  virtual void commit_all() = 0;
  virtual void rollback() = 0;
  // Drops every provisional row and the committed rows past `rows` (0..committed()).
  virtual Status truncate(int64_t rows) = 0;
  virtual int64_t committed() const = 0;
  virtual int64_t capacity() const = 0;
};

class TransformerBackend {
 public:
  virtual ~TransformerBackend() = default;
  virtual const ModelConfig& config() const = 0;
  virtual std::string name() const = 0;    // "cpu" | "cuda"
  virtual std::string device() const = 0;  // "CPU (N threads)" | "NVIDIA H100 80GB HBM3"
  // capacity: max rows of the session's KV cache (0 = the model's context length).
  virtual Expected<std::unique_ptr<BackendSession>> start(int block_size, int64_t capacity) = 0;
  // Bytes of one KV row over all layers, K and V, as this backend stores them.
  virtual int64_t kv_row_bytes() const = 0;
  // Whether its sessions answer BackendSession::last_features (a draft head's input).
  virtual bool keeps_target_features() const { return false; }
  // Decode steps at the start of a session that carry one-time costs (the CUDA backend captures
  // its graph on the first), which a break-even controller must not take as a step's cost.
  virtual int warmup_steps() const { return 0; }
};

struct BackendOptions {
  std::string kind = "auto";                 // auto | cpu | cuda; auto = cuda when built with CUDA and a GPU is present
  int threads = 0;                           // CPU backend
  Precision precision = Precision::Default;  // CPU backend
};

// "auto" resolved: "cuda" when this build has CUDA and a GPU is visible, else "cpu". Never prints.
std::string resolve_backend_kind(const std::string& kind);
bool built_with_cuda();

// `model` must outlive the backend. Errors: unknown kind, "built without CUDA", "no CUDA GPU
// found", not enough GPU memory.
Expected<std::unique_ptr<TransformerBackend>> make_backend(const Model& model, const BackendOptions& options);

}  // namespace specula
