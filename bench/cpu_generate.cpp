// CPU speed of plain generation on a real model: 512-token prefill tokens/s and decode
// tokens/s, as JSON. bench/cpu_vs_llamacpp.py runs it beside llama.cpp's llama-bench.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "bench/bench_info.h"
#include "engine/generate.h"
#include "engine/model/loader.h"

int main(int argc, char** argv) {
  std::string model_spec = "default";
  std::string text_file = "/usr/share/common-licenses/GPL-3";
  std::string commit = "unknown", out_path;
  int prefill = 512, decode = 128, reps = 3, threads = 0;
  CLI::App app{"bench_cpu_generate: prefill and decode tokens/s on the CPU backend"};
  app.add_option("--model", model_spec)->capture_default_str();
  app.add_option("--text", text_file, "Prompt source text")->capture_default_str();
  app.add_option("--prefill", prefill, "Prompt tokens")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--decode", decode, "Generated tokens")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--reps", reps)->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--threads", threads, "0 = all cores")->capture_default_str();
  app.add_option("--commit", commit, "Commit the binary was built from");
  app.add_option("--out", out_path, "Also write the JSON here");
  CLI11_PARSE(app, argc, argv);

  auto model = specula::load_model(specula::resolve_model_path(model_spec));
  if (!model) {
    std::fprintf(stderr, "bench_cpu_generate: %s\n", model.error().message.c_str());
    return 1;
  }
  std::ifstream in(text_file);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  auto ids = model->tokenizer.encode(text, false);
  if (static_cast<int>(ids.size()) < prefill) {
    std::fprintf(stderr, "bench_cpu_generate: %s gives only %zu tokens, need %d\n", text_file.c_str(), ids.size(), prefill);
    return 1;
  }
  ids.resize(prefill);

  specula::GenerateOptions options;
  options.max_tokens = decode;
  options.threads = threads;
  options.stop_at_eos = false;  // always decode exactly `decode` tokens
  nlohmann::json runs = nlohmann::json::array();
  double best_prefill = 0, best_decode = 0, sum_prefill = 0, sum_decode = 0;
  for (int r = 0; r < reps; ++r) {
    auto result = specula::generate(*model, ids, options, [](int32_t, std::string_view) { return true; });
    if (!result) {
      std::fprintf(stderr, "bench_cpu_generate: %s\n", result.error().message.c_str());
      return 1;
    }
    const auto& t = result->timings;
    runs.push_back({{"prefill_tokens_per_s", t.prefill_tokens_per_s()}, {"decode_tokens_per_s", t.decode_tokens_per_s()},
                    {"decode_tokens", t.decode_tokens}});
    best_prefill = std::max(best_prefill, t.prefill_tokens_per_s());
    best_decode = std::max(best_decode, t.decode_tokens_per_s());
    sum_prefill += t.prefill_tokens_per_s();
    sum_decode += t.decode_tokens_per_s();
  }
  nlohmann::json out = {
      {"bench", "cpu_generate"},
      {"date", specula::bench::utc_now()},
      {"host", specula::bench::host_info()},
      {"commit", commit},
      {"command", specula::bench::command_line(argc, argv)},
      {"model", model->path.string()},
      {"model_synthetic", false},
      {"threads", threads},
      {"prefill_tokens", prefill},
      {"decode_tokens", decode},
      {"runs", runs},
      {"best", {{"prefill_tokens_per_s", best_prefill}, {"decode_tokens_per_s", best_decode}}},
      {"mean", {{"prefill_tokens_per_s", sum_prefill / reps}, {"decode_tokens_per_s", sum_decode / reps}}},
  };
  std::puts(out.dump(2).c_str());
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
