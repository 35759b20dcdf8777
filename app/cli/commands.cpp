#include "app/cli/commands.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/model/loader.h"
#include "engine/text/utf8_stream.h"

namespace specula::cli {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "specula-cli: %s\n", message.c_str());
  return 1;
}

Expected<std::string> read_prompt(const GenerateArgs& args) {
  if (args.prompt) return *args.prompt;
  const std::filesystem::path path = *args.prompt_file;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return make_error(path.string() + ": is a directory, expected a prompt file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path.string() + ": cannot open prompt file");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Expected<Model> load(const std::string& spec) {
  const auto path = resolve_model_path(spec);
  std::error_code ec;
  if (spec == "default" && !std::filesystem::exists(path, ec)) {
    return make_error(path.string() + ": default model not found; run scripts/fetch-model");
  }
  return load_model(path);
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  auto prompt_text = read_prompt(args);
  if (!prompt_text) return fail(prompt_text.error().message);
  auto model = load(args.model);
  if (!model) return fail(model.error().message);

  std::string text = *prompt_text;
  if (args.chat) {
    const ChatMessage user{"user", text};
    text = model->tokenizer.apply_chat_template(std::span(&user, 1), /*add_generation_prompt=*/true);
  }
  std::vector<int32_t> prompt;
  if (model->tokenizer.add_bos() && model->tokenizer.bos_id() >= 0) prompt.push_back(model->tokenizer.bos_id());
  const auto encoded = model->tokenizer.encode(text, /*parse_special=*/args.chat);
  prompt.insert(prompt.end(), encoded.begin(), encoded.end());
  if (prompt.empty()) return fail("the prompt is empty");

  GenerateOptions options;
  options.max_tokens = args.max_tokens;
  options.sampling = SamplingParams{args.temperature, args.top_k, args.top_p, args.seed};
  options.kv_block_size = args.kv_block_size;
  options.threads = args.threads;

  Utf8Stream stream;  // never splits a multi-byte character across writes
  const TokenCallback on_token = [&](int32_t, std::string_view bytes) {
    if (!args.json) {
      const std::string ready = stream.push(bytes);
      std::fwrite(ready.data(), 1, ready.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto result = generate(*model, prompt, options, on_token);
  if (!result) {
    if (!args.json) std::fputc('\n', stdout);
    return fail(result.error().message);
  }
  const auto& t = result->timings;
  if (args.json) {
    nlohmann::json out = {
        {"model", model->path.string()},
        {"text", result->text},
        {"tokens", result->tokens},
        {"prompt_tokens", prompt.size()},
        {"stop_reason", result->stopped_by_eos ? "eos" : "max_tokens"},
        {"timings",
         {{"prefill_tokens", t.prefill_tokens},
          {"prefill_seconds", t.prefill_seconds},
          {"prefill_tokens_per_s", t.prefill_tokens_per_s()},
          {"decode_tokens", t.decode_tokens},
          {"decode_seconds", t.decode_seconds},
          {"decode_tokens_per_s", t.decode_tokens_per_s()}}},
    };
    // Invalid UTF-8 from a model must not make the JSON writer throw.
    std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  const std::string rest = stream.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "prefill: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s\n",
               t.prefill_tokens, t.prefill_tokens_per_s(), t.decode_tokens, t.decode_tokens_per_s());
  return 0;
}

int run_inspect(const std::string& spec) {
  auto text = describe_model_file(resolve_model_path(spec));
  if (!text) return fail(text.error().message);
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

int run_tokenize(const std::string& spec, const std::string& text, bool parse_special) {
  auto model = load(spec);
  if (!model) return fail(model.error().message);
  for (int32_t id : model->tokenizer.encode(text, parse_special)) {
    std::printf("%d\t%s\n", id, nlohmann::json(model->tokenizer.token_bytes(id)).dump(-1, ' ', false,
                                                       nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace specula::cli
