// Evaluation as long work, headless: a run reports progress per strict/configured run and a
// summary; Cancel stops the worker at its next token, and the window stays usable (the run
// panel runs afterwards); a bad data file fails in one line.
#include "ui/views/eval_panel.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QSettings>
#include <QTemporaryDir>
#include <QTimer>
#include <cstdio>
#include <filesystem>

#include "engine/model/loader.h"
#include "ui/views/main_window.h"
#include "ui/views/run_panel.h"

namespace specula::ui {
namespace {

std::optional<bool> wait_eval(EvalPanel& panel, int timeout_ms) {
  std::optional<bool> outcome;
  QEventLoop loop;
  QObject::connect(&panel, &EvalPanel::evalFinished, &loop, [&](bool ok) { outcome = ok; loop.quit(); });
  QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
  if (!outcome) loop.exec();
  return outcome;
}

// Spins the event loop until pred() or the timeout; returns pred().
template <typename Pred>
bool wait_until(Pred pred, int timeout_ms) {
  QElapsedTimer timer;
  timer.start();
  while (!pred() && timer.elapsed() < timeout_ms) QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
  return pred();
}

const QString kGsm8k = QStringLiteral(SPECULA_SHARED_DIR "/data/gsm8k-dev.jsonl");

class EvalPanelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(resolve_model_path("default"))) GTEST_SKIP() << "skipped: default model not downloaded";
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir_.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings_dir_.path());
    QSettings().clear();
  }
  QTemporaryDir settings_dir_;
};

TEST_F(EvalPanelTest, StrictAgainstStrictAgreesFullyAndCountsEveryRun) {
  MainWindow window;
  EvalPanel* panel = window.evalPanel();
  ASSERT_NE(panel, nullptr);
  window.runPanel()->setSparsePreset("strict");
  panel->setTask("gsm8k");
  panel->setDataFile(kGsm8k);
  panel->setLimit(2);
  panel->setMaxTokens(6);
  panel->start();
  EXPECT_TRUE(panel->isRunning());
  const auto outcome = wait_eval(*panel, 120000);
  ASSERT_TRUE(outcome.has_value()) << "the evaluation did not finish";
  ASSERT_TRUE(*outcome) << panel->statusText().toStdString();
  EXPECT_EQ(panel->progressMaximum(), 4) << "two items, strict and configured";
  EXPECT_EQ(panel->progressValue(), 4);
  const EvalOutcome& o = panel->lastOutcome();
  EXPECT_EQ(o.items, 2);
  EXPECT_DOUBLE_EQ(o.token_agreement, 1.0);
  EXPECT_EQ(o.identical_outputs, 2);
  EXPECT_GT(o.strict_kv_bytes, 0);
  EXPECT_EQ(o.configured_kv_bytes, o.strict_kv_bytes);
  EXPECT_TRUE(panel->summaryText().contains("100.0% of tokens")) << panel->summaryText().toStdString();
}

TEST_F(EvalPanelTest, CancelStopsTheWorkerAndTheWindowStaysUsable) {
  QTemporaryDir sessions;
  MainWindow window;
  window.runPanel()->setSessionDirectory(sessions.path());
  EvalPanel* panel = window.evalPanel();
  panel->setTask("gsm8k");
  panel->setDataFile(kGsm8k);
  panel->setLimit(50);
  panel->setMaxTokens(256);
  panel->start();
  wait_until([&] { return panel->statusText().startsWith("Running") || !panel->isRunning(); }, 60000);
  ASSERT_TRUE(panel->statusText().startsWith("Running")) << panel->statusText().toStdString();
  QElapsedTimer timer;
  timer.start();
  panel->cancel();
  const auto outcome = wait_eval(*panel, 20000);
  ASSERT_TRUE(outcome.has_value()) << "Cancel did not stop the worker";
  EXPECT_FALSE(*outcome);
  std::printf("cancel took %lld ms\n", static_cast<long long>(timer.elapsed()));
  EXPECT_LT(timer.elapsed(), 5000) << "Cancel acts at the next token, not at the end of an item";
  EXPECT_EQ(panel->statusText(), "Cancelled.");
  EXPECT_FALSE(panel->isRunning());
  EXPECT_LT(panel->progressValue(), panel->progressMaximum());

  // The window still works: a generation run, then a second evaluation.
  window.runPanel()->setChat(false);
  window.runPanel()->setMaxTokens(4);
  window.setPrompt("Hello");
  std::optional<bool> ran;
  QEventLoop loop;
  QObject::connect(&window, &MainWindow::runFinished, &loop, [&](bool ok) { ran = ok; loop.quit(); });
  QTimer::singleShot(60000, &loop, &QEventLoop::quit);
  window.startRun();
  if (!ran) loop.exec();
  ASSERT_TRUE(ran.has_value());
  EXPECT_TRUE(*ran);
  panel->setLimit(1);
  panel->setMaxTokens(4);
  panel->start();
  const auto again = wait_eval(*panel, 60000);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(*again) << panel->statusText().toStdString();
}

TEST_F(EvalPanelTest, CancelDuringTheModelLoadIsACleanCancel) {
  MainWindow window;
  EvalPanel* panel = window.evalPanel();
  panel->setTask("gsm8k");
  panel->setDataFile(kGsm8k);
  panel->setLimit(1);
  panel->setMaxTokens(4);
  panel->start();
  panel->cancel();  // before the worker has loaded anything
  auto outcome = wait_eval(*panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_EQ(panel->statusText(), "Cancelled.");
  EXPECT_FALSE(panel->isRunning());
  EXPECT_TRUE(panel->summaryText().isEmpty());

  // Nothing stayed half-loaded: the next start loads the model and finishes.
  panel->start();
  outcome = wait_eval(*panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(*outcome) << panel->statusText().toStdString();
  EXPECT_EQ(panel->progressMaximum(), 2);
  EXPECT_EQ(panel->progressValue(), 2);
  EXPECT_EQ(panel->lastOutcome().items, 1);
}

TEST_F(EvalPanelTest, MissingDataFileFailsInOneLine) {
  MainWindow window;
  EvalPanel* panel = window.evalPanel();
  panel->setTask("specbench");
  panel->setDataFile("/nonexistent/specbench.jsonl");
  panel->start();
  const auto outcome = wait_eval(*panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(panel->statusText().startsWith("Failed: ")) << panel->statusText().toStdString();
  EXPECT_TRUE(panel->statusText().contains("/nonexistent/specbench.jsonl")) << panel->statusText().toStdString();
  EXPECT_FALSE(panel->statusText().contains('\n'));
  EXPECT_FALSE(panel->isRunning());
}

}  // namespace
}  // namespace specula::ui
