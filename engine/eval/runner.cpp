#include "engine/eval/runner.h"

#include <chrono>
#include <cmath>
#include <utility>

namespace specula::eval {
namespace {

double accepted_length(const std::vector<const RunOutput*>& runs) {
  double sum = 0;
  int rounds = 0;
  for (const RunOutput* r : runs) {
    sum += r->metrics.mean_accepted_length * r->metrics.speculative_rounds;
    rounds += r->metrics.speculative_rounds;
  }
  return rounds > 0 ? sum / rounds : 1.0;
}

nlohmann::json optional_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

double ratio(double a, double b) { return b != 0 ? a / b : (a == 0 ? 1.0 : 0.0); }

}  // namespace

int64_t dense_kv_bytes_read(int64_t prompt_tokens, std::span<const RoundRecord> rounds, int64_t row_bytes) {
  int64_t committed = prompt_tokens;
  int64_t rows = 0;
  for (const RoundRecord& r : rounds) {
    const int64_t appended = r.speculative ? 1 + r.tree_nodes : 1;
    rows += committed + appended;
    committed += r.speculative ? 1 + r.accepted : 1;
  }
  return rows * row_bytes;
}

EvalSummary summarize(std::span<const ItemResult> items) {
  EvalSummary s;
  s.items = static_cast<int>(items.size());
  if (items.empty()) return s;
  int64_t matched = 0, compared = 0;
  double rouge = 0, strict_score = 0, configured_score = 0;
  bool scored = true;
  std::vector<const RunOutput*> strict, configured;
  for (const ItemResult& r : items) {
    matched += r.agreement.matched;
    compared += r.agreement.compared;
    rouge += r.rouge.f1;
    s.identical_outputs += r.strict.tokens == r.configured.tokens ? 1 : 0;
    scored = scored && r.strict_score && r.configured_score;
    if (scored) {
      strict_score += *r.strict_score;
      configured_score += *r.configured_score;
    }
    strict.push_back(&r.strict);
    configured.push_back(&r.configured);
    s.strict_kv_bytes_read += r.strict.kv_bytes_read;
    s.configured_kv_bytes_read += r.configured.kv_bytes_read;
    s.prompt_tokens += r.strict.prompt_tokens;
    s.strict_seconds += r.strict.seconds;
    s.configured_seconds += r.configured.seconds;
  }
  const auto n = static_cast<double>(items.size());
  s.token_agreement = compared > 0 ? static_cast<double>(matched) / static_cast<double>(compared) : 1.0;
  s.rouge_l = rouge / n;
  if (scored) {
    s.strict_score = 100.0 * strict_score / n;
    s.configured_score = 100.0 * configured_score / n;
  }
  s.strict_accepted_length = accepted_length(strict);
  s.configured_accepted_length = accepted_length(configured);
  s.prompt_tokens /= static_cast<int64_t>(items.size());
  return s;
}

EvalGoals check_goals(const EvalSummary& s) {
  EvalGoals g;
  g.agreement = s.token_agreement >= 0.95;
  if (s.strict_score && s.configured_score) g.score = std::fabs(*s.configured_score - *s.strict_score) <= 1.0;
  g.accepted_length = std::fabs(s.configured_accepted_length - s.strict_accepted_length) <= 0.02 * s.strict_accepted_length;
  return g;
}

Expected<std::vector<EvalReport>> run_eval_sweep(TaskKind task, std::span<const EvalItem> items, int n_configs,
                                                 const SweepRunner& runner, const EvalProgress& progress) {
  if (items.empty()) return make_error("eval: no items to run");
  if (n_configs < 1) return make_error("eval: no configuration to compare with strict");
  std::vector<EvalReport> reports(static_cast<size_t>(n_configs));
  for (auto& report : reports) report.task = task;
  for (size_t i = 0; i < items.size(); ++i) {
    const EvalItem& item = items[i];
    auto strict = runner(item, -1);
    if (!strict) return make_error(item.id + " (strict run): " + strict.error().message);
    const auto strict_score = score_output(task, item, strict->text);
    for (int c = 0; c < n_configs; ++c) {
      auto run = runner(item, c);
      if (!run) {
        return make_error(item.id + " (configured run" + (n_configs > 1 ? " " + std::to_string(c) : std::string()) +
                          "): " + run.error().message);
      }
      ItemResult r;
      r.id = item.id;
      r.strict = *strict;
      r.configured = std::move(*run);
      r.strict_score = strict_score;
      r.configured_score = score_output(task, item, r.configured.text);
      r.agreement = token_agreement(r.strict.tokens, r.configured.tokens);
      // rouge_score gives 0 when a side is empty; two identical (even empty) outputs agree fully.
      r.rouge = r.strict.text == r.configured.text ? RougeScore{1, 1, 1} : rouge_l(r.configured.text, r.strict.text);
      reports[static_cast<size_t>(c)].items.push_back(std::move(r));
    }
    if (progress) progress(i + 1, items.size(), reports.back().items.back());
  }
  for (auto& report : reports) {
    report.summary = summarize(report.items);
    report.goals = check_goals(report.summary);
  }
  return reports;
}

Expected<EvalReport> run_eval(TaskKind task, std::span<const EvalItem> items, const ItemRunner& runner,
                              const EvalProgress& progress) {
  const SweepRunner one = [&runner](const EvalItem& item, int config) {
    return runner(item, config < 0 ? Verification::kStrict : Verification::kConfigured);
  };
  auto reports = run_eval_sweep(task, items, 1, one, progress);
  if (!reports) return reports.error();
  return std::move(reports->front());
}

nlohmann::json to_json(const EvalReport& report, bool per_item) {
  const EvalSummary& s = report.summary;
  nlohmann::json j = {
      {"task", task_name(report.task)},
      {"metric", task_metric(report.task).empty() ? nlohmann::json(nullptr) : nlohmann::json(task_metric(report.task))},
      {"items", s.items},
      {"mean_prompt_tokens", s.prompt_tokens},
      {"score",
       {{"strict", optional_json(s.strict_score)},
        {"configured", optional_json(s.configured_score)},
        {"delta_points", s.strict_score && s.configured_score ? nlohmann::json(*s.configured_score - *s.strict_score)
                                                              : nlohmann::json(nullptr)}}},
      {"agreement",
       {{"token_agreement", s.token_agreement}, {"rouge_l", s.rouge_l}, {"identical_outputs", s.identical_outputs}}},
      {"mean_accepted_length",
       {{"strict", s.strict_accepted_length},
        {"configured", s.configured_accepted_length},
        {"ratio", ratio(s.configured_accepted_length, s.strict_accepted_length)}}},
      {"kv_bytes_read",
       {{"strict", s.strict_kv_bytes_read},
        {"configured", s.configured_kv_bytes_read},
        {"ratio", ratio(static_cast<double>(s.configured_kv_bytes_read), static_cast<double>(s.strict_kv_bytes_read))}}},
      {"seconds", {{"strict", s.strict_seconds}, {"configured", s.configured_seconds}}},
      {"goals",
       {{"token_agreement_ge_95pct", report.goals.agreement},
        {"score_within_1_point", report.goals.score ? nlohmann::json(*report.goals.score) : nlohmann::json(nullptr)},
        {"accepted_length_within_2pct", report.goals.accepted_length}}},
  };
  if (per_item) {
    nlohmann::json rows = nlohmann::json::array();
    for (const ItemResult& r : report.items) {
      rows.push_back({{"id", r.id},
                      {"prompt_tokens", r.strict.prompt_tokens},
                      {"strict_text", r.strict.text},
                      {"configured_text", r.configured.text},
                      {"strict_score", optional_json(r.strict_score)},
                      {"configured_score", optional_json(r.configured_score)},
                      {"token_agreement", r.agreement.rate()},
                      {"common_prefix", r.agreement.common_prefix},
                      {"rouge_l", r.rouge.f1},
                      {"strict_accepted_length", r.strict.metrics.mean_accepted_length},
                      {"configured_accepted_length", r.configured.metrics.mean_accepted_length},
                      {"strict_kv_bytes_read", r.strict.kv_bytes_read},
                      {"configured_kv_bytes_read", r.configured.kv_bytes_read}});
    }
    j["per_item"] = std::move(rows);
  }
  return j;
}

std::vector<int32_t> encode_item_prompt(const Tokenizer& tokenizer, const EvalItem& item) {
  return tokenizer.encode_prompt(item.prompt, item.chat);
}

namespace {

Expected<RunOutput> run_on_engine(SpeculativeEngine& engine, Drafter* drafter, const EvalItem& item,
                                  SpeculativeOptions o,
                                  const std::function<int64_t(const SpeculativeResult&, int64_t)>& kv_bytes_read,
                                  const std::function<bool()>& keep_going) {
  const auto prompt = encode_item_prompt(engine.model().tokenizer, item);
  o.max_tokens = item.max_tokens;
  o.sampling = SamplingParams{};  // greedy: strict and configured runs are comparable token by token
  o.accept = "greedy";
  // The break-even controller switches on measured times, so two runs of one item would
  // speculate in different rounds and their accepted lengths would differ by timing noise.
  o.controller.enabled = false;
  const auto start = std::chrono::steady_clock::now();
  TokenCallback on_token;
  if (keep_going) on_token = [&keep_going](int32_t, std::string_view) { return keep_going(); };
  auto result = engine.generate(prompt, drafter, o, on_token);
  if (!result) return result.error();
  if (keep_going && !keep_going()) return make_error(item.id + ": cancelled");
  RunOutput out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.prompt_tokens = static_cast<int64_t>(prompt.size());
  // The engine counts what attention read in every round (strict: every committed row; sparse:
  // the selected blocks plus metadata); both runs use that count when it is there.
  if (kv_bytes_read) {
    out.kv_bytes_read = kv_bytes_read(*result, out.prompt_tokens);
  } else if (result->metrics.kv_bytes_dense > 0) {
    out.kv_bytes_read = result->metrics.kv_bytes_read;
  } else {
    out.kv_bytes_read = dense_kv_bytes_read(out.prompt_tokens, result->rounds, engine.kv_row_bytes());
  }
  out.tokens = std::move(result->tokens);
  out.text = std::move(result->text);
  out.metrics = result->metrics;
  return out;
}

}  // namespace

ItemRunner make_engine_runner(SpeculativeEngine& engine, Drafter* drafter, EngineRunnerOptions options) {
  return [&engine, drafter, options = std::move(options)](const EvalItem& item,
                                                          Verification which) -> Expected<RunOutput> {
    const bool strict = which == Verification::kStrict;
    return run_on_engine(engine, drafter, item, strict ? options.strict : options.configured,
                         strict ? nullptr : options.configured_kv_bytes_read, options.keep_going);
  };
}

SweepRunner make_engine_sweep_runner(SpeculativeEngine& engine, Drafter* drafter, SpeculativeOptions strict,
                                     std::vector<SpeculativeOptions> configured) {
  return [&engine, drafter, strict = std::move(strict), configured = std::move(configured)](
             const EvalItem& item, int config) -> Expected<RunOutput> {
    if (config >= static_cast<int>(configured.size())) return make_error("eval: no configuration " + std::to_string(config));
    return run_on_engine(engine, drafter, item, config < 0 ? strict : configured[static_cast<size_t>(config)], nullptr, {});
  };
}

}  // namespace specula::eval
