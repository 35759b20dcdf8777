#include "engine/backend/cpu_backend.h"

#include <string>

#include "engine/backend/cuda_backend.h"

namespace specula {
namespace {

class CpuSession final : public BackendSession {
 public:
  CpuSession(CpuTransformer& transformer, KvCache kv) : transformer_(&transformer), kv_(std::move(kv)) {}
  Status forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                 std::span<float> logits, LogitRows rows, const ForwardContext* context) override {
    return transformer_->forward(tokens, positions, mask, kv_, logits, rows, context);
  }
  Status last_features(int64_t row, std::span<float> out) override { return transformer_->last_features(row, out); }
  Status commit(std::span<const int> keep_rows) override { return kv_.commit(keep_rows); }
  void commit_all() override { kv_.commit_all(); }
  void rollback() override { kv_.rollback(); }
  Status truncate(int64_t rows) override { return kv_.truncate(rows); }
  int64_t committed() const override { return kv_.committed(); }
  int64_t capacity() const override { return kv_.capacity(); }
  int64_t vocab_size() const override { return transformer_->config().vocab_size; }

 private:
  CpuTransformer* transformer_;
  KvCache kv_;
};

}  // namespace

int64_t CpuBackend::kv_row_bytes() const {
  const ModelConfig& c = transformer_.config();
  return c.n_layers * c.n_kv_heads * c.head_dim * 2 * static_cast<int64_t>(sizeof(float));
}

std::string CpuBackend::device() const { return "CPU (" + std::to_string(transformer_.threads()) + " threads)"; }

Expected<std::unique_ptr<BackendSession>> CpuBackend::start(int block_size, int64_t capacity) {
  auto kv = transformer_.make_kv_cache(block_size, capacity);
  if (!kv) return kv.error();
  return std::unique_ptr<BackendSession>(std::make_unique<CpuSession>(transformer_, std::move(*kv)));
}

std::string resolve_backend_kind(const std::string& kind) {
  if (kind != "auto") return kind;
  return cuda_gpu_available() ? "cuda" : "cpu";
}

bool built_with_cuda() {
#if defined(SPECULA_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

Expected<std::unique_ptr<TransformerBackend>> make_backend(const Model& model, const BackendOptions& options) {
  const std::string kind = resolve_backend_kind(options.kind);
  if (kind == "cpu") {
    CpuTransformerOptions cpu;
    cpu.threads = options.threads;
    cpu.precision = options.precision;
    return std::unique_ptr<TransformerBackend>(std::make_unique<CpuBackend>(model, cpu));
  }
  if (kind == "cuda") {
    auto cuda = make_cuda_backend(model, CudaBackendOptions{});
    if (!cuda) return cuda.error();
    return std::unique_ptr<TransformerBackend>(std::move(*cuda));
  }
  return make_error("unknown backend '" + kind + "' (expected auto, cpu or cuda)");
}

}  // namespace specula
