// Where the time of one more verify row goes on the CPU, kernel by kernel, without a model:
// random U4 weights tiled as the int8 path tiles them, shaped like a whole SmolLM2-135M forward
// (30 layers of qkv 960×576, wo 576×576, gate_up 3072×576, down 576×1536, then the 49152×576
// lm_head) and masked attention of n new rows over `--context` committed keys, as the engine's
// tree attention calls it (one call per KV head and layer with the head's 3 query heads × n rows;
// `attention_per_head_ms`: one call per query head with n rows, as before 2026-11-24's cpuattn).
// One thread, best of --reps. Prints JSON: ms per forward-equivalent for each kernel at each n.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench/bench_info.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"

namespace {

using namespace specula;

PackedMatrix random_u4(int64_t rows, int64_t cols, std::mt19937& rng) {
  PackedMatrix m;
  init_packed_matrix(m, WeightFormat::U4, rows, cols);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  for (auto& q : std::span(m.qs.data(), m.qs.size())) q = static_cast<uint8_t>(byte(rng));
  for (size_t i = 0; i < m.scales.size(); ++i) {
    m.scales.data()[i] = f32_to_f16_bits(i % 4 < 2 ? scale(rng) : -8.0f * scale(rng));
  }
  tile_rows(m);
  return m;
}

template <class Fn>
double best_ms(int reps, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int max_n = 16, reps = 5, context = 512, layers = 30;
  CLI::App app{"bench_cpu_row_cost: per-kernel ms of an n-row forward (random weights, one thread)"};
  app.add_option("--max-n", max_n)->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--reps", reps)->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--context", context)->check(CLI::Range(16, 8192))->capture_default_str();
  app.add_option("--layers", layers)->check(CLI::Range(1, 64))->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  constexpr int64_t kDim = 576, kFfn = 1536, kHeads = 9, kKvHeads = 3, kHd = 64, kVocab = 49152, kBlock = 16;
  std::mt19937 rng(7);
  PackedMatrix qkv = random_u4(kHeads * kHd + 2 * kKvHeads * kHd, kDim, rng), wo = random_u4(kDim, kHeads * kHd, rng);
  PackedMatrix gate_up = random_u4(2 * kFfn, kDim, rng), down = random_u4(kDim, kFfn, rng);
  PackedMatrix head = random_u4(kVocab, kDim, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(max_n * kFfn)), y(static_cast<size_t>(max_n * kVocab));
  for (float& v : x) v = normal(rng);
  const int64_t keys = context + max_n;
  std::vector<float> k(static_cast<size_t>(keys * kHd)), v(static_cast<size_t>(keys * kHd));
  for (float& e : k) e = normal(rng);
  for (float& e : v) e = normal(rng);
  constexpr int64_t kGroup = kHeads / kKvHeads;
  std::vector<float> q(static_cast<size_t>(kGroup * max_n * kHd)), out(static_cast<size_t>(kGroup * max_n * kHd));
  for (float& e : q) e = normal(rng);
  std::vector<float> scores(static_cast<size_t>(kGroup * max_n * keys));
  std::vector<uint8_t> mask(static_cast<size_t>(max_n * max_n));
  QuantizedRows xq;

  nlohmann::json rows = nlohmann::json::array();
  for (int n = 1; n <= max_n; ++n) {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) mask[static_cast<size_t>(i * n + j)] = j <= i;
    const auto matmul = [&](const PackedMatrix& w) {
      xq.resize(n, w.cols);
      quantize_rows(x.data(), w.cols, xq, 0, n);
      matmul_quantized(w, xq, y.data(), w.rows, 0, w.rows, false);
    };
    const double layer_ms = best_ms(reps, [&] {
      for (int l = 0; l < layers; ++l) {
        matmul(qkv);
        matmul(wo);
        matmul(gate_up);
        matmul(down);
      }
    });
    const double head_ms = best_ms(reps, [&] { matmul(head); });
    // One task of tree attention: a KV head's 3 query heads × n rows (token-major) over the
    // committed blocks and the new rows, each token with its own mask row.
    std::vector<KvSpan> spans;
    for (int64_t b = 0; b * kBlock < context; ++b) {
      spans.push_back(
          {k.data() + b * kBlock * kHd, v.data() + b * kBlock * kHd, std::min(kBlock, context - b * kBlock)});
    }
    spans.push_back({k.data() + context * kHd, v.data() + context * kHd, n, mask.data(), n, kGroup});
    const double attention_ms = best_ms(reps, [&] {
      for (int l = 0; l < layers * kKvHeads; ++l) {
        attention_group(q.data(), kGroup * n, kHd, spans, 0.125f, scores.data(), out.data());
      }
    });
    spans.back().queries_per_mask = 1;
    const double per_head_ms = best_ms(reps, [&] {
      for (int l = 0; l < layers * kHeads; ++l) {
        attention_group(q.data(), n, kHd, spans, 0.125f, scores.data(), out.data());
      }
    });
    const double softmax_ms = best_ms(reps, [&] {
      for (int l = 0; l < layers * kHeads * n; ++l) softmax(scores.data(), context + n);
    });
    rows.push_back({{"n", n},
                    {"layers_matmul_ms", layer_ms},
                    {"lm_head_ms", head_ms},
                    {"attention_ms", attention_ms},
                    {"attention_per_head_ms", per_head_ms},
                    {"softmax_ms_in_attention", softmax_ms}});
    std::fprintf(stderr, "n=%2d layers %.3f  lm_head %.3f  attention %.3f (per head %.3f, softmax %.3f) ms\n", n,
                 layer_ms, head_ms, attention_ms, per_head_ms, softmax_ms);
  }
  const nlohmann::json report = {{"bench", "cpu_row_cost"},
                                 {"date", bench::utc_now()},
                                 {"host", bench::host_info()},
                                 {"command", bench::command_line(argc, argv)},
                                 {"context", context},
                                 {"layers", layers},
                                 {"rows", rows}};
  std::puts(report.dump(1).c_str());
  return 0;
}
