#pragma once
// Plain autoregressive generation on the CPU backend: prefill the prompt, then decode one
// token at a time, streaming each token to a callback. Speculative rounds build on this.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/core/expected.h"
#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"
#include "engine/sampling/sampler.h"

namespace specula {

struct GenerateOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  int kv_block_size = 16;
  int threads = 0;            // 0 = all hardware threads
  bool stop_at_eos = true;
  Precision precision = Precision::Default;  // Int8Activations: faster, ~1e-2 logit error
};

struct GenerateTimings {
  int prefill_tokens = 0;
  int decode_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double prefill_tokens_per_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0; }
  double decode_tokens_per_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (prompt excluded)
  std::string text;
  GenerateTimings timings;
  bool stopped_by_eos = false;
};

// on_token returns false to stop early (the GUI's Stop button).
using TokenCallback = std::function<bool(int32_t token, std::string_view bytes)>;

Expected<GenerateResult> generate(const Model& model, std::span<const int32_t> prompt,
                                  const GenerateOptions& options, const TokenCallback& on_token);

}  // namespace specula
