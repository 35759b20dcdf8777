// The harness with a stub ItemRunner (no model): scores, agreement, accepted length, KV bytes,
// goals and errors; and the dense KV-read count from known rounds. The engine runner's
// keep_going (Cancel) on the default model.
#include "engine/eval/runner.h"

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>

#include "engine/model/loader.h"

namespace specula::eval {
namespace {

RoundRecord spec_round(int nodes, int accepted) {
  RoundRecord r;
  r.speculative = true;
  r.tree_nodes = nodes;
  r.accepted = accepted;
  return r;
}

TEST(EvalRunner, DenseKvBytesRead) {
  // Prompt 10 rows. Round 1: pending + 4 nodes over 10 committed -> 15 rows read; keeps 1 + 2.
  // Round 2: plain step over 13 -> 14 read. Round 3: pending + 3 nodes over 14 -> 18 read.
  const std::vector<RoundRecord> rounds = {spec_round(4, 2), RoundRecord{}, spec_round(3, 0)};
  EXPECT_EQ(dense_kv_bytes_read(10, rounds, 100), (15 + 14 + 18) * 100);
  EXPECT_EQ(dense_kv_bytes_read(10, {}, 100), 0);
}

RunOutput output(std::vector<int32_t> tokens, std::string text, int spec_rounds, double accepted, int64_t kv) {
  RunOutput o;
  o.tokens = std::move(tokens);
  o.text = std::move(text);
  o.prompt_tokens = 100;
  o.metrics.speculative_rounds = spec_rounds;
  o.metrics.mean_accepted_length = accepted;
  o.kv_bytes_read = kv;
  return o;
}

TEST(EvalRunner, ComparesStrictAndConfiguredRuns) {
  const std::vector<EvalItem> items = {{"passkey:0", "p0", false, "111", 8, ""}, {"passkey:1", "p1", false, "222", 8, ""}};
  // Item 0: both right and identical. Item 1: strict right, configured diverges after 2 tokens.
  const ItemRunner stub = [](const EvalItem& item, Verification v) -> Expected<RunOutput> {
    if (item.id == "passkey:0") return output({1, 2, 3}, " 111.", 2, 2.0, 1000);
    if (v == Verification::kStrict) return output({4, 5, 6, 7}, " 222 is it", 2, 3.0, 1000);
    return output({4, 5, 9, 7}, " 229 is it", 4, 1.5, 400);
  };
  std::vector<size_t> progress;
  auto report = run_eval(TaskKind::kPasskey, items, stub, [&](size_t done, size_t total, const ItemResult&) {
    progress.push_back(done * 10 + total);
  });
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(progress, (std::vector<size_t>{12, 22}));
  const EvalSummary& s = report->summary;
  EXPECT_EQ(s.items, 2);
  EXPECT_DOUBLE_EQ(*s.strict_score, 100.0);
  EXPECT_DOUBLE_EQ(*s.configured_score, 50.0);
  EXPECT_DOUBLE_EQ(s.token_agreement, 6.0 / 7);  // 3 of 3 and 3 of 4 positions
  EXPECT_EQ(s.identical_outputs, 1);
  // ROUGE-L of "229 is it" against "222 is it": LCS 2 of 3 words; mean with item 0's 1.
  EXPECT_DOUBLE_EQ(s.rouge_l, (1.0 + 2.0 / 3) / 2);
  // Accepted length weighted by speculative rounds: (2*2 + 2*3) / 4 and (2*2 + 4*1.5) / 6.
  EXPECT_DOUBLE_EQ(s.strict_accepted_length, 2.5);
  EXPECT_DOUBLE_EQ(s.configured_accepted_length, 10.0 / 6);
  EXPECT_EQ(s.strict_kv_bytes_read, 2000);
  EXPECT_EQ(s.configured_kv_bytes_read, 1400);
  EXPECT_FALSE(report->goals.agreement);
  EXPECT_FALSE(*report->goals.score);
  EXPECT_FALSE(report->goals.accepted_length);
  const auto j = to_json(*report, true);
  EXPECT_EQ(j["task"], "passkey");
  EXPECT_EQ(j["metric"], "accuracy");
  EXPECT_DOUBLE_EQ(j["score"]["delta_points"].get<double>(), -50.0);
  EXPECT_DOUBLE_EQ(j["kv_bytes_read"]["ratio"].get<double>(), 0.7);
  ASSERT_EQ(j["per_item"].size(), 2u);
  EXPECT_EQ(j["per_item"][1]["common_prefix"], 2);
  EXPECT_EQ(j["per_item"][1]["configured_text"], " 229 is it");
}

TEST(EvalRunner, IdenticalRunsMeetEveryGoal) {
  const std::vector<EvalItem> items = {{"specbench:x:1", "p", true, "", 8, ""}};
  const ItemRunner same = [](const EvalItem&, Verification) -> Expected<RunOutput> {
    return output({1, 2}, "", 3, 2.0, 10);  // even an empty text agrees with itself
  };
  auto report = run_eval(TaskKind::kSpecbench, items, same);
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->summary.strict_score.has_value());
  EXPECT_DOUBLE_EQ(report->summary.rouge_l, 1.0);
  EXPECT_TRUE(report->goals.agreement);
  EXPECT_FALSE(report->goals.score.has_value());
  EXPECT_TRUE(report->goals.accepted_length);
  EXPECT_TRUE(to_json(*report, false)["score"]["strict"].is_null());
}

TEST(EvalRunner, ErrorsNameTheItemAndRun) {
  const std::vector<EvalItem> items = {{"gsm8k:0", "q", true, "1", 8, ""}};
  const ItemRunner failing = [](const EvalItem&, Verification v) -> Expected<RunOutput> {
    if (v == Verification::kConfigured) return make_error("prompt has 9000 tokens, context is 8192");
    return output({1}, "1", 0, 1.0, 0);
  };
  auto report = run_eval(TaskKind::kGsm8k, items, failing);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().message, "gsm8k:0 (configured run): prompt has 9000 tokens, context is 8192");
  EXPECT_FALSE(run_eval(TaskKind::kGsm8k, {}, failing));
}

TEST(EvalRunner, KeepGoingFalseStopsTheRunAtTheNextTokenWithAnError) {
  if (!std::filesystem::exists(resolve_model_path("default"))) GTEST_SKIP() << "skipped: default model not downloaded";
  auto model = load_model(resolve_model_path("default"));
  ASSERT_TRUE(model) << model.error().message;
  SpeculativeEngine engine(*model, 1);
  int asked = 0;
  EngineRunnerOptions options;
  options.strict.stop_at_eos = false;
  options.keep_going = [&asked] { return ++asked < 3; };
  const auto runner = make_engine_runner(engine, nullptr, options);
  EvalItem item;
  item.id = "count:0";
  item.prompt = "one two three four five six";
  item.max_tokens = 40;
  auto out = runner(item, Verification::kStrict);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message, "count:0: cancelled");
  EXPECT_EQ(asked, 4) << "three tokens, then the runner's own check; not 40 tokens";
  options.keep_going = nullptr;
  item.max_tokens = 5;
  auto full = make_engine_runner(engine, nullptr, options)(item, Verification::kStrict);
  ASSERT_TRUE(full) << full.error().message;
  EXPECT_EQ(full->tokens.size(), 5u);
}

}  // namespace
}  // namespace specula::eval
