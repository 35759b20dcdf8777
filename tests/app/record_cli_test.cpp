// `specula-cli generate --record`: a real CPU run of the default model recorded into a session,
// read back through the profiler's session reader and checked against the run's own --json.
#include <numeric>

#include <nlohmann/json.hpp>

#include "profiler/session_store.h"
#include "tests/app/cli_runner.h"

namespace specula::cli_test {
namespace {

using ::testing::HasSubstr;

// The pinned sha256 of the default model, as scripts/fetch-model checks it.
std::string pinned_model_sha256() {
  const std::string script = slurp(fs::path(SPECULA_SOURCE_DIR) / "scripts/fetch-model");
  const std::string key = "sha256=\"";
  const auto at = script.find(key);
  if (at == std::string::npos) return {};
  return script.substr(at + key.size(), 64);
}

TEST(RecordCli, NgramRunIsRecordedRoundByRound) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path session = scratch("ngram.sqlite");
  fs::remove(session);
  const CliRun r = run_cli(
      "generate -p 'one two three four five one two three four five one two three' -n 32 --drafter ngram --json "
      "--no-controller --record " + quote(session));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["session"], session.string());

  auto store = profiler::SessionStore::open(session.string());
  ASSERT_TRUE(store) << store.error().message;
  auto info = store->read_session();
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->status, "finished");
  EXPECT_EQ(info->backend, "cpu");
  EXPECT_EQ(info->architecture, "llama");
  EXPECT_EQ(info->model_sha256, pinned_model_sha256());
  const auto config = nlohmann::json::parse(info->config_json);
  EXPECT_EQ(config["drafter"], "ngram");
  EXPECT_EQ(config["max_tokens"], 32);

  auto rounds = store->read_rounds();
  ASSERT_TRUE(rounds) << rounds.error().message;
  ASSERT_EQ(static_cast<int>(rounds->size()), out["metrics"]["rounds"].get<int>());
  // The prefill emits the first token; every later one is in exactly one round, in order.
  std::vector<int32_t> replay;
  int speculative = 0;
  for (const auto& round : *rounds) {
    replay.insert(replay.end(), round.tokens.begin(), round.tokens.end());
    EXPECT_LE(round.start_ns, round.end_ns);
    if (!round.speculative) continue;
    ++speculative;
    auto nodes = store->read_draft_nodes(round.round);
    ASSERT_TRUE(nodes) << nodes.error().message;
    EXPECT_EQ(static_cast<int>(nodes->size()), round.tree_nodes);
    const int accepted = static_cast<int>(std::count_if(nodes->begin(), nodes->end(), [](const auto& n) { return n.accepted; }));
    EXPECT_EQ(accepted + 1, round.accepted_length) << "round " << round.round;
  }
  const auto tokens = out["tokens"].get<std::vector<int32_t>>();
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(replay, std::vector<int32_t>(tokens.begin() + 1, tokens.end()));
  EXPECT_EQ(speculative, out["metrics"]["speculative_rounds"].get<int>());
  EXPECT_GT(speculative, 0) << "the repetitive prompt should give the ngram drafter matches";

  // Engine phases are NVTX_EVENTS rows on the monotonic clock, inside the session's time.
  auto nvtx = store->read_nvtx();
  ASSERT_TRUE(nvtx) << nvtx.error().message;
  std::map<std::string, int> phases;
  for (const auto& range : *nvtx) {
    ++phases[range.text];
    EXPECT_LE(range.start, range.end);
    EXPECT_GE(range.start, info->start_ns);
  }
  EXPECT_EQ(phases["prefill"], 1);
  EXPECT_EQ(phases["verify"], speculative);
  EXPECT_EQ(phases["accept"], speculative);
  EXPECT_EQ(phases["commit"], speculative);
  EXPECT_GE(phases["draft"], speculative);

  auto metrics = store->read_metrics();
  ASSERT_TRUE(metrics) << metrics.error().message;
  const auto mean = std::find_if(metrics->begin(), metrics->end(), [](const auto& m) { return m.first == "mean_accepted_length"; });
  ASSERT_NE(mean, metrics->end());
  EXPECT_NEAR(mean->second, out["metrics"]["mean_accepted_length"].get<double>(), 1e-9);
}

TEST(RecordCliBadInput, ExistingSessionIsKeptUnlessOverwrite) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path session = scratch("existing.sqlite");
  { std::ofstream(session) << "precious"; }
  expect_clean_failure(run_cli("generate -p hi -n 2 --record " + quote(session)), "--overwrite");
  EXPECT_EQ(slurp(session), "precious");
  const CliRun r = run_cli("generate -p hi -n 2 --record " + quote(session) + " --overwrite");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("recorded"));
  EXPECT_TRUE(profiler::SessionStore::open(session.string()).ok());
}

TEST(RecordCliBadInput, UnwritablePathAndUnknownLevel) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  expect_clean_failure(run_cli("generate -p hi -n 2 --record /nonexistent-dir/s.sqlite"), "/nonexistent-dir/s.sqlite");
  expect_clean_failure(run_cli("generate -p hi -n 2 --record " + quote(scratch("l.sqlite")) + " --record-level loud"),
                       "--record-level");
}

}  // namespace
}  // namespace specula::cli_test

namespace specula::cli_test {
namespace {

TEST(SparseCli, JsonRepeatsTheConfigAndCountsKvBytes) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path config = scratch("sparse.json");
  { std::ofstream(config) << R"({"preset":"sa","dense_below":0,"eta":0.3,"order":"dfs"})"; }
  const CliRun run = run_cli("generate -p 'one two three four one two three four one two three four one two three four "
                             "one two three four one two three four' -n 8 --drafter ngram --kv-block-size 8 --json "
                             "--sparse-config " + quote(config));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["sparse"]["order"], "dfs");
  EXPECT_EQ(out["sparse"]["query_mode"], "first");
  EXPECT_DOUBLE_EQ(out["sparse"]["eta"].get<double>(), 0.3);
  EXPECT_GT(out["metrics"]["kv_bytes_dense"].get<int64_t>(), 0);
  EXPECT_LT(out["metrics"]["kv_bytes_read"].get<int64_t>(), out["metrics"]["kv_bytes_dense"].get<int64_t>());
}

TEST(SparseCli, BadPresetConfigAndCalibrationAreClearErrors) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  expect_clean_failure(run_cli("generate -p hi -n 2 --sparse densest"), "unknown sparse preset");
  const fs::path bad = scratch("bad_sparse.json");
  { std::ofstream(bad) << R"({"preset":"sa","eta":1.5})"; }
  expect_clean_failure(run_cli("generate -p hi -n 2 --sparse-config " + quote(bad)), "eta");
  { std::ofstream(bad) << R"({"preset":"smoe"})"; }
  expect_clean_failure(run_cli("generate -p hi -n 2 --sparse-config " + quote(bad)), "no MoE layers");
  const fs::path calib = scratch("calib.json");
  {
    std::ofstream(calib) << R"({"kind":"specula sparse calibration","version":1,"model_name":"x","model_sha256":")"
                         << std::string(64, '0') << R"(","n_layers":30,"jaccard_prev":[],"anchors":[0,5]})";
  }
  { std::ofstream(bad) << R"({"preset":"sa-reuse","calibration":")" << calib.string() << R"("})"; }
  expect_clean_failure(run_cli("generate -p hi -n 2 --sparse-config " + quote(bad)), "another model");
}

TEST(SparseCli, CalibratePicksAnchorsForTheModel) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path out = scratch("calibration.json");
  const CliRun r = run_cli("calibrate --data " + quote(fs::path(SPECULA_SHARED_DIR) / "data/specbench-dev.jsonl") +
                           " --limit 1 --anchors 6 --max-tokens 8 --out " + quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto c = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(c["anchors"].size(), 6u);
  EXPECT_EQ(c["anchors"][0], 0);
  EXPECT_EQ(c["jaccard_prev"].size(), 30u);
  const fs::path config = scratch("reuse.json");
  { std::ofstream(config) << R"({"preset":"sa-reuse","dense_below":0,"calibration":")" << out.string() << R"("})"; }
  const CliRun g = run_cli("generate -p 'one two three one two three' -n 4 --json --sparse-config " + quote(config));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(nlohmann::json::parse(g.out)["sparse"]["anchors"], c["anchors"]);
}

}  // namespace
}  // namespace specula::cli_test
