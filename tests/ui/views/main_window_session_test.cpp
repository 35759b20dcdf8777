// The main window around sessions, headless: opening (and refusing) sessions, recent sessions,
// the SQLite copy, the dock layout kept across windows, the theme, and the session browser.
// QSettings go to a temporary folder so the user's settings stay untouched.
#include <gtest/gtest.h>

#include <QApplication>
#include <QDockWidget>
#include <QFile>
#include <QSettings>
#include <QTemporaryDir>

#include "../ui_session_fixture.h"
#include "ui/models/session_data.h"
#include "ui/models/session_document.h"
#include "ui/views/compare_window.h"
#include "ui/views/draft_tree_view.h"
#include "ui/views/main_window.h"
#include "ui/views/schedule_view.h"
#include "ui/views/run_panel.h"
#include "ui/views/session_browser.h"

namespace specula::ui {
namespace {

class MainWindowSessions : public ::testing::Test {
 protected:
  void SetUp() override {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir_.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings_dir_.path());
    QSettings().clear();
    fixture_ = dir_.filePath("fixture.sqlite");
    ASSERT_EQ(testing::write_fixture_session(fixture_.toStdString()), "");
  }
  QTemporaryDir settings_dir_, dir_;
  QString fixture_;
};

TEST_F(MainWindowSessions, OpensASessionAndRemembersIt) {
  MainWindow window;
  QString error;
  ASSERT_TRUE(window.openSession(fixture_, &error, true)) << error.toStdString();
  EXPECT_TRUE(window.document()->isOpen());
  EXPECT_EQ(window.document()->data()->rounds.size(), static_cast<size_t>(testing::kFixtureRounds));
  EXPECT_TRUE(window.windowTitle().contains("fixture.sqlite"));
  ASSERT_FALSE(window.recentSessions().isEmpty());
  EXPECT_TRUE(window.recentSessions().first().endsWith("fixture.sqlite"));
}

TEST_F(MainWindowSessions, RefusesABadFileAndKeepsTheOpenSession) {
  MainWindow window;
  ASSERT_TRUE(window.openSession(fixture_, nullptr, true));
  const QString bad = dir_.filePath("garbage.sqlite");
  QFile f(bad);
  ASSERT_TRUE(f.open(QIODevice::WriteOnly));
  f.write(QByteArray(4096, 'x'));
  f.close();
  QString error;
  EXPECT_FALSE(window.openSession(bad, &error, true));
  EXPECT_TRUE(error.contains("garbage.sqlite")) << error.toStdString();
  EXPECT_EQ(window.document()->path(), fixture_);
  EXPECT_EQ(window.recentSessions().size(), 1);
}

TEST_F(MainWindowSessions, ExportsAnSQLiteCopy) {
  MainWindow window;
  QString error;
  EXPECT_FALSE(window.exportSession(dir_.filePath("none.sqlite"), &error));  // nothing open
  ASSERT_TRUE(window.openSession(fixture_, nullptr, true));
  const QString copy = dir_.filePath("copy.sqlite");
  ASSERT_TRUE(window.exportSession(copy, &error)) << error.toStdString();
  auto data = load_session_data(copy.toStdString());
  ASSERT_TRUE(data) << data.error().message;
  EXPECT_EQ(data->kernels.size(), window.document()->data()->kernels.size());
  EXPECT_FALSE(window.exportSession(copy, &error));
  EXPECT_TRUE(error.contains("already exists")) << error.toStdString();
}

TEST_F(MainWindowSessions, DockLayoutSurvivesTheWindow) {
  {
    MainWindow window;
    window.show();
    QDockWidget* timeline = window.dock("timelineDock");
    ASSERT_NE(timeline, nullptr);
    EXPECT_FALSE(timeline->isHidden());
    timeline->hide();
    window.dock("sessionsDock")->show();
    window.close();  // saves the layout
  }
  MainWindow again;
  again.show();
  EXPECT_TRUE(again.dock("timelineDock")->isHidden());
  EXPECT_FALSE(again.dock("sessionsDock")->isHidden());
  for (const char* name : {"treeDock", "heatmapDock", "scheduleDock", "expertsDock"}) {
    EXPECT_NE(again.dock(name), nullptr) << name;
  }
}

TEST_F(MainWindowSessions, ThemeSwitchesAndIsRemembered) {
  const QColor system_window = QApplication::palette().color(QPalette::Window);
  {
    MainWindow window;
    window.setTheme(MainWindow::Theme::kDark);
    EXPECT_LT(QApplication::palette().color(QPalette::Window).lightness(), 128);
  }
  {
    MainWindow window;  // starts dark from the settings
    EXPECT_EQ(window.theme(), MainWindow::Theme::kDark);
    window.setTheme(MainWindow::Theme::kLight);
    EXPECT_GT(QApplication::palette().color(QPalette::Window).lightness(), 128);
    window.setTheme(MainWindow::Theme::kSystem);
    EXPECT_EQ(QApplication::palette().color(QPalette::Window), system_window);
  }
}

TEST_F(MainWindowSessions, BrowserListsSessionsAndMarksUnreadableOnes) {
  QFile bad(dir_.filePath("broken.sqlite"));
  ASSERT_TRUE(bad.open(QIODevice::WriteOnly));
  bad.write("nope");
  bad.close();
  MainWindow window;
  window.runPanel()->setSessionDirectory(dir_.path());
  SessionBrowser* browser = window.sessionBrowser();
  browser->setDirectory(dir_.path());
  ASSERT_EQ(browser->sessionCount(), 2);
  QStringList paths{browser->pathAt(0), browser->pathAt(1)};
  EXPECT_TRUE(paths.contains(QFileInfo(fixture_).absoluteFilePath()));
  EXPECT_TRUE(paths.contains(QFileInfo(bad).absoluteFilePath()));
}

TEST_F(MainWindowSessions, ComparesTwoSessionsSideBySide) {
  MainWindow window;
  QString error;
  EXPECT_EQ(window.compareWith(fixture_, &error, true), nullptr);  // nothing open yet
  ASSERT_TRUE(window.openSession(fixture_, nullptr, true));
  const QString real = QStringLiteral(SPECULA_TEST_DATA_DIR "/sessions/real-ngram-hybrid.sqlite");
  EXPECT_EQ(window.compareWith(dir_.filePath("missing.sqlite"), &error, true), nullptr);
  EXPECT_TRUE(error.contains("missing.sqlite")) << error.toStdString();
  std::unique_ptr<CompareWindow> compare(window.compareWith(real, &error, true));
  ASSERT_NE(compare, nullptr) << error.toStdString();
  compare->setAttribute(Qt::WA_DeleteOnClose, false);
  auto* left = qobject_cast<DraftTreeView*>(compare->leftView());
  auto* right = qobject_cast<DraftTreeView*>(compare->rightView());
  ASSERT_TRUE(left != nullptr && right != nullptr);
  // Linked rounds move together by position; the main window's document stays where it was.
  const qint64 main_round = window.document()->round();
  auto docs = compare->findChildren<SessionDocument*>();
  ASSERT_EQ(docs.size(), 2);
  docs[0]->setRoundIndex(3);
  EXPECT_EQ(docs[1]->roundIndex(), 3);
  EXPECT_EQ(window.document()->round(), main_round);
  compare->setView(SessionViewKind::kSchedule);
  EXPECT_NE(qobject_cast<ScheduleView*>(compare->leftView()), nullptr);
  EXPECT_NE(qobject_cast<ScheduleView*>(compare->rightView()), nullptr);
}

}  // namespace
}  // namespace specula::ui
