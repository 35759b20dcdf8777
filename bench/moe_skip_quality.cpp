// What MoE expert skipping costs in the logits: calibrate the skip thresholds (median ratio,
// engine/model/moe_calibration.h) on one set of token sequences, then run another set with skip
// budgets 1..k-1 and compare every position's logits with the same forward without skipping.
// Reports per budget the routed and skipped (token, expert) pairs, the relative L2 of the
// logits (mean and worst row) and how often the argmax changes.
//
//   bench_moe_skip_quality --model tests/data/moe/qwen3moe.gguf
// Sequences are seeded random token ids (the fixtures are random-initialised: there is no text
// distribution to follow), calibration and evaluation from different seeds.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "bench/bench_info.h"
#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"
#include "engine/model/moe_calibration.h"

namespace {

void fail(const std::string& message) {
  std::fprintf(stderr, "bench_moe_skip_quality: %s\n", message.c_str());
  std::exit(1);
}

std::vector<std::vector<int32_t>> random_sequences(int count, int length, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count), std::vector<int32_t>(static_cast<size_t>(length)));
  for (auto& s : out) {
    for (auto& t : s) t = token(rng);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, commit = "unknown", out_path;
  int sequences = 32, length = 48, threads = 1;
  CLI::App app{"bench_moe_skip_quality: logit change of MoE expert skipping at budgets 1..k-1"};
  app.add_option("--model", model_path, "An MoE model (GGUF or HF directory)")->required();
  app.add_option("--sequences", sequences, "Sequences per set")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--length", length, "Tokens per sequence")->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  CLI11_PARSE(app, argc, argv);

  auto model = specula::load_model(model_path);
  if (!model) fail(model.error().message);
  const auto& cfg = model->config;
  if (!cfg.is_moe()) fail(model_path + " has no MoE layers");
  if (length > cfg.context_length) fail("--length exceeds the model's context");
  specula::CpuTransformer tf(*model, {threads, specula::Precision::Default});
  const auto calib = random_sequences(sequences, length, cfg.vocab_size, 1);
  const auto eval = random_sequences(sequences, length, cfg.vocab_size, 2);
  auto thresholds = specula::calibrate_moe(tf, calib);
  if (!thresholds) fail(thresholds.error().message);

  const int64_t V = cfg.vocab_size, k = cfg.n_experts_used;
  auto kv = tf.make_kv_cache(16, length);
  if (!kv) fail(kv.error().message);
  std::vector<int32_t> pos(static_cast<size_t>(length));
  for (int i = 0; i < length; ++i) pos[static_cast<size_t>(i)] = i;
  std::vector<float> dense(static_cast<size_t>(length * V)), skipped(dense.size());
  nlohmann::json budgets = nlohmann::json::array();
  for (int64_t s = 1; s < k; ++s) {
    specula::SparseConfig sc = *specula::sparse_preset("smoe");
    sc.moe_skip_budget = static_cast<int>(s);
    sc.moe_thresholds = thresholds->thresholds;
    specula::SparseStats stats;
    int64_t rows = 0, flips = 0;
    double sum_l2 = 0, worst_l2 = 0;
    for (const auto& seq : eval) {
      if (auto st = tf.forward(seq, pos, nullptr, *kv, dense, specula::LogitRows::All); !st) fail(st.error().message);
      kv->rollback();
      specula::ForwardContext ctx;
      ctx.sparse = &sc;
      ctx.stats = &stats;
      if (auto st = tf.forward(seq, pos, nullptr, *kv, skipped, specula::LogitRows::All, &ctx); !st) fail(st.error().message);
      kv->rollback();
      for (int64_t r = 0; r < length; ++r) {
        const float* d = dense.data() + r * V;
        const float* q = skipped.data() + r * V;
        double diff = 0, norm = 0;
        for (int64_t i = 0; i < V; ++i) {
          diff += (double(q[i]) - d[i]) * (double(q[i]) - d[i]);
          norm += double(d[i]) * d[i];
        }
        const double l2 = std::sqrt(diff / std::max(norm, 1e-30));
        sum_l2 += l2;
        worst_l2 = std::max(worst_l2, l2);
        flips += (std::max_element(d, d + V) - d) != (std::max_element(q, q + V) - q);
        ++rows;
      }
    }
    const double skip_ratio = static_cast<double>(stats.moe_skipped) / static_cast<double>(std::max<int64_t>(stats.moe_routed, 1));
    budgets.push_back({{"budget", s},
                       {"routed_pairs", stats.moe_routed},
                       {"skipped_pairs", stats.moe_skipped},
                       {"skipped_over_routed", skip_ratio},
                       {"experts_run_per_token", static_cast<double>(k) * (1.0 - skip_ratio)},
                       {"rows", rows},
                       {"mean_rel_l2", sum_l2 / static_cast<double>(rows)},
                       {"worst_rel_l2", worst_l2},
                       {"argmax_flips", flips}});
    std::fprintf(stderr, "budget %lld: skipped/routed %.3f, logits rel L2 mean %.3e worst %.3e, argmax flips %lld of %lld\n",
                 static_cast<long long>(s), skip_ratio, sum_l2 / static_cast<double>(rows), worst_l2,
                 static_cast<long long>(flips), static_cast<long long>(rows));
  }
  const nlohmann::json out = {{"bench", "moe_skip_quality"},
                              {"date", specula::bench::utc_now()},
                              {"host", specula::bench::host_info()},
                              {"command", specula::bench::command_line(argc, argv)},
                              {"commit", commit},
                              {"model", model_path},
                              {"model_synthetic", true},
                              {"n_experts", cfg.n_experts},
                              {"experts_per_token", k},
                              {"calibration", {{"sequences", sequences}, {"length", length}, {"seed", 1},
                                               {"thresholds", thresholds->thresholds}}},
                              {"evaluation", {{"sequences", sequences}, {"length", length}, {"seed", 2}}},
                              {"budgets", budgets}};
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  std::puts(out.dump(2).c_str());
  return 0;
}
