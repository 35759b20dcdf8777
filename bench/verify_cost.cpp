// What a verify forward of n tokens costs against a 1-token decode step, on the CPU backend with
// a real model: the curve that bounds speculative speedup (a round accepting a tokens beats plain
// decoding only if cost(n) < a · cost(1)). Context: `--context` committed tokens of real text.
// Prints JSON: ms per forward and the ratio to n = 1, per precision and logit-row mode.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>

#include "bench/bench_info.h"
#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"

namespace {

double cpu_ms_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Cost {
  double wall_ms = 1e30;
  double cpu_ms = 1e30;  // all threads' CPU time (spinning included); with --threads 1 it survives a busy machine
};

Cost best_cost(specula::CpuTransformer& tf, specula::KvCache& kv, const std::vector<int32_t>& tokens, int context,
               int n, specula::LogitRows rows_mode, int reps) {
  std::vector<int32_t> ids(tokens.begin() + context, tokens.begin() + context + n);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), context);
  const auto mask = specula::AttentionMask::causal(n);
  const auto V = static_cast<size_t>(tf.config().vocab_size);
  std::vector<float> logits(rows_mode == specula::LogitRows::All ? V * static_cast<size_t>(n) : V);
  Cost best;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_ms_now();
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = tf.forward(ids, pos, &mask, kv, logits, rows_mode); !s) {
      std::fprintf(stderr, "bench_verify_cost: %s\n", s.error().message.c_str());
      std::exit(1);
    }
    best.wall_ms = std::min(best.wall_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    best.cpu_ms = std::min(best.cpu_ms, cpu_ms_now() - c0);
    kv.rollback();
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_spec = "default", text_file = "/usr/share/common-licenses/GPL-3", commit = "unknown", out_path;
  int context = 512, max_n = 9, reps = 20, threads = 0;
  std::string precisions = "both";
  CLI::App app{"bench_verify_cost: ms of a verify forward of n tokens over n = 1 (CPU backend)"};
  app.add_option("--model", model_spec)->capture_default_str();
  app.add_option("--text", text_file)->capture_default_str();
  app.add_option("--context", context, "Committed tokens before the verify")->check(CLI::Range(1, 8192))->capture_default_str();
  app.add_option("--max-n", max_n, "Largest n")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--reps", reps)->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--threads", threads, "0 = all cores")->capture_default_str();
  app.add_option("--precision", precisions, "f32 | int8 | both")->check(CLI::IsMember({"f32", "int8", "both"}))->capture_default_str();
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  CLI11_PARSE(app, argc, argv);

  auto model = specula::load_model(specula::resolve_model_path(model_spec));
  if (!model) {
    std::fprintf(stderr, "bench_verify_cost: %s\n", model.error().message.c_str());
    return 1;
  }
  std::ifstream in(text_file);
  const auto ids = model->tokenizer.encode(std::string((std::istreambuf_iterator<char>(in)), {}), false);
  if (static_cast<int>(ids.size()) < context + max_n) {
    std::fprintf(stderr, "bench_verify_cost: %s gives %zu tokens, need %d\n", text_file.c_str(), ids.size(), context + max_n);
    return 1;
  }
  nlohmann::json curves = nlohmann::json::object();
  for (auto precision : {specula::Precision::Default, specula::Precision::Int8Activations}) {
    if (precisions != "both" && (precisions == "f32") != (precision == specula::Precision::Default)) continue;
    specula::CpuTransformer tf(*model, {threads, precision});
    auto kv = tf.make_kv_cache(16, context + max_n + 1);
    std::vector<int32_t> pos(static_cast<size_t>(context));
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<float> last(static_cast<size_t>(tf.config().vocab_size));
    if (auto s = tf.forward(std::span(ids).first(static_cast<size_t>(context)), pos, nullptr, *kv, last, specula::LogitRows::Last); !s) return 1;
    kv->commit_all();
    const char* pname = precision == specula::Precision::Default ? "f32_activations" : "int8_activations";
    for (auto mode : {specula::LogitRows::All, specula::LogitRows::Last}) {
      nlohmann::json curve = nlohmann::json::array();
      Cost base;
      for (int n = 1; n <= max_n; ++n) {
        const Cost cost = best_cost(tf, *kv, ids, context, n, mode, reps);
        if (n == 1) base = cost;
        curve.push_back({{"n", n}, {"ms", cost.wall_ms}, {"ratio_to_n1", cost.wall_ms / base.wall_ms},
                         {"cpu_ms", cost.cpu_ms}, {"cpu_ratio_to_n1", cost.cpu_ms / base.cpu_ms}});
        std::fprintf(stderr, "%s logits=%s n=%d %.3f ms (%.2fx), cpu %.3f ms (%.2fx)\n", pname,
                     mode == specula::LogitRows::All ? "all" : "last", n, cost.wall_ms, cost.wall_ms / base.wall_ms,
                     cost.cpu_ms, cost.cpu_ms / base.cpu_ms);
      }
      curves[std::string(pname) + (mode == specula::LogitRows::All ? "/all_logits" : "/last_logits")] = curve;
    }
  }
  const nlohmann::json out = {{"bench", "verify_cost"}, {"date", specula::bench::utc_now()},
                              {"host", specula::bench::host_info()}, {"command", specula::bench::command_line(argc, argv)},
                              {"commit", commit}, {"model", model->path.string()}, {"context", context},
                              {"threads", threads}, {"curves", curves}};
  std::puts(out.dump(2).c_str());
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
