#pragma once
// TransformerBackend over CpuTransformer + KvCache (the f32 reference).
#include "engine/backend/transformer_backend.h"

namespace specula {

class CpuBackend final : public TransformerBackend {
 public:
  CpuBackend(const Model& model, const CpuTransformerOptions& options) : transformer_(model, options) {}
  const ModelConfig& config() const override { return transformer_.config(); }
  std::string name() const override { return "cpu"; }
  int64_t kv_row_bytes() const override;  // f32 K and V
  bool keeps_target_features() const override { return true; }
  std::string device() const override;
  Expected<std::unique_ptr<BackendSession>> start(int block_size, int64_t capacity) override;
  CpuTransformer& transformer() { return transformer_; }

 private:
  CpuTransformer transformer_;
};

}  // namespace specula
