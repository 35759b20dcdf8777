// What a draft step of the head drafter (engine/spec/head_drafter.h) costs next to the target's
// one-token decode step, on the CPU: the default model (SmolLM2-135M) as target, a head of
// random weights (H = the model's, --ffn, each --vocab-ids size), its matrices quantized as the
// drafter loads them, with int8 and with f32 activations. The target step is one token after
// --context committed tokens (random ids), at --precision f32 and int8. Also a whole chain:4
// draft() (4 steps plus the softmax and top-k of each), warm (back to back: the head's weights
// stay in cache) and as in the speculative loop (each draft right after an int8 target step,
// which streams ~95 MB of weights through the caches). Median and best of --reps, ms.
// --ids: the head's vocab_ids, "low" = 0..V-1 (a stand-in for a trained head's most frequent
// tokens: BPE ids grow as merges get rarer) or "random" (V ids spread over the vocabulary). It
// matters beside the matmuls: a draft distribution is dense up to its largest drafted id
// (engine/spec/draft_tree.h), so drafting id 40000 allocates and scans 40001 floats.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "bench/bench_info.h"
#include "engine/model/cpu_transformer.h"
#include "engine/spec/head_drafter.h"
#include "tests/engine/spec/draft_head_file.h"

namespace {

using namespace specula;
using Clock = std::chrono::steady_clock;

struct Timing {
  double median_ms = 0, best_ms = 0;
};

template <class Fn>
Timing time_ms(int reps, Fn&& fn) {
  fn();  // warm
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_spec = "default", commit = "unknown", out_path, ids = "low";
  int threads = 2, head_threads = 0, reps = 50, context = 256;
  int64_t ffn = 1536;
  std::vector<int64_t> vocab_sizes = {4096, 8192};
  CLI::App app{"bench_draft_head_cost: a head-drafter step vs the target's decode step (CPU)"};
  app.add_option("--model", model_spec)->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--head-threads", head_threads, "The head's threads (0 = --threads)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  app.add_option("--reps", reps)->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--context", context)->check(CLI::Range(1, 2000))->capture_default_str();
  app.add_option("--ffn", ffn, "The head's ffn_size")->check(CLI::Range(32, 16384))->capture_default_str();
  app.add_option("--vocab-ids", vocab_sizes, "Head vocabulary sizes (V) to time")->capture_default_str();
  app.add_option("--ids", ids, "vocab_ids: low (0..V-1) | random")
      ->check(CLI::IsMember({"low", "random"}))
      ->capture_default_str();
  app.add_option("--commit", commit);
  app.add_option("--out", out_path, "Also write the JSON here");
  CLI11_PARSE(app, argc, argv);
  if (head_threads == 0) head_threads = threads;

  auto model = load_model(resolve_model_path(model_spec));
  if (!model) {
    std::fprintf(stderr, "bench_draft_head_cost: %s\n", model.error().message.c_str());
    return 1;
  }
  const ModelConfig& cfg = model->config;
  nlohmann::json report = {{"bench", "draft_head_cost"},
                           {"date", bench::utc_now()},
                           {"host", bench::host_info()},
                           {"command", bench::command_line(argc, argv)},
                           {"commit", commit},
                           {"model", model->path.string()},
                           {"threads", threads},
                           {"head_threads", head_threads},
                           {"context", context},
                           {"reps", reps},
                           {"head_ffn", ffn},
                           {"vocab_ids", ids}};

  // The target's one-token step after `context` committed tokens.
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size) - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (auto& t : prompt) t = token(rng);
  std::vector<int32_t> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size)), feature(static_cast<size_t>(cfg.dim));
  const int32_t next_token = 42, at = context;
  std::optional<CpuTransformer> int8_target;
  std::optional<KvCache> int8_kv;
  for (const auto& [name, precision] : {std::pair{"f32", Precision::Default}, {"int8", Precision::Int8Activations}}) {
    CpuTransformer target(*model, {threads, precision});
    auto kv = target.make_kv_cache(16, context + 1);
    if (!kv || !target.forward(prompt, positions, nullptr, *kv, logits, LogitRows::Last)) return 1;
    kv->commit_all();
    (void)target.last_features(0, feature);
    const Timing t = time_ms(reps, [&] {
      (void)target.forward({&next_token, 1}, {&at, 1}, nullptr, *kv, logits, LogitRows::Last);
      kv->rollback();
    });
    report["target_step_ms"][name] = {{"median", t.median_ms}, {"best", t.best_ms}};
    if (precision == Precision::Int8Activations) {
      int8_target.emplace(std::move(target));
      int8_kv.emplace(std::move(*kv));
    }
  }
  // A draft right after a target step, as in the loop: only the draft is timed.
  const auto after_target_step = [&](auto&& draft) {
    std::vector<double> ms;
    for (int r = 0; r <= reps; ++r) {
      (void)int8_target->forward({&next_token, 1}, {&at, 1}, nullptr, *int8_kv, logits, LogitRows::Last);
      int8_kv->rollback();
      const auto t0 = Clock::now();
      draft();
      if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return Timing{ms[ms.size() / 2], ms.front()};
  };

  const auto file = std::filesystem::temp_directory_path() / "specula_bench_draft_head.safetensors";
  std::printf("target step (1 token after %d): f32 %.3f ms, int8 %.3f ms (median, %d threads)\n", context,
              report["target_step_ms"]["f32"]["median"].get<double>(),
              report["target_step_ms"]["int8"]["median"].get<double>(), threads);
  std::printf("%6s %5s %7s %10s %10s %12s %14s %14s %10s\n", "V", "acts", "pool", "step_ms", "best_ms", "chain4_ms",
              "step_in_loop", "chain4_in_loop", "weight_MB");
  for (int64_t V : vocab_sizes) {
    auto random_head = testing::HeadFile::random(cfg.dim, ffn, V, cfg.vocab_size);
    auto& head_ids = random_head.tensors["vocab_ids"].ids;
    if (ids == "low") std::iota(head_ids.begin(), head_ids.end(), 0);
    random_head.write(file);
    // (int8 activations, the target's thread pool) is how specula-cli runs the head.
    for (const auto& [int8, shared_pool] : {std::pair{true, true}, {true, false}, {false, true}}) {
      DraftHeadOptions options;
      options.threads = head_threads;
      options.int8_activations = int8;
      if (shared_pool) options.pool = &int8_target->thread_pool();
      auto head = DraftHead::load(*model, file, options);
      auto drafter = make_head_drafter(*model, file, options);
      if (!head || !drafter) {
        std::fprintf(stderr, "bench_draft_head_cost: %s\n", (head ? drafter.error() : head.error()).message.c_str());
        return 1;
      }
      std::vector<float> next(static_cast<size_t>(cfg.dim)), head_logits(static_cast<size_t>(V));
      const Timing step = time_ms(reps, [&] { (void)(*head)->step(feature, 42, next, head_logits); });
      DraftRequest request;
      request.shape = *parse_tree_shape("chain:4");
      request.filters = SamplingParams{1.0f, 0, 1.0f, 0};
      request.target_feature = feature;
      const std::vector<int32_t> sequence = {1, 2, 42};
      const Timing chain = time_ms(reps, [&] { (void)(*drafter)->draft(sequence, request); });
      const Timing loop_step = after_target_step([&] { (void)(*head)->step(feature, 42, next, head_logits); });
      const Timing loop_chain = after_target_step([&] { (void)(*drafter)->draft(sequence, request); });
      const double mb = static_cast<double>((*head)->weight_bytes()) / 1e6;
      std::printf("%6lld %5s %7s %10.3f %10.3f %12.3f %14.3f %14.3f %10.2f\n", static_cast<long long>(V),
                  int8 ? "int8" : "f32", shared_pool ? "target" : "own", step.median_ms, step.best_ms, chain.median_ms,
                  loop_step.median_ms, loop_chain.median_ms, mb);
      report["head"].push_back(
          {{"vocab_ids", V},
           {"activations", int8 ? "int8" : "f32"},
           {"pool", shared_pool ? "the target's" : "own"},
           {"step_ms", {{"median", step.median_ms}, {"best", step.best_ms}}},
           {"chain4_draft_ms", {{"median", chain.median_ms}, {"best", chain.best_ms}}},
           {"step_after_target_step_ms", {{"median", loop_step.median_ms}, {"best", loop_step.best_ms}}},
           {"chain4_after_target_step_ms", {{"median", loop_chain.median_ms}, {"best", loop_chain.best_ms}}},
           {"weight_bytes", (*head)->weight_bytes()}});
    }
  }
  std::filesystem::remove(file);
  const std::string text = report.dump(2);
  if (!out_path.empty()) std::ofstream(out_path) << text << "\n";
  std::puts(text.c_str());
  return 0;
}
