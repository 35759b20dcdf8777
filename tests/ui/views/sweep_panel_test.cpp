// The profiling sweep as long work, headless: Tools > Profile sweep... shows the dock; a tiny
// sweep (two configurations, a short prompt, few tokens) of the default model gives two rows
// whose figures agree with the sessions it recorded, and the sessions open and compare in the
// main window; Cancel mid-sweep stops within a second, deletes the interrupted run's session and
// leaves the dock usable; a bad tree shape or a missing model goes to the run panel's dialog.
#include "ui/views/sweep_panel.h"

#include <gtest/gtest.h>

#include <QAction>
#include <QApplication>
#include <QCoreApplication>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/model/loader.h"
#include "profiler/session_store.h"
#include "ui/models/session_document.h"
#include "ui/views/compare_window.h"
#include "ui/views/main_window.h"
#include "ui/views/run_panel.h"

namespace specula::ui {
namespace {

std::optional<bool> wait_sweep(SweepPanel& panel, int timeout_ms) {
  std::optional<bool> outcome;
  QEventLoop loop;
  QObject::connect(&panel, &SweepPanel::sweepFinished, &loop, [&](bool ok) {
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
  while (!pred() && timer.elapsed() < timeout_ms) QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
  return pred();
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

QStringList sessions_in(const QString& dir) {
  return QDir(dir).entryList({QStringLiteral("*.sqlite")}, QDir::Files, QDir::Name);
}

class SweepPanelTest : public ::testing::Test {
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

TEST_F(SweepPanelTest, TinySweepGivesTwoRowsWhoseSessionsOpenAndCompare) {
  MainWindow window;
  QAction* action = find_action(window.menuBar(), QStringLiteral("&Profile sweep..."));
  ASSERT_NE(action, nullptr);
  QDockWidget* dock = window.dock(QStringLiteral("sweepDock"));
  ASSERT_NE(dock, nullptr);
  EXPECT_TRUE(dock->isHidden());
  action->trigger();
  EXPECT_FALSE(dock->isHidden());
  SweepPanel* panel = window.sweepPanel();
  ASSERT_EQ(dock->widget(), panel);

  RunPanel* run = window.runPanel();
  const QString sessions = work_.filePath("sessions");
  run->setSessionDirectory(sessions);
  run->setDrafter("ngram");
  run->setPrompt("one two three four one two three four one two three four");
  panel->takeRunPanelPrompt();
  EXPECT_EQ(panel->prompt(), run->prompt());
  panel->setChat(false);
  panel->setMaxTokens(12);
  panel->setPresets({"strict", "sa"});
  panel->setTreeShapes({"chain:3"});  // not listed by default: added and ticked
  const QList<SweepConfig> configs = panel->configurations();
  ASSERT_EQ(configs.size(), 2);
  EXPECT_EQ(configs[0].label(), "strict / chain:3");
  EXPECT_EQ(configs[1].label(), "sa / chain:3");

  panel->start();
  EXPECT_TRUE(panel->isRunning());
  const auto outcome = wait_sweep(*panel, 120000);
  ASSERT_TRUE(outcome.has_value()) << "the sweep did not finish";
  ASSERT_TRUE(*outcome) << panel->statusText().toStdString();
  EXPECT_FALSE(panel->isRunning());
  EXPECT_EQ(panel->progressMaximum(), 2) << "one step per run";
  EXPECT_EQ(panel->progressValue(), 2);
  EXPECT_TRUE(run->lastError().isEmpty()) << run->lastError().toStdString();

  const QList<SweepRow> rows = panel->rows();
  ASSERT_EQ(rows.size(), 2);
  ASSERT_EQ(panel->table()->rowCount(), 2);
  EXPECT_EQ(sessions_in(sessions).size(), 2);
  for (int i = 0; i < 2; ++i) {
    const SweepRow& row = rows[i];
    std::printf("%s: %.1f tok/s, accepted %.2f, KV %lld of %lld bytes, %d tokens, %s\n",
                row.config.toStdString().c_str(), row.tokens_per_s, row.mean_accepted_length,
                static_cast<long long>(row.kv_bytes_read), static_cast<long long>(row.kv_bytes_dense), row.tokens,
                row.session_path.toStdString().c_str());
    EXPECT_EQ(row.config, configs[i].label());
    EXPECT_EQ(panel->table()->item(i, 0)->text(), row.config);
    EXPECT_EQ(panel->table()->item(i, 4)->text(), QFileInfo(row.session_path).fileName());
    EXPECT_GT(row.tokens_per_s, 1.0);
    EXPECT_LT(row.tokens_per_s, 1e5);
    EXPECT_GE(row.mean_accepted_length, 1.0);
    EXPECT_LE(row.mean_accepted_length, 4.0) << "chain:3 accepts at most 3 drafts + 1";
    EXPECT_GT(row.kv_bytes_dense, 0);
    EXPECT_GT(row.kv_bytes_read, 0);
    EXPECT_LE(row.kv_bytes_read, row.kv_bytes_dense);
    EXPECT_GT(row.tokens, 0);
    EXPECT_LE(row.tokens, 12);
    EXPECT_EQ(QFileInfo(row.session_path).absolutePath(), QFileInfo(sessions).absoluteFilePath());

    // The session holds this run: its configuration and the same rounds' KV traffic.
    auto store = profiler::SessionStore::open(row.session_path.toStdString());
    ASSERT_TRUE(store) << store.error().message;
    auto info = store->read_session();
    ASSERT_TRUE(info);
    const nlohmann::json config = nlohmann::json::parse(info->config_json);
    EXPECT_EQ(config["command"], "gui-sweep");
    EXPECT_EQ(config["sweep_config"], row.config.toStdString());
    EXPECT_EQ(config["tree"], "chain:3");
    EXPECT_EQ(config["max_tokens"], 12);
    EXPECT_EQ(config["sparse"]["preset"], configs[i].sparse.toStdString()) << info->config_json;
  }
  // Dense verification reads every committed row, and so does the SA preset on a context this
  // short (below its L_b of 1024 tokens; the run panel's test covers SA dropping blocks).
  EXPECT_EQ(rows[0].kv_bytes_read, rows[0].kv_bytes_dense);
  EXPECT_EQ(rows[1].kv_bytes_read, rows[1].kv_bytes_dense);
  EXPECT_TRUE(panel->table()->item(0, 3)->text().endsWith("(100.0%)"))
      << panel->table()->item(0, 3)->text().toStdString();

  // A double-click opens the row's session in the main window.
  emit panel->table()->cellDoubleClicked(1, 0);
  ASSERT_TRUE(window.document()->isOpen());
  EXPECT_EQ(QFileInfo(window.document()->path()).canonicalFilePath(),
            QFileInfo(rows[1].session_path).canonicalFilePath());
  EXPECT_GT(window.document()->data()->rounds.size(), 0u);

  // Two selected rows compare side by side.
  EXPECT_FALSE(panel->compareSelected()) << "nothing is selected yet";
  panel->table()->selectRow(0);
  EXPECT_FALSE(panel->compareSelected());
  panel->table()->setSelectionMode(QAbstractItemView::MultiSelection);
  panel->table()->selectRow(1);
  ASSERT_EQ(panel->table()->selectionModel()->selectedRows().size(), 2);
  const auto before = QApplication::topLevelWidgets();
  ASSERT_TRUE(panel->compareSelected());
  CompareWindow* compare = nullptr;
  for (QWidget* w : QApplication::topLevelWidgets()) {
    if (!before.contains(w)) compare = qobject_cast<CompareWindow*>(w);
  }
  ASSERT_NE(compare, nullptr) << "Compare opened no comparison window";
  EXPECT_EQ(QFileInfo(window.document()->path()).canonicalFilePath(),
            QFileInfo(rows[0].session_path).canonicalFilePath());
  compare->close();
}

TEST_F(SweepPanelTest, CancelMidSweepStopsWithinASecondAndLeavesTheDockUsable) {
  RunPanel run_panel;
  const QString sessions = work_.filePath("sessions");
  run_panel.setSessionDirectory(sessions);
  run_panel.setDrafter("ngram");
  SweepPanel panel(&run_panel);
  panel.setPrompt("Write a long story about a river, a mill and a bridge.");
  panel.setMaxTokens(60);
  panel.setPresets({"strict", "sa"});
  panel.setTreeShapes({"chain:4", "static:2,2,1,1"});
  ASSERT_EQ(panel.configurations().size(), 4);

  panel.start();
  // Cancel inside the second run: after the first row arrives (and some of its tokens).
  ASSERT_TRUE(wait_until([&] { return panel.rows().size() >= 1 || !panel.isRunning(); }, 240000));
  ASSERT_TRUE(panel.isRunning()) << panel.statusText().toStdString();
  ASSERT_EQ(panel.rows().size(), 1);
  wait_until([] { return false; }, 50);
  QElapsedTimer timer;
  timer.start();
  panel.cancel();
  const auto outcome = wait_sweep(panel, 30000);
  ASSERT_TRUE(outcome.has_value()) << "Cancel did not stop the worker";
  EXPECT_FALSE(*outcome);
  std::printf("cancel took %lld ms\n", static_cast<long long>(timer.elapsed()));
  EXPECT_LT(timer.elapsed(), 1000) << "Cancel acts at the next token";
  EXPECT_EQ(panel.statusText(), "Cancelled after 1 of 4 runs; the interrupted run's session was deleted.");
  EXPECT_FALSE(panel.isRunning());
  EXPECT_EQ(panel.progressValue(), 1);
  EXPECT_TRUE(run_panel.lastError().isEmpty()) << "a cancel is not an error";
  // The finished run's session stays; the interrupted one's is gone.
  const QStringList files = sessions_in(sessions);
  ASSERT_EQ(files.size(), 1) << files.join(", ").toStdString();
  EXPECT_EQ(QDir(sessions).filePath(files[0]), panel.rows()[0].session_path);

  // Usable afterwards: a one-run sweep finishes (the model stays loaded).
  panel.setMaxTokens(4);
  panel.setPresets({"strict"});
  panel.setTreeShapes({"chain:4"});
  panel.start();
  const auto again = wait_sweep(panel, 60000);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(*again) << panel.statusText().toStdString();
  EXPECT_EQ(panel.rows().size(), 1);
  EXPECT_EQ(sessions_in(sessions).size(), 2);

  // Cancel right after starting: no run finishes and nothing is kept. Whether the worker had
  // begun the run when the cancel arrived is a race (on a loaded 2-core CI machine it sometimes
  // had), so either status is right; the session count below shows nothing was left behind.
  panel.start();
  panel.cancel();
  const auto early = wait_sweep(panel, 30000);
  ASSERT_TRUE(early.has_value());
  EXPECT_FALSE(*early);
  const QString early_status = panel.statusText();
  EXPECT_TRUE(early_status == "Cancelled after 0 of 1 runs." ||
              early_status == "Cancelled after 0 of 1 runs; the interrupted run's session was deleted.")
      << early_status.toStdString();
  EXPECT_TRUE(panel.rows().isEmpty());
  EXPECT_EQ(sessions_in(sessions).size(), 2);
  EXPECT_FALSE(panel.isRunning());
}

TEST_F(SweepPanelTest, BadTreeShapeAndMissingModelGoToTheRunPanelsErrorDialog) {
  RunPanel run_panel;
  run_panel.setSessionDirectory(work_.filePath("sessions"));
  SweepPanel panel(&run_panel);
  panel.setPrompt("Hello");
  panel.setPresets({"strict"});
  panel.setTreeShapes({"chain:4", "bogus:7"});
  panel.start();
  auto outcome = wait_sweep(panel, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(run_panel.lastError().contains("strict / bogus:7")) << run_panel.lastError().toStdString();
  EXPECT_TRUE(panel.statusText().startsWith("Failed: ")) << panel.statusText().toStdString();
  EXPECT_FALSE(panel.isRunning());
  EXPECT_TRUE(panel.rows().isEmpty());
  EXPECT_TRUE(sessions_in(work_.filePath("sessions")).isEmpty()) << "nothing ran";
  auto* dialog = run_panel.findChild<QMessageBox*>(QStringLiteral("runErrorDialog"));
  ASSERT_NE(dialog, nullptr);
  EXPECT_TRUE(dialog->isVisible());
  EXPECT_FALSE(dialog->isModal());
  EXPECT_EQ(dialog->windowTitle(), "Sweep failed");
  EXPECT_EQ(dialog->text(), run_panel.lastError());

  // A preset the model cannot run (expert skipping on a dense model) is refused before any run.
  panel.setPresets({"strict", "smoe"});
  panel.setTreeShapes({"chain:4"});
  panel.start();
  outcome = wait_sweep(panel, 60000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(run_panel.lastError().contains("smoe / chain:4")) << run_panel.lastError().toStdString();
  EXPECT_TRUE(sessions_in(work_.filePath("sessions")).isEmpty()) << "checked before the first run";
  EXPECT_EQ(dialog->text(), run_panel.lastError());

  const QString missing = work_.filePath("no-such-model.gguf");
  run_panel.setModelSpec(missing);
  panel.setPresets({"strict"});
  panel.start();
  outcome = wait_sweep(panel, 30000);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(*outcome);
  EXPECT_TRUE(run_panel.lastError().contains("no-such-model.gguf")) << run_panel.lastError().toStdString();
  EXPECT_EQ(dialog->text(), run_panel.lastError());
  EXPECT_FALSE(panel.isRunning());
}

}  // namespace
}  // namespace specula::ui
