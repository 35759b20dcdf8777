// Tokenizer encode speed on a long real text (tokens/s), as JSON.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "bench/bench_info.h"
#include "engine/model/loader.h"

int main(int argc, char** argv) {
  std::string model_spec = "default";
  std::string text_file = "/usr/share/common-licenses/GPL-3";
  int reps = 10;
  CLI::App app{"bench_tokenizer_encode: byte-level BPE encode speed"};
  app.add_option("--model", model_spec)->capture_default_str();
  app.add_option("--text", text_file)->capture_default_str();
  app.add_option("--reps", reps)->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  auto model = specula::load_model(specula::resolve_model_path(model_spec));
  if (!model) {
    std::fprintf(stderr, "bench_tokenizer_encode: %s\n", model.error().message.c_str());
    return 1;
  }
  std::ifstream in(text_file);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  double best_s = 1e9;
  size_t tokens = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens = model->tokenizer.encode(text, false).size();
    best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const nlohmann::json out = {{"bench", "tokenizer_encode"}, {"date", specula::bench::utc_now()},
                              {"host", specula::bench::host_info()}, {"command", specula::bench::command_line(argc, argv)},
                              {"text_bytes", text.size()}, {"tokens", tokens}, {"best_seconds", best_s},
                              {"tokens_per_s", tokens / best_s}};
  std::puts(out.dump(2).c_str());
  return 0;
}
