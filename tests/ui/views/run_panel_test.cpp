// The run panel, headless (QT_QPA_PLATFORM=offscreen): a real ngram run of the default model
// streams coloured segments and is recorded as a session; sparse presets and config files reach
// the engine (KV traffic against dense); bad input and engine errors fail cleanly in a
// non-modal dialog and the panel runs again afterwards.
#include "ui/views/run_panel.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QEventLoop>
#include <QMessageBox>
#include <QTemporaryDir>
#include <QTimer>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/backend/cuda_backend.h"
#include "engine/model/loader.h"
#include "profiler/session_store.h"

namespace specula::ui {
namespace {

std::optional<bool> run_and_wait(RunPanel& panel, int timeout_ms) {
  std::optional<bool> outcome;
  QEventLoop loop;
  QObject::connect(&panel, &RunPanel::runFinished, &loop, [&](bool ok) {
    outcome = ok;
    loop.quit();
  });
  QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
  panel.startRun();
  if (!outcome) loop.exec();
  return outcome;
}

TEST(RunPanel, NgramRunIsColouredByRoundAndRecorded) {
  if (!std::filesystem::exists(resolve_model_path("default"))) GTEST_SKIP() << "skipped: default model not downloaded";
  QTemporaryDir dir;
  RunPanel panel;
  panel.setSessionDirectory(dir.path());
  panel.setDrafter("ngram");
  panel.setTree("chain:4");
  panel.setChat(false);
  panel.setMaxTokens(40);
  panel.setPrompt("one two three four five one two three four five one two three four five one two");
  QString recorded;
  QObject::connect(&panel, &RunPanel::sessionRecorded, [&](const QString& path) { recorded = path; });
  const auto outcome = run_and_wait(panel, 120000);
  ASSERT_TRUE(outcome.has_value()) << "run did not finish in time";
  ASSERT_TRUE(*outcome);
  const QVector<int> by_kind = panel.charactersByKind();
  EXPECT_GT(by_kind[static_cast<int>(TokenKind::kAcceptedDraft)], 0) << "the repetition should be drafted";
  int total = 0;
  for (int n : by_kind) total += n;
  EXPECT_EQ(total, panel.outputText().size());
  EXPECT_GT(panel.meanAcceptedLength(), 1.0);

  ASSERT_FALSE(recorded.isEmpty());
  EXPECT_EQ(recorded, panel.lastSessionPath());
  auto store = profiler::SessionStore::open(recorded.toStdString());
  ASSERT_TRUE(store) << store.error().message;
  auto rounds = store->read_rounds();
  ASSERT_TRUE(rounds);
  EXPECT_FALSE(rounds->empty());
  auto info = store->read_session();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, "finished");
  EXPECT_NE(info->config_json.find("\"drafter\":\"ngram\""), std::string::npos) << info->config_json;
}

TEST(RunPanel, BuiltInLibraryAndBadPromptFiles) {
  RunPanel panel;
  const int builtin = panel.promptCount();
  EXPECT_GE(builtin, 8);
  QTemporaryDir dir;
  const QString bad = dir.filePath("bad.jsonl");
  std::ofstream(bad.toStdString()) << "{\"question_id\": 1, \"turns\": [\"ok\"]}\nnot json\n";
  EXPECT_FALSE(panel.openPromptFile(bad));
  EXPECT_EQ(panel.promptCount(), builtin) << "a bad file adds nothing";
  EXPECT_TRUE(panel.openPromptFile(QString(SPECULA_SHARED_DIR) + "/data/specbench-dev.jsonl"));
  EXPECT_EQ(panel.promptCount(), builtin + 240);
}

TEST(RunPanel, MissingModelAndBadTreeFailCleanly) {
  QTemporaryDir dir;
  RunPanel panel;
  panel.setSessionDirectory(dir.path());
  panel.setPrompt("hello");
  panel.setModelSpec("/nonexistent/model.gguf");
  auto outcome = run_and_wait(panel, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  panel.setModelSpec("default");
  panel.setDrafter("ngram");
  panel.setTree("chain:zero");
  outcome = run_and_wait(panel, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_FALSE(panel.isRunning());
}

bool have_default_model() { return std::filesystem::exists(resolve_model_path("default")); }

// ~170 prompt tokens, so a config with a small L_b drops blocks in every verify forward.
QString long_prompt() {
  QString text;
  for (int i = 0; i < 16; ++i) text += QStringLiteral("The river %1 runs past the old mill and the bridge. ").arg(i);
  return text;
}

QMessageBox* error_dialog(RunPanel& panel) { return panel.findChild<QMessageBox*>(QStringLiteral("runErrorDialog")); }

TEST(RunPanel, SparseConfigReadsLessKvThanStrictAndIsRecorded) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  QTemporaryDir dir;
  RunPanel panel;
  panel.setSessionDirectory(dir.path());
  panel.setDrafter("ngram");
  panel.setChat(false);
  panel.setMaxTokens(12);
  panel.setPrompt(long_prompt());
  EXPECT_EQ(RunPanel::sparsePresets(),
            QStringList({"strict", "sa", "sa-reuse", "sffn", "smoe", "hybrid", "ssv-exact", "ssv-approx"}));

  panel.setSparsePreset("strict");
  auto outcome = run_and_wait(panel, 120000);
  ASSERT_TRUE(outcome.has_value() && *outcome) << panel.lastError().toStdString();
  EXPECT_GT(panel.kvBytesDense(), 0);
  EXPECT_EQ(panel.kvBytesRead(), panel.kvBytesDense()) << "strict reads every committed row";
  EXPECT_TRUE(panel.countersText().contains("(100.0%)")) << panel.countersText().toStdString();

  const QString config = dir.filePath("sa.json");
  std::ofstream(config.toStdString()) << R"({"preset": "sa", "dense_below": 32, "eta": 0.1})";
  panel.setSparseConfigFile(config);
  outcome = run_and_wait(panel, 120000);
  ASSERT_TRUE(outcome.has_value() && *outcome) << panel.lastError().toStdString();
  ASSERT_GT(panel.kvBytesDense(), 0);
  EXPECT_LT(panel.kvBytesRead(), panel.kvBytesDense() * 3 / 4) << "SA with L_b 32 and eta 0.1 drops most blocks";
  EXPECT_GT(panel.kvBytesRead(), 0);
  std::printf("sa (L_b 32, eta 0.1): KV read %lld of %lld bytes dense\n", static_cast<long long>(panel.kvBytesRead()),
              static_cast<long long>(panel.kvBytesDense()));
  auto store = profiler::SessionStore::open(panel.lastSessionPath().toStdString());
  ASSERT_TRUE(store) << store.error().message;
  auto info = store->read_session();
  ASSERT_TRUE(info);
  EXPECT_NE(info->config_json.find(R"("preset":"sa")"), std::string::npos) << info->config_json;
  EXPECT_NE(info->config_json.find(R"("dense_below":32)"), std::string::npos) << info->config_json;
}

TEST(RunPanel, KvCounterUpdatesEveryRoundWhileTheRunGoes) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  QTemporaryDir dir;
  RunPanel panel;
  panel.setSessionDirectory(dir.path());
  panel.setDrafter("ngram");
  panel.setChat(false);
  panel.setMaxTokens(16);
  panel.setPrompt(long_prompt());
  const QString config = dir.filePath("sa.json");
  std::ofstream(config.toStdString()) << R"({"preset": "sa", "dense_below": 32, "eta": 0.1})";
  panel.setSparseConfigFile(config);
  struct Update {
    qint64 read, dense;
    bool running;
    QString counters;
  };
  std::vector<Update> updates;
  int rounds_seen = 0;
  QObject::connect(&panel, &RunPanel::kvTrafficChanged, [&](qint64 read, qint64 dense) {
    updates.push_back({read, dense, panel.isRunning(), panel.countersText()});
    EXPECT_EQ(panel.kvBytesRead(), read);
    EXPECT_EQ(panel.kvBytesDense(), dense);
  });
  QObject::connect(&panel, &RunPanel::runFinished, [&] { rounds_seen = static_cast<int>(updates.size()); });
  const auto outcome = run_and_wait(panel, 120000);
  ASSERT_TRUE(outcome.has_value() && *outcome) << panel.lastError().toStdString();
  // One update per round, then the run's totals once more just before it finishes.
  ASSERT_GE(rounds_seen, 3) << "several rounds, each updating the counter";
  ASSERT_EQ(static_cast<int>(updates.size()), rounds_seen);
  for (size_t i = 0; i + 1 < updates.size(); ++i) {
    EXPECT_TRUE(updates[i].running) << "update " << i << " came while the run was going";
    EXPECT_TRUE(updates[i].counters.contains("KV read")) << updates[i].counters.toStdString();
    EXPECT_LE(updates[i].read, updates[i + 1].read);
    if (i + 2 < updates.size()) {
      EXPECT_LT(updates[i].dense, updates[i + 1].dense) << "every round reads the committed KV";
    }
  }
  const Update& last = updates.back();
  const Update& before_last = updates[updates.size() - 2];
  EXPECT_EQ(last.read, before_last.read) << "the totals equal the sum of the rounds";
  EXPECT_EQ(last.dense, before_last.dense);
  EXPECT_LT(last.read, last.dense) << "SA drops blocks";
  EXPECT_EQ(panel.kvBytesRead(), last.read);
  EXPECT_EQ(panel.kvBytesDense(), last.dense);
  EXPECT_LT(updates.front().dense, last.dense) << "the first update is one round, not the run";
  EXPECT_TRUE(panel.countersText().contains("KV read")) << panel.countersText().toStdString();
  auto store = profiler::SessionStore::open(panel.lastSessionPath().toStdString());
  ASSERT_TRUE(store) << store.error().message;
  auto rounds = store->read_rounds();
  ASSERT_TRUE(rounds);
  EXPECT_EQ(updates.size(), rounds->size() + 1) << "one update per recorded round, plus the totals";
}

// A 4-token plain run of "Hello there" without the chat template, its session kept in dir.
void short_plain_run(RunPanel& panel, const QTemporaryDir& dir) {
  panel.setSessionDirectory(dir.path());
  panel.setChat(false);
  panel.setMaxTokens(4);
  panel.setPrompt("Hello there");
}

TEST(RunPanel, EngineRefusalsShowTheEngineErrorAndThePanelRunsAgain) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  QTemporaryDir dir;
  RunPanel panel;
  short_plain_run(panel, dir);

  panel.setSparsePreset("smoe");  // the default model is dense
  auto outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(panel.lastError().contains("no MoE layers")) << panel.lastError().toStdString();
  QMessageBox* dialog = error_dialog(panel);
  ASSERT_NE(dialog, nullptr);
  EXPECT_TRUE(dialog->isVisible());
  EXPECT_FALSE(dialog->isModal());
  EXPECT_EQ(dialog->text(), panel.lastError());

  const QString bad = dir.filePath("bad.json");
  std::ofstream(bad.toStdString()) << R"({"preset": "sa", "etaa": 0.1})";
  panel.setSparseConfigFile(bad);
  outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(panel.lastError().contains("unknown key 'etaa'")) << panel.lastError().toStdString();
  EXPECT_EQ(error_dialog(panel), dialog) << "one dialog, updated";
  EXPECT_EQ(dialog->text(), panel.lastError());

  panel.setSparseConfigFile(QString());
  panel.setSparsePreset("sffn");
  outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(*outcome) << panel.lastError().toStdString();
  EXPECT_TRUE(panel.lastError().isEmpty());
}

// The backend choice: cuda on a machine without a GPU is an error in the panel's dialog, not a
// crash, and the same loaded model then runs on the CPU (auto resolves to it here).
TEST(RunPanel, CudaWithoutAGpuIsAnErrorAndAutoRunsOnTheCpu) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  if (cuda_gpu_available()) GTEST_SKIP() << "a GPU is present: the cuda choice would run (the GPU tests cover it)";
  QTemporaryDir dir;
  RunPanel panel;
  short_plain_run(panel, dir);
  EXPECT_EQ(panel.backend(), "auto");
  panel.setBackend("cuda");
  auto outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(panel.lastError().startsWith("Backend cuda:")) << panel.lastError().toStdString();
  EXPECT_TRUE(panel.lastError().contains("CUDA")) << panel.lastError().toStdString();
  QMessageBox* dialog = error_dialog(panel);
  ASSERT_NE(dialog, nullptr);
  EXPECT_EQ(dialog->text(), panel.lastError());

  panel.setBackend("auto");
  outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(*outcome) << panel.lastError().toStdString();
  EXPECT_TRUE(panel.lastError().isEmpty());
}

TEST(RunPanel, CancellingTheModelLoadLeavesNothingLoadedAndThePanelRunsAgain) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  QTemporaryDir dir;
  RunPanel panel;
  short_plain_run(panel, dir);
  std::vector<int> shown;  // what the load bar showed, in order
  QObject::connect(&panel, &RunPanel::modelLoadProgress, [&](int permille) {
    shown.push_back(permille);
    EXPECT_TRUE(panel.isLoadBarVisible());
    EXPECT_EQ(panel.loadProgressValue(), permille);
  });
  // Cancel from inside the load, on the worker thread, once a third of the bytes are read.
  bool cancelled_in_load = false;
  const auto connection = QObject::connect(
      panel.worker(), &GenerationWorker::loadProgress, panel.worker(),
      [&](int permille) {
        if (permille >= 333 && !cancelled_in_load) {
          cancelled_in_load = true;
          panel.worker()->requestStop();
        }
      },
      Qt::DirectConnection);
  auto outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value()) << "the cancelled load did not end the run";
  EXPECT_FALSE(*outcome);
  QObject::disconnect(connection);
  EXPECT_TRUE(cancelled_in_load);
  ASSERT_FALSE(shown.empty());
  EXPECT_LT(shown.back(), 1000) << "the load stopped before its end";
  EXPECT_TRUE(panel.loadedModel().isEmpty());
  EXPECT_TRUE(panel.lastError().isEmpty()) << "a cancel is not an error";
  EXPECT_EQ(error_dialog(panel), nullptr);
  EXPECT_TRUE(panel.countersText().contains("cancelled")) << panel.countersText().toStdString();
  EXPECT_FALSE(panel.isRunning());
  EXPECT_FALSE(panel.isLoadBarVisible());
  EXPECT_TRUE(panel.outputText().isEmpty());

  // Stop pressed before the worker even starts the run counts too.
  panel.startRun();
  panel.stopRun();
  outcome = run_and_wait(panel, 60000);  // the queued run; startRun is a no-op while running
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(panel.loadedModel().isEmpty());
  EXPECT_TRUE(panel.countersText().contains("cancelled")) << panel.countersText().toStdString();

  // The next run loads the model fully and generates.
  shown.clear();
  outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(*outcome) << panel.lastError().toStdString();
  EXPECT_EQ(panel.loadedModel(), "default");
  ASSERT_FALSE(shown.empty());
  EXPECT_EQ(shown.back(), 1000);
  EXPECT_TRUE(std::is_sorted(shown.begin(), shown.end()));
  EXPECT_FALSE(panel.isLoadBarVisible());
  EXPECT_FALSE(panel.outputText().isEmpty());
}

TEST(RunPanel, CorruptModelFileRaisesADialogAndTheDefaultModelStillRuns) {
  QTemporaryDir dir;
  const QString corrupt = dir.filePath("corrupt.gguf");
  {
    std::ofstream out(corrupt.toStdString(), std::ios::binary);
    out << "GGUF";  // the magic, then garbage where the version and counts belong
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 131) & 0xff));
  }
  RunPanel panel;
  short_plain_run(panel, dir);
  panel.setModelSpec(corrupt);
  auto outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value()) << "a corrupt model must not hang the worker";
  EXPECT_FALSE(*outcome);
  EXPECT_FALSE(panel.lastError().isEmpty());
  QMessageBox* dialog = error_dialog(panel);
  ASSERT_NE(dialog, nullptr);
  EXPECT_TRUE(dialog->isVisible());
  EXPECT_FALSE(panel.isRunning());
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  panel.setModelSpec("default");
  outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(*outcome) << panel.lastError().toStdString();
}

// The head drafters: the shipped head is offered, a run without a head file or on the cuda
// backend is refused with a message, and ngram+head runs on the CPU and is recorded as such.
TEST(RunPanel, HeadDraftersNeedAHeadFileAndRunOnTheCpu) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  QTemporaryDir dir;
  RunPanel panel;
  panel.setSessionDirectory(dir.path());
  panel.setMaxTokens(32);
  panel.setPrompt("Repeat after me: one two three four five, one two three four five, one two three");
  const QString shipped = panel.draftHeadFile();
  ASSERT_FALSE(shipped.isEmpty()) << "the head shipped in resources/draft_heads should be offered";

  panel.setDrafter("head");
  panel.setDraftHeadFile(QString());
  auto outcome = run_and_wait(panel, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_FALSE(panel.isRunning());

  panel.setDraftHeadFile(shipped);
  panel.setBackend("cuda");
  outcome = run_and_wait(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_NE(panel.lastError().indexOf("CPU backend"), -1) << panel.lastError().toStdString();

  panel.setBackend("auto");
  panel.setDrafter("ngram+head");
  QString recorded;
  QObject::connect(&panel, &RunPanel::sessionRecorded, [&](const QString& path) { recorded = path; });
  outcome = run_and_wait(panel, 120000);
  ASSERT_TRUE(outcome.has_value()) << "run did not finish in time";
  ASSERT_TRUE(*outcome) << panel.lastError().toStdString();
  ASSERT_FALSE(recorded.isEmpty());
  auto store = profiler::SessionStore::open(recorded.toStdString());
  ASSERT_TRUE(store) << store.error().message;
  auto info = store->read_session();
  ASSERT_TRUE(info);
  EXPECT_NE(info->config_json.find("\"drafter\":\"ngram+head\""), std::string::npos) << info->config_json;
  EXPECT_NE(info->config_json.find("\"backend\":\"cpu\""), std::string::npos) << info->config_json;
}

}  // namespace
}  // namespace specula::ui
