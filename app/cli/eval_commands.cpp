#include "app/cli/eval_commands.h"

#include <cstdio>

#include "app/cli/commands.h"
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/eval/runner.h"
#include "engine/eval/tasks.h"

namespace specula::cli {
namespace {

std::string dump(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The development copy of LongBench's templates (shared/data beside the repository).
std::string default_longbench_templates() {
  return (std::filesystem::path(SPECULA_SOURCE_DIR) / ".." / "shared" / "data" / "longbench-dataset2prompt.json")
      .lexically_normal()
      .string();
}

// Checks that need no model.
Status check_eval_flags(const EvalArgs& args, eval::TaskKind task) {
  using eval::TaskKind;
  if ((task == TaskKind::kGsm8k || task == TaskKind::kSpecbench) && !args.data) {
    return make_error("eval --task " + args.task + " needs --data FILE (" +
                      (task == TaskKind::kGsm8k ? "GSM8K jsonl" : "Spec-Bench jsonl") + ")");
  }
  if (args.few_shot && task != TaskKind::kGsm8k) return make_error("eval: --few-shot is for --task gsm8k");
  if (task == TaskKind::kPasskey && args.data) return make_error("eval --task passkey builds its own data; drop --data");
  if (args.data) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*args.data, ec)) return make_error(*args.data + ": no such data file");
  }
  if (!args.sweep.empty() && (args.spec.sparse_config || args.spec.sparse != "strict")) {
    return make_error("eval: --sweep names the configurations; drop --sparse and --sparse-config");
  }
  return check_speculation_flags(args.spec, 0.0f);
}

Expected<std::vector<eval::EvalItem>> build_items(const EvalArgs& args, eval::TaskKind task, const Model& model,
                                                  nlohmann::json& notes) {
  using eval::TaskKind;
  const int limit = args.limit ? *args.limit + args.first : 0;  // 0: all
  const eval::TokenCounter count = [&model](std::string_view text) {
    return static_cast<int64_t>(model.tokenizer.encode(text, /*parse_special=*/false).size());
  };
  Expected<std::vector<eval::EvalItem>> items = std::vector<eval::EvalItem>{};
  switch (task) {
    case TaskKind::kGsm8k:
      items = eval::load_gsm8k(*args.data, limit);
      if (items && args.few_shot) {
        if (auto ok = eval::pad_gsm8k_few_shot(*items, *args.data, args.context, count); !ok) return ok.error();
        notes["few_shot_context"] = args.context;
      }
      break;
    case TaskKind::kSpecbench: items = eval::load_specbench(*args.data, limit); break;
    case TaskKind::kPasskey: {
      eval::PasskeyOptions o;
      o.items = args.limit.value_or(20) + args.first;
      o.context_tokens = args.context;
      o.seed = args.seed;
      items = eval::make_passkey_items(o, count);
      notes["seed"] = args.seed;
      break;
    }
    case TaskKind::kLcc: {
      const std::string templates = args.data.value_or(default_longbench_templates());
      auto tmpl = eval::load_longbench_template(templates, "lcc");
      if (!tmpl) {
        return make_error(tmpl.error().message + (args.data ? "" : " (pass --data longbench-dataset2prompt.json)"));
      }
      std::vector<std::string> paths;
      for (const char* p : eval::lcc_source_files()) paths.emplace_back(p);
      eval::LccOptions o;
      o.context_tokens = args.context;
      o.items = limit;
      auto built = eval::make_lcc_items(paths, *tmpl, o, count);
      notes["templates"] = templates;
      notes["skipped_sources"] = built.skipped;
      if (built.items.empty()) return make_error("lcc: none of the source files gave an item (first: " +
                                                 (built.skipped.empty() ? std::string("none listed") : built.skipped[0]) + ")");
      items = std::move(built.items);
      break;
    }
  }
  if (!items) return items;
  if (args.first > 0) {
    if (args.first >= static_cast<int>(items->size())) {
      return make_error("eval --first " + std::to_string(args.first) + ": the task has only " +
                        std::to_string(items->size()) + " items");
    }
    items->erase(items->begin(), items->begin() + args.first);
  }
  if (args.max_tokens) {
    for (auto& item : *items) item.max_tokens = *args.max_tokens;
  }
  return items;
}

void print_table(const nlohmann::json& r) {
  auto num = [](const nlohmann::json& v, const char* fmt) {
    if (v.is_null()) return std::string("-");
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, v.get<double>());
    return std::string(buf);
  };
  std::printf("eval %s: %d items, mean prompt %lld tokens, drafter %s, tree %s, verification %s vs strict\n",
              r["task"].get<std::string>().c_str(), r["items"].get<int>(),
              static_cast<long long>(r["mean_prompt_tokens"].get<int64_t>()), r["drafter"].get<std::string>().c_str(),
              r["tree"].get<std::string>().c_str(), r["sparse"]["preset"].get<std::string>().c_str());
  std::printf("%-22s %12s %12s\n", "", "strict", "configured");
  std::printf("%-22s %12s %12s  (%s)\n", "score", num(r["score"]["strict"], "%.2f").c_str(),
              num(r["score"]["configured"], "%.2f").c_str(),
              r["metric"].is_null() ? "no task metric" : r["metric"].get<std::string>().c_str());
  std::printf("%-22s %12s %12s\n", "mean accepted length", num(r["mean_accepted_length"]["strict"], "%.3f").c_str(),
              num(r["mean_accepted_length"]["configured"], "%.3f").c_str());
  std::printf("%-22s %12.3g %12.3g\n", "KV bytes read", r["kv_bytes_read"]["strict"].get<double>(),
              r["kv_bytes_read"]["configured"].get<double>());
  std::printf("agreement with strict: %.2f%% of tokens, ROUGE-L %.4f, %d of %d outputs identical\n",
              100 * r["agreement"]["token_agreement"].get<double>(), r["agreement"]["rouge_l"].get<double>(),
              r["agreement"]["identical_outputs"].get<int>(), r["items"].get<int>());
}

}  // namespace

EvalCommand::EvalCommand(CLI::App& app, SpeculationFlagAdder add_speculation_flags)
    : args_(std::make_unique<EvalArgs>()) {
  EvalArgs& a = *args_;
  a.spec.drafter = "ngram";  // accepted length needs a drafter
  command_ = app.add_subcommand(
      "eval", "Task score, agreement with strict verification, mean accepted length and KV bytes read");
  command_->add_option("--task", a.task, "gsm8k | specbench | lcc | passkey")->required();
  command_->add_option("--model,-m", a.model, "Target model (GGUF, HF directory or 'default')")->capture_default_str();
  command_->add_option("--data", a.data,
                       "gsm8k/specbench: the jsonl set; lcc: LongBench's dataset2prompt.json (default: "
                       "../shared/data/longbench-dataset2prompt.json)");
  command_->add_option("--limit", a.limit, "Items to run (default: all; passkey: 20)")->check(CLI::Range(1, 1 << 20));
  command_->add_option("--context", a.context, "lcc and passkey: prompt size in tokens")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 20))
      ->capture_default_str();
  command_->add_option("--seed", a.seed, "passkey: seed of the keys and depths")->capture_default_str();
  command_->add_option("--max-tokens,-n", a.max_tokens, "Tokens to generate per item (default: the task's)")
      ->check(CLI::Range(1, 1 << 20));
  command_->add_option("--threads", a.threads, "CPU threads (0 = all cores)")->check(CLI::Range(0, 1024))->capture_default_str();
  command_->add_option("--kv-block-size", a.kv_block_size, "Tokens per KV-cache block (8..128)")
      ->check(CLI::Range(8, 128))
      ->capture_default_str();
  command_->add_flag("--json", a.json, "Print the JSON report instead of the table");
  command_->add_flag("--per-item", a.per_item, "Include every item's outputs and scores in the JSON report");
  command_->add_option("--out", a.out, "Also write the JSON report (with per-item rows) to this file");
  command_->add_flag("--few-shot", a.few_shot,
                     "gsm8k: fill each prompt up to --context tokens with solved examples from --data");
  command_->add_option("--first", a.first, "Skip this many items first (to split a task across processes)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  command_->add_option("--sweep", a.sweep,
                       "Sparse config files (JSON, as --sparse-config): each item runs strict once and once per "
                       "file; the report is {\"sweep\": [one report per file]}")
      ->check(CLI::ExistingFile);
  add_speculation_flags(command_, a.spec);
}

int EvalCommand::run() const { return run_eval(*args_); }

int run_eval(const EvalArgs& args) {
  auto task = eval::parse_task(args.task);
  if (!task) return fail("--task: " + task.error().message);
  if (auto ok = check_eval_flags(args, *task); !ok) return fail(ok.error().message);
  auto model = load(args.model);
  if (!model) return fail(model.error().message);
  nlohmann::json notes = nlohmann::json::object();
  auto items = build_items(args, *task, *model, notes);
  if (!items) return fail(items.error().message);
  auto drafter = make_drafter(args.spec, *model, args.threads, args.kv_block_size);
  if (!drafter) return fail(drafter.error().message);

  const auto base = speculative_options(args.spec, 64, SamplingParams{}, args.kv_block_size);
  // The configurations under test: --sparse / --sparse-config, or every --sweep file.
  std::vector<SparseConfig> sparse;
  std::vector<std::string> names;
  if (args.sweep.empty()) {
    auto one = sparse_config(args.spec, *model);
    if (!one) return fail(one.error().message);
    sparse.push_back(std::move(*one));
  } else {
    for (const auto& file : args.sweep) {
      SpeculationArgs spec = args.spec;
      spec.sparse_config = file;
      auto one = sparse_config(spec, *model);
      if (!one) return fail(one.error().message);  // it names the file
      sparse.push_back(std::move(*one));
      names.push_back(std::filesystem::path(file).stem().string());
    }
  }
  std::vector<SpeculativeOptions> configured(sparse.size(), base);
  for (size_t i = 0; i < sparse.size(); ++i) configured[i].sparse = sparse[i];  // strict keeps base's strict config
  SpeculativeEngine engine(*model, args.threads);
  // Every run of an item starts from the same dense prefill; it is computed once per item.
  PrefillCache prefill_cache;
  engine.cpu_transformer()->set_prefill_cache(&prefill_cache);  // a CPU engine
  const auto runner = eval::make_engine_sweep_runner(engine, drafter->get(), base, configured);
  bool shown = false;
  const eval::EvalProgress progress = [&args, &shown](size_t done, size_t total, const eval::ItemResult& last) {
    if (args.json) return;
    std::fprintf(stderr, "\r%zu/%zu %s", done, total, last.id.c_str());
    std::fflush(stderr);
    shown = true;
  };
  auto reports = eval::run_eval_sweep(*task, *items, static_cast<int>(configured.size()), runner, progress);
  // The progress line ends with the run; an error line replaces it (one line on stderr).
  if (shown) std::fputc(reports ? '\n' : '\r', stderr);
  if (!reports) return fail(reports.error().message);

  auto header = [&](size_t i, bool per_item) {
    nlohmann::json j = {{"model", model->path.string()},
                        {"data", args.data ? nlohmann::json(*args.data) : nlohmann::json(nullptr)},
                        {"sparse", sparse[i].to_json()},
                        {"drafter", *drafter ? (*drafter)->name() : std::string("none")},
                        {"tree", base.tree.to_string()},
                        {"accept", "greedy"},
                        {"controller", false},  // make_engine_runner speculates every round
                        {"context", args.context},
                        {"kv_block_size", args.kv_block_size},
                        {"threads", engine.cpu_transformer()->threads()},
                        {"first_item", args.first}};
    if (!names.empty()) {
      j["name"] = names[i];
      j["sparse_config_file"] = args.sweep[i];
    }
    j.update(notes);
    j.update(eval::to_json((*reports)[i], per_item));
    return j;
  };
  // One report, or {"sweep": [report, ...]} in --sweep's order.
  auto document = [&](bool per_item) {
    if (names.empty()) return header(0, per_item);
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < sparse.size(); ++i) all.push_back(header(i, per_item));
    return nlohmann::json{{"sweep", all}};
  };
  if (args.out) {
    std::ofstream out(*args.out, std::ios::binary);
    if (!out) return fail(*args.out + ": cannot write the JSON report");
    out << dump(document(true), 2) << "\n";
  }
  if (args.json) {
    std::puts(dump(document(args.per_item)).c_str());
  } else {
    for (size_t i = 0; i < sparse.size(); ++i) {
      if (!names.empty()) std::printf("%s== %s\n", i ? "\n" : "", names[i].c_str());
      print_table(header(i, false));
    }
  }
  return 0;
}

}  // namespace specula::cli
