#pragma once
// The evaluation harness: every item runs twice on the same target, once with strict (dense)
// verification and once with the configuration under test, and the report compares them:
// the task score of each, agreement of the configured output with the strict one (token
// positions and ROUGE-L), the mean accepted length of each, and the KV bytes each read.
//
// The runs go through an ItemRunner so the harness is independent of how verification is
// configured: make_engine_runner wraps a SpeculativeEngine; tests pass a stub.
//
// kv_bytes_read counts what the target's attention reads after prefill: each forward over the
// pending token and the draft nodes reads every committed row once (a kernel shares the loads
// across the tree's queries and the query heads of a GQA group) plus the rows it appends.
// Prefill is left out: sparse verification does not change it.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/expected.h"
#include "engine/eval/metrics.h"
#include "engine/eval/tasks.h"
#include "engine/spec/metrics.h"
#include "engine/spec/speculative.h"
#include "engine/tokenizer/tokenizer.h"

namespace specula::eval {

enum class Verification { kStrict, kConfigured };

struct RunOutput {
  std::vector<int32_t> tokens;  // generated ids, prompt excluded
  std::string text;
  int64_t prompt_tokens = 0;
  SpeculativeMetrics metrics;
  int64_t kv_bytes_read = 0;
  double seconds = 0;           // prefill + decode
};

using ItemRunner = std::function<Expected<RunOutput>(const EvalItem& item, Verification verification)>;

struct ItemResult {
  std::string id;
  RunOutput strict;
  RunOutput configured;
  std::optional<double> strict_score;      // in [0, 1]; nullopt when the task has no metric
  std::optional<double> configured_score;
  TokenAgreement agreement;
  RougeScore rouge;                        // configured text against the strict text
};

struct EvalSummary {
  int items = 0;
  std::optional<double> strict_score;      // mean, in points (0..100)
  std::optional<double> configured_score;
  double token_agreement = 1;              // matched / compared, summed over items
  double rouge_l = 1;                      // mean F1 over items
  int identical_outputs = 0;
  double strict_accepted_length = 1;       // over all speculative rounds of all items
  double configured_accepted_length = 1;
  int64_t strict_kv_bytes_read = 0;
  int64_t configured_kv_bytes_read = 0;
  int64_t prompt_tokens = 0;               // mean
  double strict_seconds = 0;
  double configured_seconds = 0;
};

// The goals: agreement >= 95% of tokens, score within 1 point, accepted length within 2%.
struct EvalGoals {
  bool agreement = false;
  std::optional<bool> score;  // nullopt without a task metric
  bool accepted_length = false;
};

struct EvalReport {
  TaskKind task = TaskKind::kPasskey;
  std::vector<ItemResult> items;
  EvalSummary summary;
  EvalGoals goals;
};

using EvalProgress = std::function<void(size_t done, size_t total, const ItemResult& last)>;

Expected<EvalReport> run_eval(TaskKind task, std::span<const EvalItem> items, const ItemRunner& runner,
                              const EvalProgress& progress = nullptr);

// A sweep: each item runs once strict (config -1) and once per configuration 0..n_configs-1;
// one report per configuration, all against the same strict runs.
using SweepRunner = std::function<Expected<RunOutput>(const EvalItem& item, int config)>;
Expected<std::vector<EvalReport>> run_eval_sweep(TaskKind task, std::span<const EvalItem> items, int n_configs,
                                                 const SweepRunner& runner, const EvalProgress& progress = nullptr);

EvalSummary summarize(std::span<const ItemResult> items);
EvalGoals check_goals(const EvalSummary& summary);

// Dense attention's reads after prefill (see the top of this file) from a run's rounds.
int64_t dense_kv_bytes_read(int64_t prompt_tokens, std::span<const RoundRecord> rounds, int64_t row_bytes);

// per_item: include each item's texts, scores and agreement.
nlohmann::json to_json(const EvalReport& report, bool per_item);

// Greedy runs on `engine` with `drafter` (may be null), speculating every round (no break-even
// controller, whose timing-driven choices would differ between runs): the strict run with `strict`, the
// configured one with `configured`. kv_bytes_read, when given, replaces the dense count for the
// configured run (a sparse policy knows which blocks it read).
struct EngineRunnerOptions {
  SpeculativeOptions strict;
  SpeculativeOptions configured;
  std::function<int64_t(const SpeculativeResult&, int64_t prompt_tokens)> configured_kv_bytes_read;
  // Asked after every generated token; false stops the run there (a UI's Cancel). The runner
  // then returns an error rather than a truncated output.
  std::function<bool()> keep_going = {};
};
ItemRunner make_engine_runner(SpeculativeEngine& engine, Drafter* drafter, EngineRunnerOptions options);
// The same runs for a sweep: config -1 runs `strict`, config i runs configured[i].
SweepRunner make_engine_sweep_runner(SpeculativeEngine& engine, Drafter* drafter, SpeculativeOptions strict,
                                     std::vector<SpeculativeOptions> configured);

// BOS (when the model adds one), then the prompt, in the chat template when item.chat.
std::vector<int32_t> encode_item_prompt(const Tokenizer& tokenizer, const EvalItem& item);

}  // namespace specula::eval
