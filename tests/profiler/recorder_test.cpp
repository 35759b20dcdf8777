#include "profiler/recorder.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "session_fixture.h"

namespace specula::profiler {
namespace {

namespace fs = std::filesystem;
using namespace specula::testing;

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("specula_recorder_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(RecorderTest, SyntheticSessionRoundTripsAtFullLevel) {
  constexpr int kRounds = 6;
  const std::string path = record_synthetic(file("full.sqlite"), ObserveLevel::kFull, kRounds);
  EXPECT_FALSE(fs::exists(path + "-wal")) << "a finished session is one file";

  auto store = open_session(path);
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto info = store->read_session();
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->model_name, "tiny-llama");
  EXPECT_EQ(info->model_sha256, std::string(64, 'a'));
  EXPECT_EQ(info->architecture, "llama");
  EXPECT_EQ(info->backend, "cpu");
  EXPECT_EQ(info->level, "full");
  EXPECT_EQ(info->status, "finished");
  EXPECT_EQ(info->start_ns, 1'000'000);
  ASSERT_TRUE(info->end_ns.has_value());
  EXPECT_EQ(info->config_json, R"({"tree":"chain:4","accept":"greedy"})");

  auto rounds = store->read_rounds();
  ASSERT_TRUE(rounds.ok()) << rounds.error().message;
  ASSERT_EQ(rounds->size(), static_cast<size_t>(kRounds));
  for (int64_t round = 0; round < kRounds; ++round) {
    const RoundRow& r = (*rounds)[static_cast<size_t>(round)];
    const int n = synthetic_tree_nodes(round);
    const int accepted = synthetic_accepted(round);
    EXPECT_EQ(r.round, round);
    EXPECT_EQ(r.tree_nodes, n);
    EXPECT_EQ(r.tree_depth, n);
    EXPECT_EQ(r.accepted_length, 1 + accepted);
    EXPECT_EQ(r.end_ns - r.start_ns, 2000);
    EXPECT_EQ(r.context_len, 100 + round);
    EXPECT_EQ(r.drafter, "ngram");
    EXPECT_EQ(r.rollback_tokens, n - accepted);
    EXPECT_EQ(r.rejected_kv_bytes, (n - accepted) * 4096);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(accepted + 1));
    EXPECT_EQ(r.tokens.back(), 7);

    auto nodes = store->read_draft_nodes(round);
    ASSERT_TRUE(nodes.ok());
    ASSERT_EQ(nodes->size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const DraftNodeRow& node = (*nodes)[static_cast<size_t>(i)];
      EXPECT_EQ(node.token, synthetic_token(round, i));
      EXPECT_EQ(node.parent, i - 1);
      EXPECT_EQ(node.depth, i + 1);
      EXPECT_FLOAT_EQ(node.draft_prob, 0.5f);
      EXPECT_EQ(node.accepted, i < accepted);
      EXPECT_EQ(node.visited, i <= accepted);
      if (i <= accepted) {
        ASSERT_TRUE(node.target_prob.has_value());
        EXPECT_FLOAT_EQ(*node.target_prob, 0.25f * static_cast<float>(i + 1));
      } else {
        EXPECT_FALSE(node.target_prob.has_value());
      }
    }

    // Per layer: one group selection and one per-query selection (full level).
    auto selections = store->read_layer_selections(round);
    ASSERT_TRUE(selections.ok());
    ASSERT_EQ(selections->size(), static_cast<size_t>(2 * kSyntheticLayers));
    for (const LayerSelectionRow& s : *selections) {
      const int layer = s.selection.layer;
      EXPECT_EQ(unpack_block_bits(s.selection.block_bits),
                (std::vector<int32_t>{layer, layer + 1, layer + 2, layer + 3}));
      EXPECT_EQ(s.selected_blocks, 4);
      EXPECT_EQ(s.selection.mode, layer == 0 ? SelectionMode::kRefresh : SelectionMode::kReuse);
      if (layer == 0) {
        EXPECT_FALSE(s.overlap_prev.has_value());
      } else {
        // {l-1..l+2} vs {l..l+3}: 3 shared of 5.
        ASSERT_TRUE(s.overlap_prev.has_value());
        EXPECT_EQ(*s.overlap_prev, 3);
        EXPECT_DOUBLE_EQ(*s.jaccard_prev, 3.0 / 5.0);
      }
    }
  }
  EXPECT_EQ(*store->count_rows("SPECULA_FFN_STATS"), kRounds * kSyntheticLayers);
  EXPECT_EQ(*store->count_rows("SPECULA_MOE_STATS"), kRounds * kSyntheticLayers);
  EXPECT_EQ(*store->database().query_int("SELECT sum(skippedCount) FROM SPECULA_MOE_STATS"), kRounds * kSyntheticLayers);
  EXPECT_EQ(*store->count_rows("SPECULA_DECISIONS"), 2);  // rounds 0 and 5

  // CPU spans: prefill + per round one draft span and one verify span per layer, all NVTX
  // push/pop ranges on one thread, the round in int64Value.
  auto nvtx = store->read_nvtx();
  ASSERT_TRUE(nvtx.ok());
  ASSERT_EQ(nvtx->size(), static_cast<size_t>(1 + kRounds * (1 + kSyntheticLayers)));
  EXPECT_EQ(nvtx->front().text, "prefill");
  EXPECT_EQ(nvtx->front().payload, 12);
  EXPECT_EQ(nvtx->front().end - nvtx->front().start, 5000);
  EXPECT_EQ((*nvtx)[1].text, "draft");
  EXPECT_EQ((*nvtx)[1].payload, 0);
  EXPECT_EQ((*nvtx)[2].text, "verify/L0");
  EXPECT_EQ(*store->database().query_int("SELECT count(DISTINCT eventType) FROM NVTX_EVENTS"), 1);
  EXPECT_EQ(*store->database().query_int("SELECT eventType FROM NVTX_EVENTS LIMIT 1"), kNvtxPushPopRangeEventType);
  EXPECT_EQ(*store->database().query_int("SELECT count(DISTINCT globalTid) FROM NVTX_EVENTS"), 1);
  EXPECT_EQ(*store->database().query_int("SELECT globalTid >> 24 FROM NVTX_EVENTS LIMIT 1"), ::getpid());

  auto metrics = store->read_metrics();
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 2u);  // the array is kept as JSON only
  EXPECT_EQ((*metrics)[1].first, "tokens_per_s");
  EXPECT_DOUBLE_EQ((*metrics)[1].second, 42.5);
}

TEST_F(RecorderTest, SummaryLevelLeavesOutPerQuerySelections) {
  const std::string path = record_synthetic(file("summary.sqlite"), ObserveLevel::kSummary, 3);
  auto store = open_session(path);
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(*store->count_rows("SPECULA_LAYER_SELECTIONS"), 3 * kSyntheticLayers);
  EXPECT_EQ(*store->database().query_int("SELECT count(*) FROM SPECULA_LAYER_SELECTIONS WHERE query >= 0"), 0);
  EXPECT_EQ(*store->count_rows("SPECULA_ROUNDS"), 3);
  EXPECT_EQ(store->read_session()->level, "summary");
}

TEST_F(RecorderTest, OffLevelRecordsNothingButTheSchema) {
  auto recorder = record_to(file("off.sqlite"), ObserveLevel::kOff);
  ASSERT_TRUE(recorder.ok());
  int64_t t = 0;
  emit_session_start(**recorder, t);
  emit_round_events(**recorder, 0, t);
  ASSERT_TRUE((*recorder)->finish().ok());
  EXPECT_EQ((*recorder)->stats().events, 0);
  auto store = open_session(file("off.sqlite"));
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(*store->count_rows("SPECULA_ROUNDS"), 0);
}

TEST_F(RecorderTest, KernelBatchesAreCopiedAndWritten) {
  auto recorder = record_to(file("kernels.sqlite"), ObserveLevel::kSummary);
  ASSERT_TRUE(recorder.ok());
  {
    std::vector<std::string> names = {"void attn<64>(float*)", "void ffn(float*)"};
    std::vector<KernelActivity> batch(100);
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].start = static_cast<int64_t>(i) * 10;
      batch[i].end = batch[i].start + 5;
      batch[i].correlation_id = static_cast<int64_t>(i);
      batch[i].demangled_name = names[i % 2];
    }
    (*recorder)->record_kernels(batch);
    names[0].assign("overwritten after the call");  // the recorder must hold its own copy
  }
  ASSERT_TRUE((*recorder)->flush().ok());
  EXPECT_EQ((*recorder)->stats().kernels_written, 100);
  ASSERT_TRUE((*recorder)->finish().ok());
  auto store = open_session(file("kernels.sqlite"));
  ASSERT_TRUE(store.ok());
  auto kernels = store->read_kernels();
  ASSERT_TRUE(kernels.ok());
  ASSERT_EQ(kernels->size(), 100u);
  EXPECT_EQ((*kernels)[0].demangled_name, "void attn<64>(float*)");
  EXPECT_EQ((*kernels)[0].short_name, "attn");
  EXPECT_EQ((*kernels)[1].short_name, "ffn");
  // 100 rows = three 32-row inserts and four single ones: every row in order, none mixed up.
  for (size_t i = 0; i < kernels->size(); ++i) {
    const KernelRow& k = (*kernels)[i];
    EXPECT_EQ(k.correlation_id, static_cast<int64_t>(i));
    EXPECT_EQ(k.start, static_cast<int64_t>(i) * 10);
    EXPECT_EQ(k.end - k.start, 5);
    EXPECT_EQ(k.short_name, i % 2 ? "ffn" : "attn") << i;
  }
}

// Regression: batches queued faster than the writer drains grow the queue; a batch copied on
// growth (instead of moved) left its kernel rows pointing at freed name strings.
TEST_F(RecorderTest, KernelNamesSurviveQueueGrowth) {
  auto recorder = record_to(file("growth.sqlite"), ObserveLevel::kSummary);
  ASSERT_TRUE(recorder.ok());
  constexpr int kBatches = 2000;
  for (int i = 0; i < kBatches; ++i) {
    const std::string name = "kernel_number_" + std::to_string(i) + "_with_a_name_longer_than_sso";
    KernelActivity k;
    k.start = 1000 + i;
    k.end = 2000 + i;
    k.demangled_name = name;
    (*recorder)->record_kernels(std::span(&k, 1));
  }
  ASSERT_TRUE((*recorder)->finish().ok());
  auto store = open_session(file("growth.sqlite"));
  ASSERT_TRUE(store.ok());
  auto kernels = store->read_kernels();
  ASSERT_TRUE(kernels.ok());
  ASSERT_EQ(kernels->size(), static_cast<size_t>(kBatches));
  for (const KernelRow& k : *kernels) {
    EXPECT_EQ(k.demangled_name, "kernel_number_" + std::to_string(k.start - 1000) + "_with_a_name_longer_than_sso");
  }
}

TEST_F(RecorderTest, FullQueueDropsInsteadOfBlocking) {
  RecorderOptions options;
  options.max_queued_items = 4;
  const std::string path = file("tiny_queue.sqlite");
  auto recorder = Recorder::create(path, options);
  ASSERT_TRUE(recorder.ok());
  // About 25 events per round against a queue of 4: the engine side must drop, never wait,
  // and what does reach the database must still be whole rounds.
  int64_t t = 0;
  for (int64_t round = 0; round < 200; ++round) emit_round_events(**recorder, round, t);
  const Status finished = (*recorder)->finish();
  ASSERT_TRUE(finished.ok()) << finished.error().message;
  const RecorderStats stats = (*recorder)->stats();
  EXPECT_GT(stats.dropped, 0);
  EXPECT_LT(stats.rounds_written, 200);
  auto store = open_session(path);
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(*store->count_rows("SPECULA_ROUNDS"), stats.rounds_written);
  // Every recorded round holds exactly the draft nodes its row announces.
  EXPECT_EQ(*store->database().query_int(
                "SELECT count(*) FROM SPECULA_ROUNDS AS r WHERE r.treeNodes != "
                "(SELECT count(*) FROM SPECULA_DRAFT_NODES AS n WHERE n.round = r.round)"),
            0);
}

TEST_F(RecorderTest, CreateFailsWithTheFileNameWhenThePathIsTaken) {
  ASSERT_TRUE(fs::create_directories(file("taken")));
  RecorderOptions options;
  auto recorder = Recorder::create(file("taken"), options);
  ASSERT_FALSE(recorder.ok());
  EXPECT_NE(recorder.error().message.find(file("taken")), std::string::npos);
}

}  // namespace
}  // namespace specula::profiler
