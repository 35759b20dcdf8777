// What recording costs a run: tokens/s of the same speculative generation (default model, ngram
// drafter, CPU backend) with no observer, and with the session recorder at summary and full level.
// Runs are interleaved (none, summary, full, none, ...) so drift in machine load hits all three
// alike; the figure is the median over reps. Goal (issue 5): recording costs at most 5%.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "bench/bench_info.h"
#include "engine/model/loader.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"
#include "profiler/recorder.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_spec = "default", text_file = "/usr/share/common-licenses/GPL-3", commit = "unknown", out_path;
  int prompt_tokens = 256, decode = 96, reps = 5, threads = 0;
  CLI::App app{"bench_record_overhead: tokens/s with and without the session recorder"};
  app.add_option("--model", model_spec)->capture_default_str();
  app.add_option("--text", text_file, "Prompt source text")->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens)->check(CLI::Range(8, 4096))->capture_default_str();
  app.add_option("--decode", decode)->check(CLI::Range(8, 4096))->capture_default_str();
  app.add_option("--reps", reps)->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--threads", threads, "0 = all cores")->capture_default_str();
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  CLI11_PARSE(app, argc, argv);

  auto model = specula::load_model(specula::resolve_model_path(model_spec));
  if (!model) {
    std::fprintf(stderr, "bench_record_overhead: %s\n", model.error().message.c_str());
    return 1;
  }
  std::ifstream in(text_file);
  auto ids = model->tokenizer.encode(std::string((std::istreambuf_iterator<char>(in)), {}), false);
  if (static_cast<int>(ids.size()) < prompt_tokens) {
    std::fprintf(stderr, "bench_record_overhead: %s gives only %zu tokens\n", text_file.c_str(), ids.size());
    return 1;
  }
  ids.resize(static_cast<size_t>(prompt_tokens));
  specula::SpeculativeEngine engine(*model, threads);
  auto drafter = specula::make_ngram_drafter({3, 1, 0});
  if (!drafter) return 1;
  const std::filesystem::path session = std::filesystem::temp_directory_path() / "specula_record_overhead.sqlite";

  const std::vector<std::string> modes = {"none", "summary", "full"};
  std::map<std::string, std::vector<double>> rates;
  std::map<std::string, int64_t> rounds_written;
  for (int r = 0; r < reps; ++r) {
    for (const std::string& mode : modes) {
      specula::SpeculativeOptions options;
      options.max_tokens = decode;
      options.stop_at_eos = false;
      options.controller.enabled = false;  // the same rounds in every mode
      std::shared_ptr<specula::profiler::Recorder> recorder;
      if (mode != "none") {
        specula::profiler::RecorderOptions ro;
        ro.level = *specula::parse_observe_level(mode);
        ro.overwrite = true;
        auto created = specula::profiler::Recorder::create(session.string(), ro);
        if (!created) {
          std::fprintf(stderr, "bench_record_overhead: %s\n", created.error().message.c_str());
          return 1;
        }
        recorder = *created;
        options.observer = recorder.get();
      }
      auto result = engine.generate(ids, drafter.get(), options, nullptr);
      if (!result) {
        std::fprintf(stderr, "bench_record_overhead: %s\n", result.error().message.c_str());
        return 1;
      }
      // The writer thread's work after the last token counts too: finish before stopping the clock
      // would hide nothing from tokens/s, which the engine measured; report rounds written.
      if (recorder) {
        if (auto s = recorder->finish(); !s) return 1;
        rounds_written[mode] = recorder->stats().rounds_written;
      }
      rates[mode].push_back(result->timings.decode_tokens_per_s());
    }
  }
  nlohmann::json figures = nlohmann::json::object();
  const double base = median(rates["none"]);
  for (const std::string& mode : modes) {
    const double m = median(rates[mode]);
    figures[mode] = {{"decode_tokens_per_s_median", m}, {"runs", rates[mode]}, {"overhead", base > 0 ? 1.0 - m / base : 0.0}};
    if (mode != "none") figures[mode]["rounds_written"] = rounds_written[mode];
  }
  std::filesystem::remove(session);
  const nlohmann::json out = {{"bench", "record_overhead"}, {"date", specula::bench::utc_now()},
                              {"host", specula::bench::host_info()}, {"device", "CPU: " + specula::cpu_model_name()},
                              {"commit", commit}, {"command", specula::bench::command_line(argc, argv)},
                              {"model", model->path.string()}, {"model_synthetic", false},
                              {"drafter", "ngram:n=3, chain:4, controller off"}, {"prompt_tokens", prompt_tokens},
                              {"decode_tokens", decode}, {"reps", reps}, {"figures", figures}, {"goal_overhead_at_most", 0.05}};
  std::puts(out.dump(2).c_str());
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
