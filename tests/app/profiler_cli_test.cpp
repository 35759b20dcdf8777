// specula-cli export / import-nsys / diff, run as a user would: on sessions recorded from real
// CPU runs of the default model, on an nsys-layout capture, and on bad input.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "profiler/session_store.h"
#include "tests/app/cli_runner.h"
#include "tests/profiler/nsys_fixture.h"

namespace specula::cli_test {
namespace {

using ::testing::HasSubstr;

const std::string kPrompt = "'one two three four five one two three four five one two three'";

fs::path recorded(const std::string& name, const std::string& flags) {
  const fs::path session = scratch(name);
  fs::remove(session);
  const CliRun r = run_cli("generate -p " + kPrompt + " -n 24 " + flags + " --record " + quote(session));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return session;
}

TEST(ProfilerCli, ExportPerfettoAndCsvOfARealRun) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path session = recorded("export.sqlite", "--drafter ngram");
  const fs::path trace = scratch("trace.json");
  fs::remove(trace);
  CliRun r = run_cli("export " + quote(session) + " --format perfetto --out " + quote(trace));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(slurp(trace));
  int phases = 0, counters = 0;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "phase") ++phases;
    if (e["ph"] == "C") ++counters;
  }
  auto store = profiler::open_session(session.string());
  ASSERT_TRUE(store);
  EXPECT_EQ(counters, static_cast<int>(store->read_rounds()->size()));
  EXPECT_EQ(phases, static_cast<int>(store->read_nvtx()->size()));
  EXPECT_GT(phases, counters);

  // The same export again refuses to overwrite; --overwrite replaces it.
  expect_clean_failure(run_cli("export " + quote(session) + " --out " + quote(trace)), "--overwrite");
  EXPECT_EQ(run_cli("export " + quote(session) + " --out " + quote(trace) + " --overwrite").exit_code, 0);

  const fs::path dir = scratch("csv");
  r = run_cli("export " + quote(session) + " --format csv --out " + quote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"kernels.csv", "rounds.csv", "selections.csv", "nvtx.csv", "memcpy.csv"}) {
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  }
  EXPECT_EQ(count_lines(slurp(dir / "rounds.csv")), 1 + static_cast<int>(store->read_rounds()->size()));

  // A read-only session file still exports (it is opened read-only).
  ::chmod(session.c_str(), 0444);
  EXPECT_EQ(run_cli("export " + quote(session) + " --out " + quote(scratch("ro.json")) + " --overwrite").exit_code, 0);
}

TEST(ProfilerCli, DiffOfTwoRealRuns) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path a = recorded("plain.sqlite", "");
  const fs::path b = recorded("ngram.sqlite", "--drafter ngram --tree chain:3");
  const CliRun text = run_cli("diff " + quote(a) + " " + quote(b));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("drafter: \"none\" -> \"ngram\""));
  EXPECT_THAT(text.out, HasSubstr("tokens_per_s"));
  const CliRun json = run_cli("diff " + quote(a) + " " + quote(b) + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto d = nlohmann::json::parse(json.out);
  EXPECT_EQ(d["acceptance"]["a"]["speculative_rounds"], 0);
  EXPECT_GT(d["acceptance"]["b"]["speculative_rounds"].get<int>(), 0);
}

TEST(ProfilerCli, ImportNsysCaptureThenExportIt) {
  const fs::path capture = scratch("capture.sqlite");
  fs::remove(capture);
  ASSERT_TRUE(testing::write_nsys_fixture(capture.string()).ok());
  const fs::path session = scratch("imported.sqlite");
  fs::remove(session);
  CliRun r = run_cli("import-nsys " + quote(capture) + " --out " + quote(session));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("imported 3 kernels, 1 memcpys, 2 CUDA API calls, 2 NVTX ranges"));
  const fs::path trace = scratch("imported.json");
  fs::remove(trace);
  r = run_cli("export " + quote(session) + " --out " + quote(trace));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(slurp(trace), HasSubstr("\"name\":\"GPU 0: NVIDIA H100 80GB HBM3\""));
  // Opening the raw capture as a session points at import-nsys.
  expect_clean_failure(run_cli("export " + quote(capture) + " --out " + quote(scratch("x.json"))), "import-nsys");
}

TEST(ProfilerCliBadInput, EachGetsOneLineAndANonZeroExit) {
  const fs::path junk = scratch("junk.sqlite");
  { std::ofstream(junk) << std::string(4096, 'x'); }
  const fs::path foreign = scratch("foreign.sqlite");
  fs::remove(foreign);
  ASSERT_EQ(std::system(("sqlite3 " + quote(foreign) + " 'CREATE TABLE t(x)'").c_str()), 0);
  expect_clean_failure(run_cli("export /nonexistent/s.sqlite --out " + quote(scratch("a.json"))), "/nonexistent/s.sqlite");
  expect_clean_failure(run_cli("export " + quote(junk) + " --out " + quote(scratch("a.json"))), "junk.sqlite");
  expect_clean_failure(run_cli("export " + quote(foreign) + " --out " + quote(scratch("a.json"))), "not a Specula session");
  expect_clean_failure(run_cli("export " + quote(foreign) + " --format xml --out x"), "--format");
  expect_clean_failure(run_cli("diff " + quote(junk) + " " + quote(foreign)), "junk.sqlite");
  expect_clean_failure(run_cli("import-nsys " + quote(junk) + " --out " + quote(scratch("b.sqlite"))), "junk.sqlite");
  expect_clean_failure(run_cli("import-nsys " + quote(foreign) + " --out " + quote(scratch("b.sqlite"))),
                       "not an Nsight Systems SQLite export");
}

}  // namespace
}  // namespace specula::cli_test
