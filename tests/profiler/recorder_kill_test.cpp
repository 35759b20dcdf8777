// A recording killed with SIGKILL keeps every round that finished: the child records rounds,
// tells the parent through a pipe which rounds are committed, and kills itself mid-round.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "profiler/recorder.h"
#include "synthetic_session.h"

namespace specula::profiler {
namespace {

namespace fs = std::filesystem;
using namespace specula::testing;

class RecorderKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("specula_kill_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// In the child: never returns. Writes the number of committed rounds to `report` after each
// flush (int64 per write).
[[noreturn]] void record_then_die(const std::string& path, int report, int64_t rounds_before_kill,
                                  int64_t flush_every, bool kill_mid_round) {
  auto recorder = record_to(path, ObserveLevel::kFull);
  if (!recorder.ok()) _exit(3);
  Recorder& r = **recorder;
  int64_t t = 0;
  emit_session_start(r, t);
  for (int64_t round = 0; round < rounds_before_kill; ++round) {
    emit_round_events(r, round, t);
    if ((round + 1) % flush_every == 0) {
      if (!r.flush().ok()) _exit(4);
      const int64_t committed = r.stats().rounds_written;
      if (::write(report, &committed, sizeof committed) != sizeof committed) _exit(5);
    }
  }
  if (kill_mid_round) {
    // Round N is in flight: begun, drafted, verified, but not ended.
    emit_round_events(r, rounds_before_kill, t, /*end_round=*/false);
    (void)r.flush();
  }
  ::raise(SIGKILL);
  _exit(6);  // unreachable
}

struct ChildResult {
  int64_t last_reported = -1;
  bool killed = false;
};

ChildResult run_child(const std::string& path, int64_t rounds, int64_t flush_every, bool kill_mid_round) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    record_then_die(path, fds[1], rounds, flush_every, kill_mid_round);
  }
  ::close(fds[1]);
  ChildResult result;
  int64_t value = 0;
  while (::read(fds[0], &value, sizeof value) == sizeof value) result.last_reported = value;
  ::close(fds[0]);
  int wstatus = 0;
  EXPECT_EQ(::waitpid(pid, &wstatus, 0), pid);
  result.killed = WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL;
  if (WIFEXITED(wstatus)) ADD_FAILURE() << "child exited with status " << WEXITSTATUS(wstatus);
  return result;
}

void expect_whole_rounds(SessionStore& store, int64_t expected_rounds) {
  auto rounds = store.read_rounds();
  ASSERT_TRUE(rounds.ok()) << rounds.error().message;
  ASSERT_EQ(static_cast<int64_t>(rounds->size()), expected_rounds);
  for (int64_t i = 0; i < expected_rounds; ++i) {
    const RoundRow& r = (*rounds)[static_cast<size_t>(i)];
    ASSERT_EQ(r.round, i) << "rounds must be a gap-free prefix";
    EXPECT_EQ(r.tree_nodes, synthetic_tree_nodes(i));
    auto nodes = store.read_draft_nodes(i);
    ASSERT_TRUE(nodes.ok());
    EXPECT_EQ(static_cast<int64_t>(nodes->size()), synthetic_tree_nodes(i)) << "round " << i;
    auto selections = store.read_layer_selections(i);
    ASSERT_TRUE(selections.ok());
    EXPECT_EQ(static_cast<int>(selections->size()), 2 * kSyntheticLayers) << "round " << i;
  }
}

TEST_F(RecorderKillTest, EveryFinishedRoundSurvivesAKillMidRound) {
  const std::string path = (dir_ / "killed.sqlite").string();
  constexpr int64_t kRounds = 25;
  const ChildResult child = run_child(path, kRounds, /*flush_every=*/1, /*kill_mid_round=*/true);
  ASSERT_TRUE(child.killed);
  ASSERT_EQ(child.last_reported, kRounds);
  ASSERT_TRUE(fs::exists(path + "-wal")) << "the killed writer leaves its log behind";

  // Reopening recovers from the WAL; read-write first (as the CLI would to check it), then read-only.
  {
    auto store = SessionStore::open(path, OpenMode::kReadWrite);
    ASSERT_TRUE(store.ok()) << store.error().message;
    expect_whole_rounds(*store, kRounds);
    EXPECT_EQ(*store->database().query_int("SELECT count(*) FROM SPECULA_DRAFT_NODES WHERE round = 25"), 0)
        << "the round in flight is not recorded";
    auto info = store->read_session();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->status, "recording") << "a killed session says it never finished";
  }
  auto read_only = open_session(path);
  ASSERT_TRUE(read_only.ok()) << read_only.error().message;
  expect_whole_rounds(*read_only, kRounds);
}

TEST_F(RecorderKillTest, AKillAtAnArbitraryMomentLeavesAGapFreePrefixOfWholeRounds) {
  const std::string path = (dir_ / "storm.sqlite").string();
  // No kill_mid_round: the child dies right after queueing 450 rounds, while the writer is
  // somewhere inside its backlog of the last 50, quite possibly inside a transaction.
  constexpr int64_t kRounds = 450;
  const ChildResult child = run_child(path, kRounds, /*flush_every=*/100, /*kill_mid_round=*/false);
  ASSERT_TRUE(child.killed);
  ASSERT_EQ(child.last_reported, 400);
  auto store = open_session(path);
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto count = store->count_rows("SPECULA_ROUNDS");
  ASSERT_TRUE(count.ok());
  RecordProperty("rounds_recovered", static_cast<int>(*count));
  EXPECT_GE(*count, child.last_reported) << "rounds reported committed must be there";
  EXPECT_LE(*count, kRounds);
  expect_whole_rounds(*store, *count);
}

}  // namespace
}  // namespace specula::profiler
