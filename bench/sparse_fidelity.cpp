// How closely sparse verification follows dense verification, measured teacher-forced: for each
// text, the first (context - span) tokens are prefilled densely; then the next `span` tokens go
// through verify-sized forwards of `chunk` tokens (the pending token plus chunk - 1 "draft" tokens
// that are the text's own continuation), once densely and once per sparse configuration, at the
// same committed context. Every row's next-token distribution is compared with the dense one:
// the greedy token flips (argmax differs), relative L2 of the logits, and KL(dense || sparse).
// A greedy run diverges from strict at its first flip, so the flip rate per verified row is what
// bounds position-wise token agreement; it is measured here on many positions of held-out texts
// instead of a handful of generated answers.
//
//   bench_sparse_fidelity --configs CONFIGS.json --text FILE [--text FILE ...] --context 4096
// CONFIGS.json: {"name": {sparse config as for --sparse-config, plus optional "kv_block_size"}}.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>

#include "bench/bench_info.h"
#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"
#include "engine/sparse/sparse_config.h"

namespace {

struct Tally {
  int64_t rows = 0, flips = 0;
  double rel_l2 = 0, kl = 0;
  specula::SparseStats stats;
};

struct Variant {
  std::string name;
  specula::SparseConfig config;
  int block_size = 16;
  Tally total;
  std::map<std::string, Tally> per_text;
};

void fail(const std::string& message) {
  std::fprintf(stderr, "bench_sparse_fidelity: %s\n", message.c_str());
  std::exit(1);
}

// Softmax of one logit row, in double.
std::vector<double> softmax(const float* logits, int64_t n) {
  std::vector<double> p(static_cast<size_t>(n));
  const float top = *std::max_element(logits, logits + n);
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += p[static_cast<size_t>(i)] = std::exp(static_cast<double>(logits[i] - top));
  for (double& v : p) v /= z;
  return p;
}

void compare(const float* dense, const float* sparse, int64_t V, Tally& t) {
  const auto argmax = [V](const float* r) { return std::max_element(r, r + V) - r; };
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < V; ++i) {
    diff += (double(sparse[i]) - dense[i]) * (double(sparse[i]) - dense[i]);
    norm += double(dense[i]) * dense[i];
  }
  const auto p = softmax(dense, V), q = softmax(sparse, V);
  double kl = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (p[static_cast<size_t>(i)] > 0) kl += p[static_cast<size_t>(i)] * std::log(p[static_cast<size_t>(i)] / std::max(q[static_cast<size_t>(i)], 1e-300));
  }
  t.rows += 1;
  t.flips += argmax(dense) != argmax(sparse) ? 1 : 0;
  t.rel_l2 += std::sqrt(diff / std::max(norm, 1e-30));
  t.kl += kl;
}

nlohmann::json to_json(const Tally& t) {
  const double n = static_cast<double>(std::max<int64_t>(t.rows, 1));
  return {{"rows", t.rows},
          {"flips", t.flips},
          {"flip_rate", static_cast<double>(t.flips) / n},
          {"mean_rel_l2", t.rel_l2 / n},
          {"mean_kl", t.kl / n},
          {"kv_read_fraction", t.stats.kv_bytes_dense > 0 ? static_cast<double>(t.stats.kv_bytes_read) /
                                                                static_cast<double>(t.stats.kv_bytes_dense)
                                                          : 1.0}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_spec = "default", configs_path, commit = "unknown", out_path;
  std::vector<std::string> texts;
  int context = 4096, span = 256, chunk = 5, threads = 0;
  CLI::App app{"bench_sparse_fidelity: teacher-forced flips and logit error of sparse verification vs dense"};
  app.add_option("--model", model_spec)->capture_default_str();
  app.add_option("--configs", configs_path, "JSON object: name -> sparse config (+ kv_block_size)")->required();
  app.add_option("--text", texts, "Text files (each must give at least --context tokens)")->required();
  app.add_option("--context", context, "Committed tokens at the last measured forward")->check(CLI::Range(64, 1 << 20))->capture_default_str();
  app.add_option("--span", span, "Tokens measured before --context")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--chunk", chunk, "Tokens per verify forward (pending + drafts)")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--threads", threads, "0 = all cores")->capture_default_str();
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  CLI11_PARSE(app, argc, argv);
  if (span >= context) fail("--span must be below --context");

  auto model = specula::load_model(specula::resolve_model_path(model_spec));
  if (!model) fail(model.error().message);
  std::ifstream cin_(configs_path);
  if (!cin_) fail(configs_path + ": cannot open");
  const auto cj = nlohmann::json::parse(cin_, nullptr, false);
  if (cj.is_discarded() || !cj.is_object() || cj.empty()) fail(configs_path + ": expected a non-empty JSON object");
  std::vector<Variant> variants;
  for (const auto& [name, value] : cj.items()) {
    if (!value.is_object()) fail(configs_path + ": '" + name + "' is not an object");
    auto j = value;
    Variant v;
    v.name = name;
    if (j.contains("kv_block_size")) {
      v.block_size = j["kv_block_size"].get<int>();
      j.erase("kv_block_size");
    }
    auto c = specula::sparse_config_from_json(j);
    if (!c) fail(name + ": " + c.error().message);
    if (auto ok = specula::validate(*c, static_cast<int>(model->config.n_layers), false); !ok) fail(name + ": " + ok.error().message);
    v.config = *c;
    variants.push_back(std::move(v));
  }
  std::vector<int> block_sizes;
  for (const auto& v : variants) block_sizes.push_back(v.block_size);
  std::sort(block_sizes.begin(), block_sizes.end());
  block_sizes.erase(std::unique(block_sizes.begin(), block_sizes.end()), block_sizes.end());

  specula::CpuTransformer tf(*model, {threads, specula::Precision::Default});
  const int64_t V = tf.config().vocab_size;
  const auto mask = specula::AttentionMask::causal(chunk);
  const int start = context - span;
  for (const auto& path : texts) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path + ": cannot open");
    const auto ids = model->tokenizer.encode(std::string((std::istreambuf_iterator<char>(in)), {}), false);
    if (static_cast<int>(ids.size()) < context + chunk) {
      fail(path + " gives " + std::to_string(ids.size()) + " tokens, need " + std::to_string(context + chunk));
    }
    for (int B : block_sizes) {
      auto kv = tf.make_kv_cache(B, context + chunk + 1);
      if (!kv) fail(kv.error().message);
      std::vector<int32_t> pos(static_cast<size_t>(start));
      std::iota(pos.begin(), pos.end(), 0);
      std::vector<float> last(static_cast<size_t>(V));
      if (auto s = tf.forward(std::span(ids).first(static_cast<size_t>(start)), pos, nullptr, *kv, last, specula::LogitRows::Last); !s) {
        fail(s.error().message);
      }
      kv->commit_all();
      std::vector<float> dense(static_cast<size_t>(chunk * V));
      std::vector<std::vector<float>> sparse(variants.size(), std::vector<float>(dense.size()));
      std::vector<int32_t> cpos(static_cast<size_t>(chunk));
      for (int p = start; p + chunk <= context; p += chunk) {
        const auto toks = std::span(ids).subspan(static_cast<size_t>(p), static_cast<size_t>(chunk));
        std::iota(cpos.begin(), cpos.end(), p);
        for (size_t i = 0; i < variants.size(); ++i) {
          Variant& v = variants[i];
          if (v.block_size != B) continue;
          specula::ForwardContext ctx;
          ctx.sparse = &v.config;
          ctx.stats = &v.per_text[path].stats;
          ctx.round = p;
          if (auto s = tf.forward(toks, cpos, &mask, *kv, sparse[i], specula::LogitRows::All, &ctx); !s) fail(s.error().message);
          kv->rollback();
        }
        // The dense forward goes last: its rows are committed, so the text moves on densely.
        if (auto s = tf.forward(toks, cpos, &mask, *kv, dense, specula::LogitRows::All); !s) fail(s.error().message);
        kv->commit_all();
        for (size_t i = 0; i < variants.size(); ++i) {
          if (variants[i].block_size != B) continue;
          for (int r = 0; r < chunk; ++r) compare(dense.data() + r * V, sparse[i].data() + r * V, V, variants[i].per_text[path]);
        }
      }
      std::fprintf(stderr, "%s B=%d done\n", path.c_str(), B);
    }
  }
  nlohmann::json results = nlohmann::json::object();
  for (auto& v : variants) {
    nlohmann::json per_text = nlohmann::json::object();
    for (const auto& [path, t] : v.per_text) {
      per_text[path] = to_json(t);
      v.total.rows += t.rows;
      v.total.flips += t.flips;
      v.total.rel_l2 += t.rel_l2;
      v.total.kl += t.kl;
      v.total.stats.add(t.stats);
    }
    auto cfg = v.config.to_json();
    cfg["kv_block_size"] = v.block_size;
    results[v.name] = {{"config", cfg}, {"total", to_json(v.total)}, {"per_text", per_text}};
    const auto tj = to_json(v.total);
    std::fprintf(stderr, "%-28s flips %5.2f%%  rel L2 %.4f  KL %.5f  KV %.3f\n", v.name.c_str(),
                 100 * tj["flip_rate"].get<double>(), tj["mean_rel_l2"].get<double>(), tj["mean_kl"].get<double>(),
                 tj["kv_read_fraction"].get<double>());
  }
  const nlohmann::json out = {{"bench", "sparse_fidelity"}, {"date", specula::bench::utc_now()},
                              {"host", specula::bench::host_info()}, {"command", specula::bench::command_line(argc, argv)},
                              {"commit", commit}, {"model", model->path.string()}, {"context", context},
                              {"span", span}, {"chunk", chunk}, {"texts", texts}, {"variants", results}};
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  std::puts(out.dump(2).c_str());
  return 0;
}
