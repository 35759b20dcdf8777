#include "engine/backend/backend_generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "engine/sampling/sampler.h"

namespace specula {
namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

Expected<GenerateResult> generate_on_backend(TransformerBackend& backend, std::span<const int32_t> prompt,
                                             const GenerateOptions& options, const BackendGenerateHooks& hooks,
                                             const TokenCallback& on_token) {
  const ModelConfig& cfg = backend.config();
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) return make_error("generate: empty prompt");
  if (n_prompt >= cfg.context_length) {
    return make_error("prompt has " + std::to_string(n_prompt) + " tokens, context is " +
                      std::to_string(cfg.context_length));
  }
  if (options.max_tokens < 0)
    return make_error("generate: max_tokens " + std::to_string(options.max_tokens) + " is negative");
  GenerateResult result;
  if (options.max_tokens == 0) return result;
  const int64_t max_new = std::min<int64_t>(options.max_tokens, cfg.context_length - n_prompt + 1);
  auto session = backend.start(options.kv_block_size, std::min(cfg.context_length, n_prompt + max_new));
  if (!session) return session.error();
  BackendSession& s = **session;
  Sampler sampler(options.sampling);
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  std::vector<int32_t> positions(static_cast<size_t>(n_prompt));
  std::iota(positions.begin(), positions.end(), 0);

  // Greedy decoding (temperature 0) takes each token from forward_greedy: on the GPU only the id
  // comes back, not the (vocab) logits. It is the sampler's argmax either way.
  const bool greedy = !(options.sampling.temperature > 0.0f);
  auto next_token = [&](std::span<const int32_t> tokens, std::span<const int32_t> at, int32_t& next) -> Status {
    if (greedy) return s.forward_greedy(tokens, at, nullptr, {&next, 1}, LogitRows::Last);
    if (auto status = s.forward(tokens, at, nullptr, logits, LogitRows::Last); !status) return status;
    next = sampler.sample(logits);
    return {};
  };

  auto start = std::chrono::steady_clock::now();
  int32_t token = -1;
  if (auto status = next_token(prompt, positions, token); !status) return status.error();
  s.commit_all();
  result.timings.prefill_tokens = static_cast<int>(n_prompt);
  result.timings.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  for (;;) {
    result.tokens.push_back(token);
    if (options.stop_at_eos && hooks.is_end && hooks.is_end(token)) {
      result.stopped_by_eos = true;
      break;
    }
    const std::string bytes = hooks.token_text ? hooks.token_text(token) : std::string();
    result.text += bytes;
    if (on_token && !on_token(token, bytes)) break;
    if (static_cast<int64_t>(result.tokens.size()) >= max_new) break;
    const auto position = static_cast<int32_t>(s.committed());
    if (auto status = next_token({&token, 1}, {&position, 1}, token); !status) return status.error();
    s.commit_all();
    ++result.timings.decode_tokens;
  }
  result.timings.decode_seconds = result.timings.decode_tokens > 0 ? seconds_since(start) : 0.0;
  return result;
}

}  // namespace specula
