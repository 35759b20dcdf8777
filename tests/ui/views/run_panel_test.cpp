// The run panel, headless (QT_QPA_PLATFORM=offscreen): a real ngram run of the default model
// streams coloured segments and is recorded as a session; bad input fails cleanly.
#include "ui/views/run_panel.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QEventLoop>
#include <QTemporaryDir>
#include <QTimer>
#include <filesystem>
#include <fstream>

#include "engine/model/loader.h"
#include "profiler/session_store.h"

namespace specula::ui {
namespace {

std::optional<bool> run_and_wait(RunPanel& panel, int timeout_ms) {
  std::optional<bool> outcome;
  QEventLoop loop;
  QObject::connect(&panel, &RunPanel::runFinished, &loop, [&](bool ok) { outcome = ok; loop.quit(); });
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

}  // namespace
}  // namespace specula::ui
