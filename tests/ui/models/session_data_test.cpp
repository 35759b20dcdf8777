// Loading a session for the views: every table arrives, the sparse layout comes from the config,
// a bad file is refused with its name in the message, and a copy reopens with the same rounds.
#include "ui/models/session_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <filesystem>
#include <fstream>

#include "../ui_session_fixture.h"
#include "ui/models/session_files.h"
#include "ui/models/token_text.h"
#include "ui/models/timeline_model.h"

namespace specula::ui {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("specula_ui_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(SessionData, LoadsEveryTableOfTheFixture) {
  TempDir dir;
  const std::string path = (dir.path / "fixture.sqlite").string();
  ASSERT_EQ(testing::write_fixture_session(path), "");
  auto data = load_session_data(path);
  ASSERT_TRUE(data) << data.error().message;
  EXPECT_EQ(data->info.model_name, "fixture-llama");
  ASSERT_EQ(data->rounds.size(), static_cast<size_t>(testing::kFixtureRounds));
  EXPECT_EQ(data->layer_count(), testing::kFixtureLayers);
  EXPECT_EQ(data->draft_nodes.size(), static_cast<size_t>(testing::kFixtureRounds));
  EXPECT_EQ(data->draft_nodes.at(2).size(), testing::fixture_tree().size());
  // Per round: one row per node and layer plus one whole-tree row per layer.
  EXPECT_EQ(data->selections.at(0).size(), (testing::fixture_tree().size() + 1) * testing::kFixtureLayers);
  EXPECT_EQ(data->ffn.size(), static_cast<size_t>(testing::kFixtureRounds * testing::kFixtureLayers));
  ASSERT_EQ(data->moe.size(), static_cast<size_t>(testing::kFixtureRounds * testing::kFixtureLayers));
  EXPECT_EQ(data->moe[0].routed_experts, (std::vector<int32_t>{0, 2, 5, 7}));
  EXPECT_EQ(data->moe[0].skipped_experts, (std::vector<int32_t>{3}));
  EXPECT_EQ(data->kernels.size(),
            static_cast<size_t>(testing::kFixtureRounds * testing::kFixtureLayers * testing::kFixtureKernelsPerLayer));
  EXPECT_EQ(data->nvtx.size(), static_cast<size_t>(testing::kFixtureRounds * (testing::kFixtureLayers + 4)));
  EXPECT_EQ(data->sparse.block_size, 16);
  EXPECT_EQ(data->sparse.sink_blocks, 1);
  EXPECT_EQ(data->sparse.local_blocks, 2);
  EXPECT_EQ(data->sparse.anchors, (std::vector<int>{0, 3}));
  EXPECT_EQ(data->blocks_per_head(0, testing::kFixtureHeads * testing::fixture_blocks(0)), testing::fixture_blocks(0));
  EXPECT_EQ(data->blocks_per_head(0, 7), 7);  // does not divide: one flat head

  const auto timeline = TimelineModel::from_session(*data);
  ASSERT_EQ(timeline.lanes().size(), 3u);  // phases, stream 7, stream 13
  EXPECT_EQ(timeline.lanes()[0].kind, SpanKind::kPhase);
  EXPECT_EQ(timeline.lanes()[0].track_count, 2);  // layers nest inside verify
  EXPECT_EQ(timeline.lanes()[1].label, "GPU 0 stream 7");
  EXPECT_EQ(timeline.span_count(), data->kernels.size() + data->nvtx.size());
}

TEST(SessionData, RefusesBadFilesWithTheirName) {
  TempDir dir;
  const std::string text = (dir.path / "notes.sqlite").string();
  std::ofstream(text) << "this is not a database\n";
  auto a = load_session_data(text);
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("notes.sqlite"), std::string::npos) << a.error().message;
  auto b = load_session_data((dir.path / "missing.sqlite").string());
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("missing.sqlite"), std::string::npos) << b.error().message;
  // A SQLite database of another application.
  const std::string foreign = (dir.path / "foreign.sqlite").string();
  {
    auto db = profiler::sql::Database::open(foreign, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->exec("CREATE TABLE people (name TEXT)").ok());
  }
  auto c = load_session_data(foreign);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("foreign.sqlite"), std::string::npos) << c.error().message;
}

TEST(SessionFiles, CopyReopensWithTheSameContents) {
  TempDir dir;
  const std::string from = (dir.path / "a.sqlite").string(), to = (dir.path / "copy.sqlite").string();
  ASSERT_EQ(testing::write_fixture_session(from, false), "");
  ASSERT_TRUE(export_session_copy(from, to).ok());
  auto a = load_session_data(from), b = load_session_data(to);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->rounds.size(), b->rounds.size());
  for (size_t i = 0; i < a->rounds.size(); ++i) EXPECT_EQ(a->rounds[i].tokens, b->rounds[i].tokens);
  EXPECT_EQ(a->selections.at(5).size(), b->selections.at(5).size());
  const Status again = export_session_copy(from, to);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("already exists"), std::string::npos);
  auto summary = summarize_session(to);
  ASSERT_TRUE(summary) << summary.error().message;
  EXPECT_EQ(summary->model_name, "fixture-llama");
  EXPECT_EQ(summary->drafter, "ngram");
  EXPECT_EQ(summary->sparse, "sa-reuse");
  EXPECT_EQ(summary->rounds, testing::kFixtureRounds);
  EXPECT_EQ(summary->kernels, 0);
  EXPECT_EQ(summary->status, "finished");
}

}  // namespace
}  // namespace specula::ui

namespace specula::ui {
namespace {

TEST(TokenText, MakesSpacesAndBadBytesVisible) {
  EXPECT_EQ(visible_token(" Monday"), "\u2423Monday");
  EXPECT_EQ(visible_token("a\nb\t"), "a\u21B5b\u21E5");
  EXPECT_EQ(visible_token("\xE2\x82"), "<0xE2><0x82>");  // half a UTF-8 sequence
  EXPECT_EQ(visible_token("\xC3\xA9t\xC3\xA9"), "\xC3\xA9t\xC3\xA9");
}

TEST(TokenText, IdsWithoutTheModel) {
  SessionData data;
  data.info.config_json = R"({"model": "/nonexistent/model.gguf"})";
  const auto text = TokenText::for_session(data);
  EXPECT_EQ(text->display(42), "#42");
  EXPECT_EQ(text->source(), "");
}

// The committed real session names the default model; when it is here, its rounds' tokens
// decode to the text the run printed (the prompt lists the days of the week).
TEST(TokenText, RealSessionDecodesWithTheDefaultModel) {
  auto data = load_session_data(SPECULA_TEST_DATA_DIR "/sessions/real-ngram-hybrid.sqlite");
  ASSERT_TRUE(data) << data.error().message;
  const auto text = TokenText::for_session(*data);
  if (text->source().empty()) GTEST_SKIP() << "skipped: default model not downloaded";
  std::string all;
  for (const auto& r : data->rounds) {
    for (int32_t id : r.tokens) all += text->display(id);
  }
  EXPECT_NE(all.find("Monday"), std::string::npos) << all;
  EXPECT_NE(all.find("\u2423Tuesday"), std::string::npos) << all;
}

// The committed real GPU session (a CUDA run of the default model on an H100 with CUPTI capture,
// README): it names its backend and device, holds every round, and its kernel rows are real
// CUPTI records, launched without programmatic dependent launch, so no two kernels of the one
// stream overlap by more than the timestamps' jitter.
TEST(SessionData, RealGpuSessionHasItsBackendRoundsAndKernels) {
  auto data = load_session_data(SPECULA_TEST_DATA_DIR "/sessions/real-gpu-ngram.sqlite");
  ASSERT_TRUE(data) << data.error().message;
  EXPECT_EQ(data->info.backend, "cuda");
  EXPECT_NE(data->info.device.find("H100"), std::string::npos) << data->info.device;
  EXPECT_EQ(data->info.status, "finished");
  EXPECT_EQ(data->rounds.size(), 43u);
  ASSERT_GT(data->kernels.size(), 1000u);
  std::map<std::string, int> by_name;
  auto kernels = data->kernels;
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  int overlaps = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const auto& k = kernels[i];
    EXPECT_LT(k.start, k.end) << k.short_name;
    ++by_name[k.short_name];
    // CUPTI's timestamps of back-to-back kernels can overlap by a few tens of ns (up to 288 ns
    // seen, after cuBLAS's GEMMs); a kernel that started early and waited would overlap by
    // microseconds (the first recording, with programmatic launch, showed 3 us kernels as 25).
    if (i > 0 && k.stream_id == kernels[i - 1].stream_id && k.start + 1000 < kernels[i - 1].end) ++overlaps;
  }
  EXPECT_EQ(overlaps, 0) << "kernels of one stream overlap: programmatic launch was on";
  EXPECT_GT(by_name["skinny_kernel"], 100);
  EXPECT_GT(by_name["attention_kernel"], 100);
}

}  // namespace
}  // namespace specula::ui
