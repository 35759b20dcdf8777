// Drives the main window headless (QT_QPA_PLATFORM=offscreen): a run streams real text from
// the default model into the output pane; a bad model path reports an error, not a crash.
#include "ui/views/main_window.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QEventLoop>
#include <QTemporaryDir>
#include <QTimer>
#include <filesystem>

#include "engine/model/loader.h"
#include "ui/views/run_panel.h"

namespace specula::ui {
namespace {

// The QApplication lives on main()'s stack (below), so it is destroyed before static
// destructors run; a function-static one crashes at exit.
void app() { ASSERT_NE(QApplication::instance(), nullptr); }

// Runs the window until runFinished or the timeout; returns whether the run succeeded.
std::optional<bool> run_and_wait(MainWindow& window, int timeout_ms) {
  std::optional<bool> outcome;
  QEventLoop loop;
  QObject::connect(&window, &MainWindow::runFinished, &loop, [&](bool ok) { outcome = ok; loop.quit(); });
  QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
  window.startRun();
  loop.exec();
  return outcome;
}

TEST(MainWindow, StreamsGeneratedTextFromTheDefaultModel) {
  app();
  if (!std::filesystem::exists(resolve_model_path("default"))) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  MainWindow window;
  QTemporaryDir sessions;
  window.runPanel()->setSessionDirectory(sessions.path());
  window.show();
  window.setPrompt("What is the capital of France?");
  const auto outcome = run_and_wait(window, 120000);
  ASSERT_TRUE(outcome.has_value()) << "run did not finish in time";
  EXPECT_TRUE(*outcome) << window.outputText().toStdString();
  EXPECT_FALSE(window.outputText().trimmed().isEmpty());
  EXPECT_TRUE(window.outputText().contains("Paris")) << window.outputText().toStdString();
  EXPECT_FALSE(window.isRunning());
}

TEST(MainWindow, ReportsAMissingModelAsAnError) {
  app();
  MainWindow window;
  QTemporaryDir sessions;
  window.runPanel()->setSessionDirectory(sessions.path());
  window.setModelSpec("/nonexistent/model.gguf");
  window.setPrompt("hello");
  const auto outcome = run_and_wait(window, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(window.outputText().contains("/nonexistent/model.gguf")) << window.outputText().toStdString();
}

}  // namespace
}  // namespace specula::ui
