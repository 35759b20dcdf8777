#include "app/cli/commands.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <vector>

#include "app/cli/backend_commands.h"
#include "app/cli/record.h"
#include "engine/backend/cuda_backend.h"
#include "engine/generate.h"
#include "engine/model/loader.h"
#include "engine/model/model_identity.h"
#include "engine/sparse/sparse_setup.h"
#include "engine/spec/acceptance.h"
#include "engine/spec/drafters.h"
#include "engine/spec/head_drafter.h"
#include "engine/spec/speculative.h"
#include "engine/text/utf8_stream.h"

namespace specula::cli {
namespace {

// Streams generated text to stdout as it arrives, whole characters only; silent under --json.
TokenCallback stdout_streamer(bool json, Utf8Stream& stream) {
  return [json, &stream](int32_t, std::string_view bytes) {
    if (!json) {
      const std::string ready = stream.push(bytes);
      std::fwrite(ready.data(), 1, ready.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
}

// Ends streamed text with what the UTF-8 stream still holds and a newline, then prints the
// speed line on stderr (stdout stays the generated text alone).
void finish_stream(Utf8Stream& stream, const GenerateTimings& t) {
  const std::string rest = stream.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "prefill: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s\n", t.prefill_tokens,
               t.prefill_tokens_per_s(), t.decode_tokens, t.decode_tokens_per_s());
}

Expected<std::string> read_prompt(const GenerateArgs& args) {
  if (args.prompt) return *args.prompt;
  const std::filesystem::path path = *args.prompt_file;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error(path.string() + ": is a directory, expected a prompt file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path.string() + ": cannot open prompt file");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

int fail(const std::string& message) {
  std::fprintf(stderr, "specula-cli: %s\n", message.c_str());
  return 1;
}

Expected<Model> load(const std::string& spec) {
  const auto path = resolve_model_path(spec);
  std::error_code ec;
  if (spec == "default" && !std::filesystem::exists(path, ec)) {
    return make_error(path.string() + ": default model not found; run scripts/fetch-model");
  }
  return load_model(path);
}

namespace {

bool uses_draft_head(const SpeculationArgs& spec) { return drafter_uses_head(spec.drafter); }

std::string default_accept(const SpeculationArgs& spec, float temperature) {
  return spec.accept ? *spec.accept : (temperature > 0 ? "sample" : "greedy");
}

}  // namespace

// Everything about the speculation flags that can be checked before a model is loaded.
Status check_speculation_flags(const SpeculationArgs& spec, float temperature) {
  static const char* const kDrafters[] = {"none", "ngram", "layerskip", "model", "head", "ngram+head"};
  if (std::find(std::begin(kDrafters), std::end(kDrafters), spec.drafter) == std::end(kDrafters)) {
    return make_error("--drafter: unknown drafter \"" + spec.drafter +
                      "\"; expected none, ngram, layerskip, model, head or ngram+head");
  }
  if (spec.drafter == "model" && !spec.draft_model) return make_error("--drafter model needs --draft-model M");
  if (spec.drafter != "model" && spec.draft_model) return make_error("--draft-model is only used with --drafter model");
  if (uses_draft_head(spec) && !spec.draft_head) {
    return make_error("--drafter " + spec.drafter + " needs --draft-head FILE");
  }
  if (!uses_draft_head(spec) && spec.draft_head) {
    return make_error("--draft-head is only used with --drafter head or ngram+head");
  }
  if (auto shape = parse_tree_shape(spec.tree); !shape) return make_error("--tree: " + shape.error().message);
  if (auto rule = make_acceptance_rule(default_accept(spec, temperature)); !rule) {
    return make_error("--accept: " + rule.error().message);
  }
  if (spec.ngram_min > spec.ngram_n) {
    return make_error("--ngram-min " + std::to_string(spec.ngram_min) + " is above --ngram-n " +
                      std::to_string(spec.ngram_n));
  }
  return Status::success();
}

Precision parse_precision(const std::string& name) {
  return name == "int8" ? Precision::Int8Activations : Precision::Default;  // CLI11 checked the name
}

// The run's sparse configuration from --sparse / --sparse-config, checked against the model.
Expected<SparseConfig> sparse_config(const SpeculationArgs& spec, const Model& model) {
  auto config = spec.sparse_config ? load_sparse_config(*spec.sparse_config) : sparse_preset(spec.sparse);
  if (config) config = prepare_sparse_config(std::move(*config), model);
  if (!config) return make_error((spec.sparse_config ? "--sparse-config: " : "--sparse: ") + config.error().message);
  return config;
}

Expected<std::string> target_backend_kind(const SpeculationArgs& spec, const std::string& kind) {
  if (!uses_draft_head(spec)) return kind;
  auto head_kind = head_drafter_target_backend(kind);
  if (!head_kind) return make_error("--backend " + kind + ": " + head_kind.error().message);
  return head_kind;
}

// nullptr for --drafter none.
Expected<std::unique_ptr<Drafter>> make_drafter(const SpeculationArgs& spec, const Model& target, int threads,
                                                int kv_block_size, const std::string& target_backend,
                                                ThreadPool* target_pool) {
  DrafterPlacement where;
  where.threads = threads;
  where.kv_block_size = kv_block_size;
  where.backend = spec.draft_backend == "auto" ? target_backend : spec.draft_backend;
  const NgramOptions ngram = {spec.ngram_n, spec.ngram_min, spec.ngram_max_length, spec.ngram_min_confidence,
                              spec.ngram_history};
  if (spec.drafter == "ngram") return make_ngram_drafter(ngram);
  if (spec.drafter == "layerskip") {
    if (auto layers = parse_layer_subset(spec.layers, target.config.n_layers); !layers) {
      return make_error("--layers: " + layers.error().message);
    }
    return make_layerskip_drafter(target, spec.layers, where);
  }
  if (spec.drafter == "model") {
    auto draft = load(*spec.draft_model);
    if (!draft) return make_error("--draft-model: " + draft.error().message);
    return make_model_drafter(target, std::make_unique<Model>(std::move(*draft)), where);
  }
  if (uses_draft_head(spec)) {  // SpeculativeEngine refuses it on a backend without target features
    DraftHeadOptions options;
    options.threads = threads;
    options.pool = target_pool;
    options.min_confidence = spec.head_min_confidence;
    auto head = make_head_drafter(target, *spec.draft_head, options);
    if (!head) return make_error("--draft-head: " + head.error().message);
    if (spec.drafter == "ngram+head") return make_fallback_drafter(make_ngram_drafter(ngram), std::move(*head));
    return head;
  }
  return std::unique_ptr<Drafter>{};
}

SpeculativeOptions speculative_options(const SpeculationArgs& spec, int max_tokens, const SamplingParams& sampling,
                                       int kv_block_size) {
  SpeculativeOptions o;
  o.max_tokens = max_tokens;
  o.sampling = sampling;
  o.kv_block_size = kv_block_size;
  o.tree = *parse_tree_shape(spec.tree);  // checked by check_speculation_flags
  o.accept = default_accept(spec, sampling.temperature);
  o.controller.enabled = !spec.no_controller;
  return o;
}

namespace {

// The metrics of plain generate(): one target pass per token, nothing drafted.
SpeculativeMetrics plain_metrics(const GenerateResult& r) {
  std::vector<RoundRecord> rounds(static_cast<size_t>(r.timings.decode_tokens));
  for (auto& round : rounds) {
    round.emitted = 1;
    round.plain_ms = r.timings.decode_tokens > 0 ? r.timings.decode_seconds * 1e3 / r.timings.decode_tokens : 0;
  }
  return summarize_rounds(rounds, r.timings.decode_tokens + 1, r.timings.decode_seconds);
}

nlohmann::json timings_json(const GenerateTimings& t) {
  return {{"prefill_tokens", t.prefill_tokens},
          {"prefill_seconds", t.prefill_seconds},
          {"prefill_tokens_per_s", t.prefill_tokens_per_s()},
          {"decode_tokens", t.decode_tokens},
          {"decode_seconds", t.decode_seconds},
          {"decode_tokens_per_s", t.decode_tokens_per_s()}};
}

std::string dump(const nlohmann::json& j, int indent = -1) {
  // Invalid UTF-8 from a model must not make the JSON writer throw.
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string quoted_token(const Model& m, int32_t id) {
  return id < 0 ? std::string("(end)") : std::to_string(id) + " " + dump(nlohmann::json(m.tokenizer.token_bytes(id)));
}

// The backend a speculative engine runs on: --backend, where auto means the GPU when one is
// present and the run needs nothing only the CPU has (int8 activations, exact scoring, a
// model shape the CUDA backend lacks).
Expected<std::unique_ptr<TransformerBackend>> engine_backend(const std::string& kind, const Model& model, int threads,
                                                             Precision precision, const SparseConfig& sparse) {
  const bool cpu_only =
      precision != Precision::Default || !cuda_sparse_supported(sparse) || !cuda_backend_supports(model.config);
  std::string resolved = kind;
  if (kind == "auto") resolved = resolve_backend_kind("auto") == "cuda" && !cpu_only ? "cuda" : "cpu";
  if (resolved == "cuda") {
    if (precision != Precision::Default) {
      return make_error(
          "--precision int8 is a CPU option (the CUDA backend computes in bf16 and f32); use --backend cpu");
    }
    if (auto ok = cuda_sparse_supported(sparse); !ok) return ok.error();
    if (const std::string why = cuda_backend_unsupported(model.config); !why.empty()) {
      return make_error("the CUDA backend does not run this " + model.config.architecture + " model (" + why +
                        "); use --backend cpu");
    }
  }
  BackendOptions options;
  options.kind = resolved;
  options.threads = threads;
  options.precision = precision;
  return make_backend(model, options);
}

int run_speculative(const GenerateArgs& args, const Model& model, std::span<const int32_t> prompt,
                    const GenerateOptions& plain_options) {
  auto options = speculative_options(args.spec, args.max_tokens, plain_options.sampling, args.kv_block_size);
  auto sparse = sparse_config(args.spec, model);
  if (!sparse) return fail(sparse.error().message);
  options.sparse = *sparse;
  const auto kind = target_backend_kind(args.spec, args.backend);
  if (!kind) return fail(kind.error().message);
  auto backend = engine_backend(*kind, model, args.threads, plain_options.precision, options.sparse);
  if (!backend) return fail(backend.error().message);
  SpeculativeEngine engine(model, std::move(*backend));
  auto drafter = make_drafter(args.spec, model, args.threads, args.kv_block_size, engine.backend().name(),
                              engine.cpu_transformer() ? &engine.cpu_transformer()->thread_pool() : nullptr);
  if (!drafter) return fail(drafter.error().message);
  std::optional<RunRecording> recording;
  if (args.record) {
    auto started = RunRecording::start(args, model, prompt.size(), options, engine.backend());
    if (!started) return fail(started.error().message);
    recording = std::move(*started);
  }
  if (!args.json && engine.backend().name() != "cpu") {
    std::fprintf(stderr, "specula-cli: target on the %s backend (%s), drafter %s\n", engine.backend().name().c_str(),
                 engine.backend().device().c_str(), *drafter ? (*drafter)->name().c_str() : "none");
  }
  Utf8Stream stream;
  const TokenCallback on_token = stdout_streamer(args.json, stream);
  auto result = engine.generate(prompt, drafter->get(), options, on_token);
  std::string recorded;
  if (recording) {  // also after a failed run: its finished rounds stay readable
    auto finished = recording->finish();
    if (!finished) return fail(finished.error().message);
    recorded = *finished;
  }
  if (!result) {
    if (!args.json) std::fputc('\n', stdout);
    return fail(result.error().message);
  }
  std::optional<GenerateResult> shadow;
  std::optional<Divergence> divergence;
  if (args.shadow) {
    // Plain decoding on the same backend: on the CPU the plain generator, elsewhere the engine's
    // loop without a drafter.
    Expected<GenerateResult> plain = make_error("shadow: no run");
    if (engine.cpu_transformer()) {
      plain = generate(model, prompt, plain_options, nullptr);
    } else if (auto r = engine.generate(prompt, nullptr, options, nullptr); r) {
      plain = GenerateResult{r->tokens, r->text, r->timings, r->stopped_by_eos};
    } else {
      plain = r.error();
    }
    if (!plain) return fail("shadow: " + plain.error().message);
    divergence = first_divergence(result->tokens, plain->tokens);
    shadow = std::move(*plain);
  }
  const auto& m = result->metrics;
  // Plain and speculative sampling draw different random numbers, so their token streams are
  // comparable only when the target side is greedy.
  const bool comparable = result->acceptance == "greedy" || !(options.sampling.temperature > 0);
  if (args.json) {
    nlohmann::json out = {
        {"model", model.path.string()},
        {"text", result->text},
        {"tokens", result->tokens},
        {"prompt_tokens", prompt.size()},
        {"stop_reason", result->stopped_by_eos ? "eos" : "max_tokens"},
        {"timings", timings_json(result->timings)},
        {"speculative",
         {{"drafter", result->drafter},
          {"tree", options.tree.to_string()},
          {"accept", result->acceptance},
          {"lossless", result->lossless},
          {"controller", options.controller.enabled}}},
        {"backend", {{"name", engine.backend().name()}, {"device", engine.backend().device()}}},
        {"metrics", to_json(m)},
        {"sparse", options.sparse.to_json()},
    };
    if (recording) out["session"] = recording->path();
    if (!result->lossless)
      out["speculative"]["warning"] = "lossy acceptance: the output does not follow the target distribution";
    if (shadow) {
      nlohmann::json sh = {{"plain_tokens", shadow->tokens.size()},
                           {"plain_decode_tokens_per_s", shadow->timings.decode_tokens_per_s()},
                           {"comparable", comparable},
                           {"diverged", divergence.has_value()}};
      if (divergence) {
        sh["first_divergence"] = {{"index", divergence->index},
                                  {"speculative_token", divergence->speculative_token},
                                  {"plain_token", divergence->plain_token}};
      }
      out["shadow"] = sh;
    }
    std::puts(dump(out).c_str());
    return 0;
  }
  finish_stream(stream, result->timings);
  std::fprintf(stderr,
               "speculative: %s, tree %s, accept %s%s | mean accepted length %.2f (p50 %.0f, p90 %.0f), %.2f target "
               "passes/token, draft %.1f ms, verify %.1f ms, plain %.1f ms, rollback %lld tokens, controller "
               "fallbacks %d\n",
               result->drafter.c_str(), options.tree.to_string().c_str(), result->acceptance.c_str(),
               result->lossless ? "" : " (LOSSY: output does not follow the target distribution)",
               m.mean_accepted_length, m.accepted_length_p50, m.accepted_length_p90, m.target_passes_per_token,
               m.draft_ms, m.verify_ms, m.plain_decode_ms, static_cast<long long>(m.rollback_tokens),
               m.controller_fallbacks);
  if (recording) std::fprintf(stderr, "%s\n", recorded.c_str());
  if (shadow) {
    if (!divergence) {
      std::fprintf(stderr, "shadow: no divergence from plain decoding over %zu tokens\n", result->tokens.size());
    } else {
      std::fprintf(stderr, "shadow: first divergence at token %lld: speculative %s, plain %s%s\n",
                   static_cast<long long>(divergence->index),
                   quoted_token(model, divergence->speculative_token).c_str(),
                   quoted_token(model, divergence->plain_token).c_str(),
                   comparable ? "" : " (sampling: plain and speculative runs draw differently)");
    }
  }
  return 0;
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  if (const int code = run_generate_on_backend(args); code != kUseCpuGenerate) return code;
  if (auto ok = check_speculation_flags(args.spec, args.temperature); !ok) return fail(ok.error().message);
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
  options.precision = parse_precision(args.precision);
  if (args.spec.drafter != "none" || args.shadow || args.record || args.spec.sparse != "strict" ||
      args.spec.sparse_config) {
    return run_speculative(args, *model, prompt, options);
  }

  Utf8Stream stream;  // never splits a multi-byte character across writes
  const TokenCallback on_token = stdout_streamer(args.json, stream);
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
        {"metrics", to_json(plain_metrics(*result))},
    };
    std::puts(dump(out).c_str());
    return 0;
  }
  finish_stream(stream, t);
  return 0;
}

namespace {

// Spec-Bench reports the eight MT-bench categories as one.
std::string specbench_category(const std::string& category) {
  static const char* const kMtBench[] = {"writing", "roleplay",   "reasoning", "math",
                                         "coding",  "extraction", "stem",      "humanities"};
  return std::find(std::begin(kMtBench), std::end(kMtBench), category) != std::end(kMtBench) ? "mt_bench" : category;
}

}  // namespace

Expected<std::vector<BenchItem>> read_specbench(const std::string& path, int limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path + ": cannot open Spec-Bench data");
  std::vector<BenchItem> items;
  std::map<std::string, int> per_category;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("category") || !j["category"].is_string() ||
        !j.contains("turns") || !j["turns"].is_array() || j["turns"].empty() || !j["turns"][0].is_string()) {
      return make_error(path + ":" + std::to_string(line_no) + ": expected {\"category\": ..., \"turns\": [\"...\"]}");
    }
    BenchItem item{specbench_category(j["category"].get<std::string>()), j["turns"][0].get<std::string>()};
    if (limit > 0 && per_category[item.category] >= limit) continue;
    ++per_category[item.category];
    items.push_back(std::move(item));
  }
  if (items.empty()) return make_error(path + ": no items");
  return items;
}

int run_specbench(const SpecbenchArgs& args) {
  if (args.spec.drafter == "none")
    return fail("specbench: --drafter none has nothing to compare; pick ngram, layerskip, model, head or ngram+head");
  if (auto ok = check_speculation_flags(args.spec, 0.0f); !ok) return fail(ok.error().message);
  const auto kind = target_backend_kind(args.spec, args.backend);
  if (!kind) return fail(kind.error().message);
  auto items = read_specbench(args.data, args.limit);
  if (!items) return fail(items.error().message);
  auto model = load(args.model);
  if (!model) return fail(model.error().message);
  auto options = speculative_options(args.spec, args.max_tokens, SamplingParams{}, args.kv_block_size);
  auto sparse = sparse_config(args.spec, *model);
  if (!sparse) return fail(sparse.error().message);
  options.sparse = *sparse;
  auto backend = engine_backend(*kind, *model, args.threads, parse_precision(args.precision), options.sparse);
  if (!backend) return fail(backend.error().message);
  SpeculativeEngine engine(*model, std::move(*backend));
  auto drafter = make_drafter(args.spec, *model, args.threads, args.kv_block_size, engine.backend().name(),
                              engine.cpu_transformer() ? &engine.cpu_transformer()->thread_pool() : nullptr);
  if (!drafter) return fail(drafter.error().message);

  struct Totals {
    int items = 0;
    int spec_rounds = 0;
    double accepted_sum = 0;  // sum over speculative rounds of the accepted length
    double plain_seconds = 0, spec_seconds = 0;
    int plain_tokens = 0, spec_tokens = 0;
    int mismatches = 0;  // items whose greedy outputs differ (a lossless run has none)
    nlohmann::json to_json() const {
      const double plain_tpot = plain_tokens > 0 ? plain_seconds / plain_tokens : 0;
      const double spec_tpot = spec_tokens > 0 ? spec_seconds / spec_tokens : 0;
      return {{"items", items},
              {"mean_accepted_length", spec_rounds > 0 ? accepted_sum / spec_rounds : 1.0},
              {"plain_tokens_per_s", plain_seconds > 0 ? plain_tokens / plain_seconds : 0},
              {"speculative_tokens_per_s", spec_seconds > 0 ? spec_tokens / spec_seconds : 0},
              {"speedup", spec_tpot > 0 ? plain_tpot / spec_tpot : 0},
              {"output_mismatches", mismatches}};
    }
  };
  // One break-even controller for the whole run, as a server's would be: what the first items
  // teach it (a drafter that does not pay) carries to the next, instead of a fresh warmup and probe
  // schedule on every item (which cost a drafter whose drafts are all rejected about half of
  // plain decoding's speed on the GPU, bench/results/cuda_e2e_final_s9_h100_2026-11-24.json).
  BreakEvenController controller(options.controller);
  SpeculativeOptions spec_options = options;
  if (options.controller.enabled) spec_options.carried_controller = &controller;
  std::map<std::string, Totals> categories;
  Totals overall;
  std::vector<std::string> order;
  for (size_t i = 0; i < items->size(); ++i) {
    const BenchItem& item = (*items)[i];
    const ChatMessage user{"user", item.prompt};
    const std::string text = model->tokenizer.apply_chat_template(std::span(&user, 1), true);
    std::vector<int32_t> prompt;
    if (model->tokenizer.add_bos() && model->tokenizer.bos_id() >= 0) prompt.push_back(model->tokenizer.bos_id());
    const auto encoded = model->tokenizer.encode(text, true);
    prompt.insert(prompt.end(), encoded.begin(), encoded.end());
    // Plain and speculative runs of the same prompt back to back, on the same packed weights.
    auto plain = engine.generate(prompt, nullptr, options, nullptr);
    if (!plain)
      return fail("specbench item " + std::to_string(i + 1) + " (" + item.category + "): " + plain.error().message);
    auto spec = engine.generate(prompt, drafter->get(), spec_options, nullptr);
    if (!spec)
      return fail("specbench item " + std::to_string(i + 1) + " (" + item.category + "): " + spec.error().message);
    if (!categories.count(item.category)) order.push_back(item.category);
    for (Totals* t : {&categories[item.category], &overall}) {
      ++t->items;
      t->spec_rounds += spec->metrics.speculative_rounds;
      t->accepted_sum += spec->metrics.mean_accepted_length * spec->metrics.speculative_rounds;
      t->plain_seconds += plain->timings.decode_seconds;
      t->plain_tokens += plain->timings.decode_tokens;
      t->spec_seconds += spec->timings.decode_seconds;
      t->spec_tokens += spec->timings.decode_tokens;
      t->mismatches += plain->tokens != spec->tokens ? 1 : 0;
    }
    if (!args.json) {
      std::fprintf(stderr, "\r%zu/%zu %s", i + 1, items->size(), item.category.c_str());
      std::fflush(stderr);
    }
  }
  if (!args.json) std::fputc('\n', stderr);

  nlohmann::json report = {{"model", model->path.string()},
                           {"data", args.data},
                           {"drafter", (*drafter)->name()},
                           {"tree", options.tree.to_string()},
                           {"accept", options.accept},
                           {"controller", options.controller.enabled},
                           {"controller_scope", "run"},  // one controller carried across the items
                           {"controller_fallbacks", controller.fallbacks()},
                           {"max_tokens", args.max_tokens},
                           {"limit_per_category", args.limit},
                           {"backend", engine.backend().name()},
                           {"device", engine.backend().device()},
                           {"threads", engine.cpu_transformer() ? engine.cpu_transformer()->threads() : 0},
                           {"precision", args.precision},
                           {"overall", overall.to_json()}};
  for (const auto& name : order) report["categories"][name] = categories[name].to_json();
  if (args.out) {
    std::ofstream out(*args.out, std::ios::binary);
    if (!out) return fail(*args.out + ": cannot write the JSON report");
    out << dump(report, 2) << "\n";
  }
  if (args.json) {
    std::puts(dump(report).c_str());
    return 0;
  }
  std::printf("specbench: %s on %s, drafter %s, tree %s, accept %s, %d tokens per item\n",
              model->path.filename().c_str(), engine.backend().device().c_str(), (*drafter)->name().c_str(),
              options.tree.to_string().c_str(), options.accept.c_str(), args.max_tokens);
  std::printf("%-16s %6s %10s %12s %12s %8s\n", "category", "items", "accepted", "plain tok/s", "spec tok/s",
              "speedup");
  auto row = [](const std::string& name, const nlohmann::json& j) {
    std::printf("%-16s %6d %10.2f %12.1f %12.1f %7.2fx\n", name.c_str(), j["items"].get<int>(),
                j["mean_accepted_length"].get<double>(), j["plain_tokens_per_s"].get<double>(),
                j["speculative_tokens_per_s"].get<double>(), j["speedup"].get<double>());
  };
  for (const auto& name : order) row(name, report["categories"][name]);
  row("overall", report["overall"]);
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
    std::printf("%d\t%s\n", id,
                nlohmann::json(model->tokenizer.token_bytes(id))
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

}  // namespace specula::cli
