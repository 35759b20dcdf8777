// Draft quality without timing noise. Greedy speculative decoding emits exactly the plain greedy
// tokens, so once the plain output of each Spec-Bench item is known, every round of every drafter
// can be replayed without the target: the drafter sees the committed sequence, proposes its tree,
// and the round accepts the deepest tree path that spells the next plain tokens. That gives the
// accepted length per round and the tree size per round exactly; a verify cost curve (ms of an
// n-token verify over a 1-token step, from bench_verify_cost) plus the measured draft time (over
// the plain ms per token) turns them into a modeled speedup, "always speculate" (no controller).
//   bench_draft_replay --data specbench-dev.jsonl --limit 3 --max-tokens 128
//       --config ngram/n=3/min=1/tree=chain:4 --config layerskip/layers=every-other/tree=chain:3
//       [--cost verify_cost.json --cost-curve int8_activations/all_logits | --slope 0.15]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/bench_info.h"
#include "engine/spec/speculative.h"

namespace {

using namespace specula;

struct Item {
  std::string category;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;  // plain greedy tokens
};

struct DrafterConfig {
  std::string text;
  std::string kind;  // ngram | layerskip
  NgramOptions ngram;
  std::string layers = "every-other";
  TreeShape tree;
};

Expected<DrafterConfig> parse_config(const std::string& text) {
  DrafterConfig c;
  c.text = text;
  std::string tree = "chain:4";
  size_t begin = 0;
  for (bool first = true; begin <= text.size(); first = false) {
    const size_t comma = std::min(text.find('/', begin), text.size());
    const std::string part = text.substr(begin, comma - begin);
    begin = comma + 1;
    if (first) {
      c.kind = part;
      continue;
    }
    const auto eq = part.find('=');
    if (eq == std::string::npos) return make_error("--config " + text + ": \"" + part + "\" is not key=value");
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "tree") {
      tree = value;
    } else if (key == "layers") {
      c.layers = value;
    } else if (key == "conf") {
      c.ngram.min_confidence = std::atof(value.c_str());
    } else if (key == "history") {
      c.ngram.history_tokens = std::atoi(value.c_str());
    } else if (key == "n" || key == "min" || key == "len") {
      const int v = std::atoi(value.c_str());
      (key == "n" ? c.ngram.n_max : key == "min" ? c.ngram.n_min : c.ngram.max_length) = v;
    } else {
      return make_error("--config " + text + ": unknown key " + key);
    }
  }
  if (c.kind != "ngram" && c.kind != "layerskip") return make_error("--config " + text + ": drafter ngram or layerskip");
  auto shape = parse_tree_shape(tree);
  if (!shape) return shape.error();
  c.tree = *shape;
  return c;
}

std::string category_of(const std::string& c) {
  for (const char* mt : {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}) {
    if (c == mt) return "mt_bench";
  }
  return c;
}

// Depth of the deepest tree node whose path spells want[0..depth).
int accepted_depth(const DraftTree& tree, std::span<const int32_t> want) {
  int best = 0;
  std::vector<int> matched(static_cast<size_t>(tree.size()), 0);  // depth if the path matches, else 0
  for (DraftNodeId id = 0; id < tree.size(); ++id) {
    const DraftNode& n = tree.node(id);
    const bool parent_ok = n.parent == kDraftRoot || matched[static_cast<size_t>(n.parent)] > 0;
    if (parent_ok && n.depth <= static_cast<int>(want.size()) && want[static_cast<size_t>(n.depth - 1)] == n.token) {
      matched[static_cast<size_t>(id)] = n.depth;
      best = std::max(best, n.depth);
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_spec = "default", data, precision = "int8", cost_file, cost_curve = "int8_activations/all_logits", out_path;
  int limit = 3, skip = 0, max_tokens = 128, threads = 0;
  double slope = 0.15;
  std::vector<std::string> config_texts;
  CLI::App app{"bench_draft_replay: accepted length and modeled speedup per drafter from replayed greedy rounds"};
  app.add_option("--model", model_spec)->capture_default_str();
  app.add_option("--data", data, "Spec-Bench jsonl")->required();
  app.add_option("--limit", limit, "Items per category")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--skip", skip, "Items per category to skip first (held-out sets)")->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("--max-tokens", max_tokens)->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--precision", precision, "Target precision of the plain run")->check(CLI::IsMember({"f32", "int8"}))->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--config", config_texts, "ngram/n=3/min=1/len=0/conf=0.2/tree=chain:12 | layerskip/layers=every-other/tree=chain:3")->required();
  app.add_option("--cost", cost_file, "bench_verify_cost JSON: cost of n tokens over 1");
  app.add_option("--cost-curve", cost_curve, "Curve of --cost to use")->capture_default_str();
  app.add_option("--slope", slope, "Without --cost: cost(n) = 1 + slope·(n-1)")->capture_default_str();
  app.add_option("--out", out_path);
  std::string save_outputs, load_outputs;
  app.add_option("--save-outputs", save_outputs, "Write the plain greedy runs (prompt and output ids) to this JSON");
  app.add_option("--load-outputs", load_outputs, "Replay the runs of a --save-outputs file instead of generating");
  CLI11_PARSE(app, argc, argv);

  std::vector<DrafterConfig> configs;
  for (const auto& t : config_texts) {
    auto c = parse_config(t);
    if (!c) {
      std::fprintf(stderr, "bench_draft_replay: %s\n", c.error().message.c_str());
      return 1;
    }
    configs.push_back(*c);
  }
  std::vector<double> cost_curve_values;  // [n - 1]
  if (!cost_file.empty()) {
    std::ifstream in(cost_file);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("curves") || !j["curves"].contains(cost_curve)) {
      std::fprintf(stderr, "bench_draft_replay: %s has no curve %s\n", cost_file.c_str(), cost_curve.c_str());
      return 1;
    }
    for (const auto& point : j["curves"][cost_curve]) cost_curve_values.push_back(point["ratio_to_n1"].get<double>());
  }
  const auto cost = [&](int n) {
    if (n >= 1 && n <= static_cast<int>(cost_curve_values.size())) return cost_curve_values[static_cast<size_t>(n - 1)];
    return 1.0 + slope * (n - 1);
  };

  auto model = load_model(resolve_model_path(model_spec));
  if (!model) {
    std::fprintf(stderr, "bench_draft_replay: %s\n", model.error().message.c_str());
    return 1;
  }
  std::ifstream in(load_outputs.empty() ? data : load_outputs);
  if (!in) {
    std::fprintf(stderr, "bench_draft_replay: cannot open %s\n", load_outputs.empty() ? data.c_str() : load_outputs.c_str());
    return 1;
  }
  std::vector<Item> items;
  double plain_ms_per_token = 0;  // converts draft time into verify-cost units
  if (!load_outputs.empty()) {
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("items")) {
      std::fprintf(stderr, "bench_draft_replay: %s is no --save-outputs file\n", load_outputs.c_str());
      return 1;
    }
    for (const auto& it : j["items"]) {
      items.push_back({it["category"], it["prompt"].get<std::vector<int32_t>>(), it["output"].get<std::vector<int32_t>>()});
    }
    plain_ms_per_token = j["plain_ms_per_token"].get<double>();
  }
  SpeculativeEngine engine(*model, threads, precision == "int8" ? Precision::Int8Activations : Precision::Default);
  std::map<std::string, int> taken;
  double plain_seconds = 0;
  int64_t plain_tokens = 0;
  for (std::string line; load_outputs.empty() && std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("category") || !j.contains("turns")) continue;
    Item item{category_of(j["category"].get<std::string>()), {}, {}};
    const int index = taken[item.category]++;
    if (index < skip || index >= skip + limit) continue;
    const ChatMessage user{"user", j["turns"][0].get<std::string>()};
    item.prompt = model->tokenizer.encode(model->tokenizer.apply_chat_template(std::span(&user, 1), true), true);
    SpeculativeOptions plain;
    plain.max_tokens = max_tokens;
    auto r = engine.generate(item.prompt, nullptr, plain, nullptr);
    if (!r) {
      std::fprintf(stderr, "bench_draft_replay: %s\n", r.error().message.c_str());
      return 1;
    }
    item.output = r->tokens;
    plain_seconds += r->timings.decode_seconds;
    plain_tokens += r->timings.decode_tokens;
    items.push_back(std::move(item));
  }
  if (load_outputs.empty()) plain_ms_per_token = plain_tokens > 0 ? plain_seconds * 1e3 / static_cast<double>(plain_tokens) : 0;
  if (!save_outputs.empty()) {
    nlohmann::json saved = {{"plain_ms_per_token", plain_ms_per_token}, {"items", nlohmann::json::array()}};
    for (const Item& item : items) {
      saved["items"].push_back({{"category", item.category}, {"prompt", item.prompt}, {"output", item.output}});
    }
    std::ofstream(save_outputs) << saved.dump() << "\n";
  }

  nlohmann::json results = nlohmann::json::array();
  for (const DrafterConfig& config : configs) {
    std::unique_ptr<Drafter> drafter;
    if (config.kind == "ngram") {
      drafter = make_ngram_drafter(config.ngram);
    } else {
      auto d = make_layerskip_drafter(*model, config.layers, {threads});
      if (!d) {
        std::fprintf(stderr, "bench_draft_replay: %s\n", d.error().message.c_str());
        return 1;
      }
      drafter = std::move(*d);
    }
    struct Totals {
      int64_t tokens = 0, rounds = 0, nodes = 0, accepted = 0;
      double cost = 0, draft_ms = 0;
    };
    std::map<std::string, Totals> by_category;
    DraftRequest request;
    request.shape = config.tree;
    request.filters = SamplingParams{1.0f, 0, 1.0f, 0};
    for (const Item& item : items) {
      drafter->reset();
      std::vector<int32_t> sequence = item.prompt;
      sequence.push_back(item.output[0]);
      Totals& t = by_category[item.category];
      size_t p = 0;  // output[p] is the pending token, the last of `sequence`
      while (p + 1 < item.output.size()) {
        const auto t0 = std::chrono::steady_clock::now();
        auto tree = drafter->draft(sequence, request);
        const double draft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        t.draft_ms += draft_ms;
        if (!tree) {
          std::fprintf(stderr, "bench_draft_replay: %s\n", tree.error().message.c_str());
          return 1;
        }
        const int a = accepted_depth(*tree, std::span(item.output).subspan(p + 1));
        const size_t step = std::min<size_t>(static_cast<size_t>(a) + 1, item.output.size() - 1 - p);
        ++t.rounds;
        t.nodes += tree->size();
        t.accepted += a;
        t.tokens += static_cast<int64_t>(step);
        t.cost += cost(tree->size() + 1);
        if (plain_ms_per_token > 0) t.cost += draft_ms / plain_ms_per_token;
        sequence.insert(sequence.end(), item.output.begin() + static_cast<std::ptrdiff_t>(p + 1),
                        item.output.begin() + static_cast<std::ptrdiff_t>(p + 1 + step));
        p += step;
      }
    }
    Totals all;
    nlohmann::json categories = nlohmann::json::object();
    const auto summary = [](const Totals& t) {
      return nlohmann::json{{"rounds", t.rounds},
                            {"mean_accepted_length", t.rounds ? 1.0 + static_cast<double>(t.accepted) / t.rounds : 1.0},
                            {"nodes_per_round", t.rounds ? static_cast<double>(t.nodes) / t.rounds : 0.0},
                            {"draft_ms_per_round", t.rounds ? t.draft_ms / t.rounds : 0.0},
                            {"modeled_speedup", t.cost > 0 ? static_cast<double>(t.tokens) / t.cost : 0.0}};
    };
    std::printf("%s\n", config.text.c_str());
    for (const auto& [name, t] : by_category) {
      categories[name] = summary(t);
      std::printf("  %-16s accepted %.2f  nodes %.1f  draft %.3f ms  modeled %.2fx\n", name.c_str(),
                  categories[name]["mean_accepted_length"].get<double>(), categories[name]["nodes_per_round"].get<double>(),
                  categories[name]["draft_ms_per_round"].get<double>(), categories[name]["modeled_speedup"].get<double>());
      all.tokens += t.tokens;
      all.rounds += t.rounds;
      all.nodes += t.nodes;
      all.accepted += t.accepted;
      all.cost += t.cost;
      all.draft_ms += t.draft_ms;
    }
    const auto overall = summary(all);
    std::printf("  %-16s accepted %.2f  nodes %.1f  draft %.3f ms  modeled %.2fx\n", "overall",
                overall["mean_accepted_length"].get<double>(), overall["nodes_per_round"].get<double>(),
                overall["draft_ms_per_round"].get<double>(), overall["modeled_speedup"].get<double>());
    results.push_back({{"config", config.text}, {"drafter", drafter->name()}, {"tree", config.tree.to_string()},
                       {"categories", categories}, {"overall", overall}});
  }
  const nlohmann::json out = {{"bench", "draft_replay"}, {"date", bench::utc_now()}, {"host", bench::host_info()},
                              {"command", bench::command_line(argc, argv)}, {"model", model->path.string()},
                              {"precision", precision}, {"max_tokens", max_tokens}, {"limit_per_category", limit}, {"skip_per_category", skip},
                              {"plain_ms_per_token", plain_ms_per_token},
                              {"cost", cost_file.empty() ? nlohmann::json{{"slope", slope}} : nlohmann::json{{"file", cost_file}, {"curve", cost_curve}}},
                              {"results", results}};
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
