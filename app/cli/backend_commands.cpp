#include "app/cli/backend_commands.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/backend/backend_generate.h"
#include "engine/backend/cuda_backend.h"
#include "engine/model/loader.h"
#include "engine/text/utf8_stream.h"

namespace specula::cli {
namespace {

Expected<std::string> prompt_text(const GenerateArgs& args) {
  if (args.prompt) return *args.prompt;
  std::ifstream in(*args.prompt_file, std::ios::binary);
  if (!in) return make_error(*args.prompt_file + ": cannot open prompt file");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

int run_generate_on_backend(const GenerateArgs& args) {
  const bool explicit_cuda = args.backend == "cuda" || args.synthetic.has_value();
  if (args.synthetic && args.backend == "cpu") {
    return fail("--synthetic needs --backend cuda (the random weights are generated on the GPU)");
  }
  // Speculative runs, shadows, recordings and sparse presets go through the speculative engine,
  // which picks its backend itself (commands.cpp, engine_backend).
  const bool engine_run = args.spec.drafter != "none" || args.shadow || args.record || args.spec.sparse != "strict" ||
                          args.spec.sparse_config.has_value();
  if (args.synthetic && engine_run) {
    return fail("--synthetic runs plain decoding only (random weights draft and record nothing meaningful)");
  }
  if (engine_run) return kUseCpuGenerate;
  if (explicit_cuda && args.precision != "f32") {
    return fail("--precision int8 is a CPU option (the CUDA backend computes in bf16 and f32); use --backend cpu");
  }
  if (!explicit_cuda && (args.backend == "cpu" || args.precision != "f32" || resolve_backend_kind("auto") != "cuda")) {
    return kUseCpuGenerate;
  }

  auto text = prompt_text(args);
  if (!text) return fail(text.error().message);
  // The model is needed for its tokenizer even with --synthetic (prompt encoding, display).
  const auto path = resolve_model_path(args.model);
  auto model = load_model(path);
  if (!model) return fail(model.error().message);
  // auto: shapes the GPU lacks run on the CPU.
  if (!explicit_cuda && !cuda_backend_supports(model->config)) return kUseCpuGenerate;
  std::string prompt_str = *text;
  if (args.chat) {
    const ChatMessage user{"user", prompt_str};
    prompt_str = model->tokenizer.apply_chat_template(std::span(&user, 1), /*add_generation_prompt=*/true);
  }
  std::vector<int32_t> prompt;
  if (model->tokenizer.add_bos() && model->tokenizer.bos_id() >= 0) prompt.push_back(model->tokenizer.bos_id());
  const auto encoded = model->tokenizer.encode(prompt_str, /*parse_special=*/args.chat);
  prompt.insert(prompt.end(), encoded.begin(), encoded.end());
  if (prompt.empty()) return fail("the prompt is empty");

  std::unique_ptr<CudaBackend> backend;
  BackendGenerateHooks hooks;
  if (args.synthetic) {
    auto config = synthetic_config(*args.synthetic);
    if (!config) return fail(config.error().message);
    auto made = make_synthetic_cuda_backend(*config, args.seed, CudaBackendOptions{});
    if (!made) return fail(made.error().message);  // one line: the refusal, before any notice
    std::fprintf(stderr,
                 "specula-cli: synthetic %s: random bf16 weights generated on the GPU, for timing only; output is "
                 "token ids\n",
                 args.synthetic->c_str());
    backend = std::move(*made);
    hooks.token_text = [](int32_t id) {
      std::string text = "[";
      text += std::to_string(id);
      text += ']';
      return text;
    };
  } else {
    auto made = make_cuda_backend(*model, CudaBackendOptions{});
    if (!made) return fail(made.error().message);
    backend = std::move(*made);
    const Tokenizer& tok = model->tokenizer;
    hooks.token_text = [&tok](int32_t id) { return tok.token_bytes(id); };
    hooks.is_end = [&tok](int32_t id) { return tok.is_end_of_generation(id); };
  }

  GenerateOptions options;
  options.max_tokens = args.max_tokens;
  options.sampling = SamplingParams{args.temperature, args.top_k, args.top_p, args.seed};
  options.kv_block_size = args.kv_block_size;
  options.stop_at_eos = !args.synthetic;

  Utf8Stream stream;
  const TokenCallback on_token = [&](int32_t, std::string_view bytes) {
    if (!args.json) {
      const std::string ready = stream.push(bytes);
      std::fwrite(ready.data(), 1, ready.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto result = generate_on_backend(*backend, prompt, options, hooks, on_token);
  if (!result) {
    if (!args.json) std::fputc('\n', stdout);
    return fail(result.error().message);
  }
  const auto& t = result->timings;
  const double step_s = t.decode_tokens > 0 ? t.decode_seconds / t.decode_tokens : 0.0;
  const double weight_gb_s = step_s > 0 ? static_cast<double>(backend->weight_bytes_per_token()) / step_s / 1e9 : 0.0;
  if (args.json) {
    nlohmann::json out = {
        {"model", args.synthetic ? *args.synthetic : path.string()},
        {"synthetic", args.synthetic.has_value()},
        {"backend", "cuda"},
        {"device", backend->device()},
        {"text", result->text},
        {"tokens", result->tokens},
        {"prompt_tokens", prompt.size()},
        {"stop_reason", result->stopped_by_eos ? "eos" : "max_tokens"},
        {"weight_bytes_per_token", backend->weight_bytes_per_token()},
        {"timings",
         {{"prefill_tokens", t.prefill_tokens},
          {"prefill_seconds", t.prefill_seconds},
          {"prefill_tokens_per_s", t.prefill_tokens_per_s()},
          {"decode_tokens", t.decode_tokens},
          {"decode_seconds", t.decode_seconds},
          {"decode_tokens_per_s", t.decode_tokens_per_s()},
          {"decode_weight_read_gb_per_s", weight_gb_s}}},
    };
    std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  const std::string rest = stream.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr,
               "prefill: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s | cuda: %s%s, %.0f GB/s weights\n",
               t.prefill_tokens, t.prefill_tokens_per_s(), t.decode_tokens, t.decode_tokens_per_s(),
               backend->device().c_str(), args.synthetic ? " (synthetic)" : "", weight_gb_s);
  return 0;
}

}  // namespace specula::cli
