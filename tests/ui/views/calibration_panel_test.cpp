// Anchor calibration as long work, headless: Tools > Calibrate anchors... shows the panel; a tiny
// calibration of the default model writes a calibration file whose anchors the run panel then
// uses; Cancel (during the prompts, or before the worker starts) writes nothing and leaves the
// panel usable.
#include "ui/views/calibration_panel.h"

#include <gtest/gtest.h>

#include <QAction>
#include <QCoreApplication>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QTemporaryDir>
#include <QTimer>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/model/loader.h"
#include "profiler/session_store.h"
#include "ui/views/main_window.h"
#include "ui/views/run_panel.h"

namespace specula::ui {
namespace {

const QString kSpecbench = QStringLiteral(SPECULA_SHARED_DIR "/data/specbench-dev.jsonl");

std::optional<bool> wait_calibration(CalibrationPanel& panel, int timeout_ms) {
  std::optional<bool> outcome;
  QEventLoop loop;
  QObject::connect(&panel, &CalibrationPanel::calibrationFinished, &loop, [&](bool ok) {
    outcome = ok;
    loop.quit();
  });
  QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
  if (!outcome) loop.exec();
  return outcome;
}

template <typename Pred>
bool wait_until(Pred pred, int timeout_ms) {
  QElapsedTimer timer;
  timer.start();
  while (!pred() && timer.elapsed() < timeout_ms) QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
  return pred();
}

nlohmann::json read_json(const QString& path) {
  std::ifstream in(path.toStdString());
  return nlohmann::json::parse(in, nullptr, false);
}

QAction* find_action(QMenuBar* bar, const QString& text) {
  for (QAction* menu : bar->actions()) {
    if (!menu->menu()) continue;
    for (QAction* a : menu->menu()->actions()) {
      if (a->text() == text) return a;
    }
  }
  return nullptr;
}

class CalibrationPanelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(resolve_model_path("default")))
      GTEST_SKIP() << "skipped: default model not downloaded";
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir_.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings_dir_.path());
    QSettings().clear();
  }
  QTemporaryDir settings_dir_;
  QTemporaryDir work_;
};

TEST_F(CalibrationPanelTest, TinyCalibrationWritesAnchorsThatTheRunPanelUses) {
  MainWindow window;
  QAction* calibrate = find_action(window.menuBar(), QStringLiteral("&Calibrate anchors..."));
  ASSERT_NE(calibrate, nullptr);
  QDockWidget* dock = window.dock(QStringLiteral("calibrationDock"));
  ASSERT_NE(dock, nullptr);
  EXPECT_TRUE(dock->isHidden());
  calibrate->trigger();
  EXPECT_FALSE(dock->isHidden());
  CalibrationPanel* panel = window.calibrationPanel();
  ASSERT_EQ(dock->widget(), panel);

  // Two prompts of ~200 tokens, long enough that eta 0.2 drops most blocks and layers differ.
  const QString data = work_.filePath("long.jsonl");
  {
    std::ofstream jsonl(data.toStdString());
    const char* topics[] = {"river", "harbour"};
    for (int p = 0; p < 2; ++p) {
      std::string text = "Summarise this story in one line. ";
      for (int i = 0; i < 14; ++i) {
        text += "The " + std::string(topics[p]) + " " + std::to_string(i) +
                " passed the mill, the bridge and the old tower. ";
      }
      jsonl << nlohmann::json{{"question_id", p}, {"category", topics[p]}, {"turns", {text}}}.dump() << "\n";
    }
  }
  const QString out = work_.filePath("calib/anchors.json");  // the folder is made on the way
  panel->setDataFile(data);
  panel->setPromptCount(2);
  panel->setAnchors(4);
  panel->setMaxTokens(8);
  panel->setOutputFile(out);
  panel->start();
  EXPECT_TRUE(panel->isRunning());
  const auto outcome = wait_calibration(*panel, 120000);
  ASSERT_TRUE(outcome.has_value()) << "the calibration did not finish";
  ASSERT_TRUE(*outcome) << panel->statusText().toStdString();
  EXPECT_FALSE(panel->isRunning());
  EXPECT_EQ(panel->progressMaximum(), 2) << "one step per prompt";
  EXPECT_EQ(panel->progressValue(), 2);

  const nlohmann::json c = read_json(out);
  ASSERT_TRUE(c.is_object()) << "no calibration file at " << out.toStdString();
  EXPECT_EQ(c["kind"], "specula sparse calibration");
  ASSERT_EQ(c["anchors"].size(), 4u);
  EXPECT_EQ(c["anchors"][0], 0);
  EXPECT_EQ(c["jaccard_prev"].size(), 30u);
  EXPECT_EQ(c["settings"]["prompts"], 2);
  EXPECT_EQ(c["settings"]["max_tokens"], 8);
  EXPECT_EQ(c["settings"]["data"], data.toStdString());
  // The anchors are layer 0 and the three layers least like the layer before them.
  const auto jaccard = c["jaccard_prev"].get<std::vector<double>>();
  std::vector<int> by_similarity;
  for (int l = 1; l < 30; ++l) by_similarity.push_back(l);
  std::stable_sort(by_similarity.begin(), by_similarity.end(), [&](int a, int b) { return jaccard[a] < jaccard[b]; });
  EXPECT_LT(jaccard[static_cast<size_t>(by_similarity[0])], 1.0)
      << "some layer selects other blocks than its predecessor";
  for (int l = 1; l < 30; ++l) {
    EXPECT_GE(jaccard[static_cast<size_t>(l)], 0.0);
    EXPECT_LE(jaccard[static_cast<size_t>(l)], 1.0);
  }
  std::vector<int> expected_anchors = {0, by_similarity[0], by_similarity[1], by_similarity[2]};
  std::sort(expected_anchors.begin(), expected_anchors.end());
  EXPECT_EQ(c["anchors"].get<std::vector<int>>(), expected_anchors);
  QList<int> expected;
  for (const auto& a : c["anchors"]) expected << a.get<int>();
  EXPECT_EQ(panel->anchors(), expected);
  EXPECT_EQ(panel->calibrationFile(), out);
  std::printf("anchors: %s, jaccard_prev: %s\n", c["anchors"].dump().c_str(), c["jaccard_prev"].dump().c_str());

  // Offered to the run panel as a sparse config naming the file; a run there uses these anchors.
  ASSERT_TRUE(panel->useInRunPanel());
  RunPanel* run = window.runPanel();
  const QString config = run->sparseConfigFile();
  ASSERT_FALSE(config.isEmpty());
  const nlohmann::json sparse = read_json(config);
  EXPECT_EQ(sparse["preset"], "sa-reuse");
  EXPECT_EQ(sparse["calibration"], std::filesystem::absolute(out.toStdString()).string());

  run->setSessionDirectory(work_.filePath("sessions"));
  run->setChat(false);
  run->setMaxTokens(4);
  run->setPrompt("one two three one two three one two three");
  std::optional<bool> ran;
  QEventLoop loop;
  QObject::connect(run, &RunPanel::runFinished, &loop, [&](bool ok) {
    ran = ok;
    loop.quit();
  });
  QTimer::singleShot(60000, &loop, &QEventLoop::quit);
  run->startRun();
  if (!ran) loop.exec();
  ASSERT_TRUE(ran.has_value());
  ASSERT_TRUE(*ran) << run->lastError().toStdString();
  auto store = profiler::SessionStore::open(run->lastSessionPath().toStdString());
  ASSERT_TRUE(store) << store.error().message;
  auto info = store->read_session();
  ASSERT_TRUE(info);
  const nlohmann::json recorded = nlohmann::json::parse(info->config_json);
  EXPECT_EQ(recorded["sparse"]["anchors"], c["anchors"]) << info->config_json;
}

TEST_F(CalibrationPanelTest, CancelWritesNothingAndLeavesThePanelUsable) {
  RunPanel run_panel;
  CalibrationPanel panel(&run_panel);
  const QString out = work_.filePath("cancelled.json");
  panel.setDataFile(kSpecbench);
  panel.setPromptCount(3);
  panel.setAnchors(4);
  panel.setMaxTokens(64);
  panel.setOutputFile(out);

  // Cancel while the prompts run: once the first of three is done.
  panel.start();
  ASSERT_TRUE(wait_until(
      [&] { return (panel.progressMaximum() == 3 && panel.progressValue() >= 1) || !panel.isRunning(); }, 120000));
  ASSERT_TRUE(panel.isRunning()) << panel.statusText().toStdString();
  QElapsedTimer timer;
  timer.start();
  panel.cancel();
  auto outcome = wait_calibration(panel, 30000);
  ASSERT_TRUE(outcome.has_value()) << "Cancel did not stop the worker";
  EXPECT_FALSE(*outcome);
  std::printf("cancel took %lld ms\n", static_cast<long long>(timer.elapsed()));
  EXPECT_LT(timer.elapsed(), 5000) << "Cancel acts at the next token, not at the end of the calibration";
  EXPECT_TRUE(panel.statusText().startsWith("Cancelled")) << panel.statusText().toStdString();
  EXPECT_FALSE(panel.isRunning());
  EXPECT_LT(panel.progressValue(), 3);
  EXPECT_FALSE(QFileInfo::exists(out));
  EXPECT_TRUE(panel.calibrationFile().isEmpty());
  EXPECT_TRUE(run_panel.lastError().isEmpty()) << "a cancel is not an error";

  // Cancel before the worker picks the job up: the same clean state.
  panel.start();
  panel.cancel();
  outcome = wait_calibration(panel, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(panel.statusText().startsWith("Cancelled")) << panel.statusText().toStdString();
  EXPECT_FALSE(QFileInfo::exists(out));
}

TEST_F(CalibrationPanelTest, BadPromptsFileGoesToTheRunPanelsErrorDialog) {
  RunPanel run_panel;
  CalibrationPanel panel(&run_panel);
  panel.setDataFile(work_.filePath("missing.jsonl"));
  panel.setOutputFile(work_.filePath("never.json"));
  panel.start();
  const auto outcome = wait_calibration(panel, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(run_panel.lastError().contains("missing.jsonl")) << run_panel.lastError().toStdString();
  EXPECT_TRUE(panel.statusText().startsWith("Failed: ")) << panel.statusText().toStdString();
  EXPECT_FALSE(panel.isRunning());
  auto* dialog = run_panel.findChild<QMessageBox*>(QStringLiteral("runErrorDialog"));
  ASSERT_NE(dialog, nullptr);
  EXPECT_TRUE(dialog->isVisible());
  EXPECT_FALSE(dialog->isModal());
  EXPECT_EQ(dialog->windowTitle(), "Calibration failed");
  EXPECT_EQ(dialog->text(), run_panel.lastError());
}

}  // namespace
}  // namespace specula::ui
