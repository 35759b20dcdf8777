// Perfetto and CSV export of a session with synthetic rounds and GPU activity of known values.
#include "profiler/session_export.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "session_fixture.h"

namespace specula::profiler {
namespace {

namespace fs = std::filesystem;
using namespace specula::testing;

class SessionExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("specula_export_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = record_synthetic((dir_ / "s.sqlite").string(), ObserveLevel::kFull, kRounds);
    add_gpu_activity(path_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static constexpr int kRounds = 5;
  fs::path dir_;
  std::string path_;
};

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_F(SessionExportTest, PerfettoHasStreamTracksPhasesAndTheAcceptedLengthCounter) {
  auto session = open_session(path_);
  ASSERT_TRUE(session) << session.error().message;
  auto trace = perfetto_trace(*session);
  ASSERT_TRUE(trace) << trace.error().message;
  const int64_t origin = (*trace)["otherData"]["time_origin_ns"];
  EXPECT_EQ(origin, 1'000'000) << "the session start is the earliest time";

  std::map<std::string, std::string> process_names;
  std::map<int64_t, std::string> gpu_threads;
  int kernels = 0, memcpys = 0, phases = 0, api = 0;
  std::vector<int> counter;
  for (const auto& e : (*trace)["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_names[std::to_string(e["pid"].get<int>())] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name" && e["pid"] == 100) gpu_threads[e["tid"]] = e["args"]["name"];
    if (ph == "C") counter.push_back(e["args"]["accepted_length"]);
    if (ph != "X") continue;
    if (e["cat"] == "kernel") {
      ++kernels;
      EXPECT_EQ(e["pid"], 100);
      if (e["args"]["correlationId"] == 100) {  // the first kernel: 1'020'000 .. 1'021'000 ns on stream 7
        EXPECT_EQ(e["name"], "gemm_bf16");
        EXPECT_EQ(e["tid"], 7);
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), (1'020'000 - origin) / 1000.0);
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.0);
        EXPECT_EQ(e["args"]["grid"][0], 132);
        EXPECT_EQ(e["args"]["registersPerThread"], 64);
      }
    }
    if (e["cat"] == "memcpy") {
      ++memcpys;
      EXPECT_EQ(e["name"], "Memcpy HtoD");
      EXPECT_EQ(e["args"]["bytes"], 4096);
    }
    if (e["cat"] == "phase") ++phases;
    if (e["cat"] == "cuda_api") ++api;
  }
  EXPECT_EQ(kernels, 6);
  EXPECT_EQ(memcpys, 1);
  EXPECT_EQ(api, 2);
  EXPECT_EQ(process_names["100"], "GPU 0: NVIDIA H100 80GB HBM3");
  EXPECT_EQ(process_names["1"], "Engine (cpu)");
  EXPECT_EQ(gpu_threads.size(), 2u);
  EXPECT_EQ(gpu_threads[7], "Stream 7");
  // prefill + per round one draft span and one verify span per layer
  EXPECT_EQ(phases, 1 + kRounds * (1 + kSyntheticLayers));
  ASSERT_EQ(static_cast<int>(counter.size()), kRounds);
  for (int r = 0; r < kRounds; ++r) EXPECT_EQ(counter[static_cast<size_t>(r)], 1 + synthetic_accepted(r));

  const fs::path out = dir_ / "trace.json";
  ASSERT_TRUE(export_perfetto(*session, out.string()).ok());
  std::ifstream in(out);
  EXPECT_EQ(nlohmann::json::parse(in), *trace);
}

TEST_F(SessionExportTest, CsvTablesRoundTripValuesAndQuoteNames) {
  auto session = open_session(path_);
  ASSERT_TRUE(session);
  const fs::path out = dir_ / "csv";
  ASSERT_TRUE(export_csv(*session, out.string()).ok());
  const auto kernels = lines_of(out / "kernels.csv");
  ASSERT_EQ(kernels.size(), 7u);  // header + 6
  EXPECT_EQ(kernels[0].rfind("start_ns,end_ns,duration_ns,", 0), 0u);
  EXPECT_EQ(kernels[1].rfind("1010000", 0), std::string::npos);
  EXPECT_EQ(kernels[1].rfind("1020000,1021000,1000,0,0,7,100,gemm_bf16,", 0), 0u) << kernels[1];
  EXPECT_NE(kernels[6].find("\"void attn<8, 64>(const __nv_bfloat16*)\""), std::string::npos) << kernels[6];

  const auto rounds = lines_of(out / "rounds.csv");
  ASSERT_EQ(rounds.size(), static_cast<size_t>(kRounds + 1));
  // round 2 accepts 2 drafts: tokens 1020 1021 then 7
  EXPECT_NE(rounds[3].find(",1020 1021 7,"), std::string::npos) << rounds[3];

  const auto selections = lines_of(out / "selections.csv");
  // per round and layer: the whole-tree selection and one per-query (full level)
  ASSERT_EQ(selections.size(), static_cast<size_t>(1 + kRounds * kSyntheticLayers * 2));
  EXPECT_NE(selections[1].find(",refresh,-1,16,4,0 1 2 3,"), std::string::npos) << selections[1];
  EXPECT_EQ(lines_of(out / "memcpy.csv").size(), 2u);
  EXPECT_EQ(csv_field("a\"b,c"), "\"a\"\"b,c\"");
  EXPECT_EQ(csv_field("plain"), "plain");
}

TEST_F(SessionExportTest, UnwritableOutputIsAClearError) {
  auto session = open_session(path_);
  ASSERT_TRUE(session);
  const Status s = export_perfetto(*session, "/nonexistent-dir/t.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("/nonexistent-dir/t.json"), std::string::npos);
  const fs::path blocker = dir_ / "file";
  std::ofstream(blocker) << "x";
  const Status c = export_csv(*session, (blocker / "sub").string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("cannot create"), std::string::npos) << c.error().message;
}

}  // namespace
}  // namespace specula::profiler
