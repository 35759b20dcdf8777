#pragma once
// Plain autoregressive generation over any TransformerBackend (the CPU-only engine/generate.h
// builds its own CpuTransformer). Prefill the prompt in one forward, then one token a step.
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "engine/backend/transformer_backend.h"
#include "engine/generate.h"

namespace specula {

struct BackendGenerateHooks {
  std::function<std::string(int32_t)> token_text;  // bytes of a token for display ("" when unknown)
  std::function<bool(int32_t)> is_end;             // end of generation (EOS / EOT)
};

Expected<GenerateResult> generate_on_backend(TransformerBackend& backend, std::span<const int32_t> prompt,
                                             const GenerateOptions& options, const BackendGenerateHooks& hooks,
                                             const TokenCallback& on_token);

}  // namespace specula
