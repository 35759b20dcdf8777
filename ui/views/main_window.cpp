#include "ui/views/main_window.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QKeySequence>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QStyle>
#include <QStyleFactory>
#include <memory>

#include "ui/models/session_document.h"
#include "ui/models/session_files.h"
#include "ui/views/calibration_panel.h"
#include "ui/views/compare_window.h"
#include "ui/views/draft_tree_view.h"
#include "ui/views/eval_panel.h"
#include "ui/views/experts_view.h"
#include "ui/views/heatmap_view.h"
#include "ui/views/plot_export.h"
#include "ui/views/run_panel.h"
#include "ui/views/schedule_view.h"
#include "ui/views/session_browser.h"
#include "ui/views/sweep_panel.h"
#include "ui/views/teach_view.h"
#include "ui/views/timeline_view.h"

namespace specula::ui {
namespace {

constexpr int kRecentMax = 8;
const char* kSessionFilter = "Specula sessions (*.sqlite);;All files (*)";

QString dock_name(SessionViewKind kind) {
  switch (kind) {
    case SessionViewKind::kTree: return QStringLiteral("treeDock");
    case SessionViewKind::kSchedule: return QStringLiteral("scheduleDock");
    case SessionViewKind::kExperts: return QStringLiteral("expertsDock");
    case SessionViewKind::kTimeline: return QStringLiteral("timelineDock");
    case SessionViewKind::kTeach: return QStringLiteral("teachDock");
    case SessionViewKind::kHeatmapDistance:
    case SessionViewKind::kHeatmapLayers:
    case SessionViewKind::kHeatmapBlocks: break;
  }
  return QStringLiteral("heatmapDock");
}

QPalette dark_palette() {
  QPalette p;
  const QColor window(45, 45, 48), base(30, 30, 32), text(225, 225, 225), disabled(130, 130, 130);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::Highlight, QColor(42, 130, 218));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(90, 160, 240));
  p.setColor(QPalette::Disabled, QPalette::Text, disabled);
  p.setColor(QPalette::Disabled, QPalette::WindowText, disabled);
  p.setColor(QPalette::Disabled, QPalette::ButtonText, disabled);
  return p;
}

}  // namespace

// The application's palette and style before any window changed them: what "follow the
// system" returns to.
static const QPalette& system_palette() {
  static const QPalette palette = QApplication::palette();
  return palette;
}
static const QString& system_style() {
  static const QString name = QApplication::style()->name();
  return name;
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  (void)system_palette();  // capture both before setTheme below
  (void)system_style();
  setWindowTitle(tr("Specula"));
  resize(1400, 900);
  setDockNestingEnabled(true);
  document_ = new SessionDocument(this);
  run_panel_ = new RunPanel(this);
  setCentralWidget(run_panel_);

  browser_ = new SessionBrowser(this);
  addViewDock(tr("Draft tree"), QStringLiteral("treeDock"), new DraftTreeView(document_, this), Qt::RightDockWidgetArea);
  QDockWidget* heat = addViewDock(tr("Overlap heatmap"), QStringLiteral("heatmapDock"), new HeatmapView(document_, this),
                                  Qt::RightDockWidgetArea);
  QDockWidget* schedule = addViewDock(tr("Refresh/reuse schedule"), QStringLiteral("scheduleDock"),
                                      new ScheduleView(document_, this), Qt::RightDockWidgetArea);
  QDockWidget* experts = addViewDock(tr("Experts and FFN"), QStringLiteral("expertsDock"), new ExpertsView(document_, this),
                                     Qt::RightDockWidgetArea);
  tabifyDockWidget(heat, schedule);
  tabifyDockWidget(schedule, experts);
  addViewDock(tr("Kernel timeline"), QStringLiteral("timelineDock"), new TimelineView(document_, this),
              Qt::BottomDockWidgetArea);
  QDockWidget* teach = addViewDock(tr("Teaching"), QStringLiteral("teachDock"), new TeachView(document_, this),
                                   Qt::RightDockWidgetArea);
  tabifyDockWidget(experts, teach);
  heat->raise();
  QDockWidget* sessions = addViewDock(tr("Sessions"), QStringLiteral("sessionsDock"), browser_, Qt::LeftDockWidgetArea);
  sessions->hide();
  eval_panel_ = new EvalPanel(run_panel_, this);
  QDockWidget* evaluation = addViewDock(tr("Evaluation"), QStringLiteral("evalDock"), eval_panel_, Qt::LeftDockWidgetArea);
  evaluation->hide();
  calibration_panel_ = new CalibrationPanel(run_panel_, this);
  QDockWidget* calibration = addViewDock(tr("Calibration"), QStringLiteral("calibrationDock"), calibration_panel_,
                                         Qt::LeftDockWidgetArea);
  calibration->hide();
  sweep_panel_ = new SweepPanel(run_panel_, this);
  QDockWidget* sweep = addViewDock(tr("Sweep"), QStringLiteral("sweepDock"), sweep_panel_, Qt::LeftDockWidgetArea);
  sweep->hide();
  connect(sweep_panel_, &SweepPanel::openRequested, this, [this](const QString& path) { openSession(path); });
  connect(sweep_panel_, &SweepPanel::compareRequested, this, [this](const QString& left, const QString& right) {
    if (openSession(left)) compareWith(right);
  });
  connect(sweep_panel_, &SweepPanel::sweepFinished, browser_, &SessionBrowser::refresh);
  browser_->setDirectory(run_panel_->sessionDirectory());
  connect(browser_, &SessionBrowser::openRequested, this, [this](const QString& path) { openSession(path); });

  buildMenus();

  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("mainWindow/geometry")).toByteArray());
  restoreState(settings.value(QStringLiteral("mainWindow/state")).toByteArray());
  setTheme(static_cast<Theme>(settings.value(QStringLiteral("theme"), 0).toInt()));

  statusBar()->showMessage(tr("Ready. Ctrl+Enter runs, Esc stops, Ctrl+O opens a session."));
  connect(run_panel_, &RunPanel::runFinished, this, &MainWindow::runFinished);
  connect(run_panel_, &RunPanel::sessionRecorded, this, [this](const QString& path) {
    statusBar()->showMessage(tr("Session recorded: %1").arg(path));
    browser_->refresh();
    openSession(path, nullptr, /*quiet=*/true);
  });
}

MainWindow::~MainWindow() = default;

QDockWidget* MainWindow::addViewDock(const QString& title, const QString& name, QWidget* view, Qt::DockWidgetArea area) {
  auto* dock = new QDockWidget(title, this);
  dock->setObjectName(name);
  dock->setWidget(view);
  addDockWidget(area, dock);
  return dock;
}

QDockWidget* MainWindow::dock(const QString& object_name) const { return findChild<QDockWidget*>(object_name); }

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open session..."));
  open->setShortcut(QKeySequence::Open);
  connect(open, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open session"), run_panel_->sessionDirectory(),
                                                      tr(kSessionFilter));
    if (!path.isEmpty()) openSession(path);
  });
  recent_menu_ = file->addMenu(tr("Open &recent"));
  rebuildRecentMenu();
  QAction* save = file->addAction(tr("&Save session as..."));
  save->setShortcut(QKeySequence::SaveAs);
  QAction* export_copy = file->addAction(tr("&Export SQLite copy..."));
  export_copy->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  for (QAction* action : {save, export_copy}) {
    connect(action, &QAction::triggered, this, [this] {
      if (!document_->isOpen()) return statusBar()->showMessage(tr("No session is open."));
      const QString to = QFileDialog::getSaveFileName(this, tr("Save a copy of the session"), QString(), tr(kSessionFilter));
      if (to.isEmpty()) return;
      QString error;
      if (QFileInfo::exists(to)) QFile::remove(to);  // the dialog asked before overwriting
      if (!exportSession(to, &error)) QMessageBox::warning(this, tr("Export failed"), error);
      else statusBar()->showMessage(tr("Saved a copy: %1").arg(to));
    });
  }
  buildExportMenu(file);
  QAction* compare = file->addAction(tr("&Compare with..."));
  compare->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
  connect(compare, &QAction::triggered, this, [this] {
    if (!document_->isOpen()) return statusBar()->showMessage(tr("Open a session first, then compare it with another."));
    const QString path = QFileDialog::getOpenFileName(this, tr("Compare with"), QFileInfo(document_->path()).path(),
                                                      tr(kSessionFilter));
    if (!path.isEmpty()) compareWith(path);
  });
  QAction* open_prompts = file->addAction(tr("Open &prompts..."));
  open_prompts->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
  connect(open_prompts, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open prompts"), QString(), tr("JSONL (*.jsonl)"));
    if (!path.isEmpty() && !run_panel_->openPromptFile(path)) statusBar()->showMessage(tr("Could not read %1").arg(path));
  });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"));
  quit->setShortcut(QKeySequence::Quit);
  connect(quit, &QAction::triggered, this, &QWidget::close);

  QMenu* session = menuBar()->addMenu(tr("&Session"));
  QAction* previous = session->addAction(tr("&Previous round"));
  previous->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Left));
  connect(previous, &QAction::triggered, this, [this] { document_->setRoundIndex(document_->roundIndex() - 1); });
  QAction* next = session->addAction(tr("&Next round"));
  next->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Right));
  connect(next, &QAction::triggered, this, [this] { document_->setRoundIndex(document_->roundIndex() + 1); });
  QAction* play = session->addAction(tr("Play/pause rounds"));
  play->setShortcut(QKeySequence(Qt::Key_F5));
  connect(play, &QAction::triggered, this, [this] {
    if (auto* tree = findChild<DraftTreeView*>()) tree->setPlaying(!tree->isPlaying());
  });

  QMenu* tools = menuBar()->addMenu(tr("&Tools"));
  QAction* calibrate = tools->addAction(tr("&Calibrate anchors..."));
  connect(calibrate, &QAction::triggered, this, [this] {
    QDockWidget* d = dock(QStringLiteral("calibrationDock"));
    d->show();
    d->raise();
  });
  QAction* sweep = tools->addAction(tr("&Profile sweep..."));
  connect(sweep, &QAction::triggered, this, [this] {
    QDockWidget* d = dock(QStringLiteral("sweepDock"));
    d->show();
    d->raise();
  });
  QAction* evaluate = tools->addAction(tr("&Evaluate..."));
  connect(evaluate, &QAction::triggered, this, [this] {
    QDockWidget* d = dock(QStringLiteral("evalDock"));
    d->show();
    d->raise();
  });

  view_menu_ = menuBar()->addMenu(tr("&View"));
  int key = Qt::Key_1;
  for (QDockWidget* d : findChildren<QDockWidget*>()) {
    QAction* toggle = d->toggleViewAction();
    // Ctrl+Shift+1..9 for the first nine docks; later ones are reached through this menu.
    if (key <= Qt::Key_9) toggle->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | static_cast<Qt::Key>(key++)));
    view_menu_->addAction(toggle);
  }
  view_menu_->addSeparator();
  QMenu* theme = view_menu_->addMenu(tr("&Theme"));
  auto* group = new QActionGroup(this);
  const std::pair<QString, Theme> themes[] = {
      {tr("Follow the system"), Theme::kSystem}, {tr("Light"), Theme::kLight}, {tr("Dark"), Theme::kDark}};
  for (const auto& [label, value] : themes) {
    QAction* a = theme->addAction(label);
    a->setCheckable(true);
    a->setData(static_cast<int>(value));
    group->addAction(a);
    connect(a, &QAction::triggered, this, [this, value = value] { setTheme(value); });
  }
  connect(theme, &QMenu::aboutToShow, this, [this, group] {
    for (QAction* a : group->actions()) a->setChecked(a->data().toInt() == static_cast<int>(theme_));
  });
  QAction* reset = view_menu_->addAction(tr("Reset the layout"));
  connect(reset, &QAction::triggered, this, [this] {
    QSettings().remove(QStringLiteral("mainWindow/state"));
    statusBar()->showMessage(tr("The default layout returns at the next start."));
  });
}

bool MainWindow::openSession(const QString& path, QString* error, bool quiet) {
  QString reason;
  if (!document_->open(path, &reason)) {
    if (error != nullptr) *error = reason;
    if (!quiet) QMessageBox::critical(this, tr("Cannot open the session"), reason);
    statusBar()->showMessage(reason);
    return false;
  }
  rememberRecent(QFileInfo(path).absoluteFilePath());
  setWindowTitle(tr("Specula — %1").arg(QFileInfo(path).fileName()));
  const SessionData* data = document_->data();
  statusBar()->showMessage(tr("%1: %2 rounds, %3 kernels, %4 phase ranges")
                               .arg(path)
                               .arg(data->rounds.size())
                               .arg(data->kernels.size())
                               .arg(data->nvtx.size()));
  return true;
}

CompareWindow* MainWindow::compareWith(const QString& path, QString* error, bool quiet) {
  if (!document_->isOpen()) return nullptr;
  auto right = std::make_unique<SessionDocument>();
  QString reason;
  if (!right->open(path, &reason)) {
    if (error != nullptr) *error = reason;
    if (!quiet) QMessageBox::critical(this, tr("Cannot open the session"), reason);
    return nullptr;
  }
  // The left side gets its own document over the same data, so its round moves on its own.
  auto left = std::make_unique<SessionDocument>();
  left->setData(document_->sharedData());
  auto* window = new CompareWindow(left.get(), right.get());
  left.release()->setParent(window);
  right.release()->setParent(window);
  window->setAttribute(Qt::WA_DeleteOnClose);
  window->show();
  return window;
}

void MainWindow::buildExportMenu(QMenu* file) {
  QMenu* menu = file->addMenu(tr("E&xport"));
  const auto need_session = [this] {
    if (!document_->isOpen()) statusBar()->showMessage(tr("No session is open."));
    return document_->isOpen();
  };
  QAction* perfetto = menu->addAction(tr("&Perfetto trace (JSON)..."));
  connect(perfetto, &QAction::triggered, this, [this, need_session] {
    if (!need_session()) return;
    const QString to = QFileDialog::getSaveFileName(this, tr("Export a Perfetto trace"), QString(),
                                                    tr("Trace event JSON (*.json)"));
    if (to.isEmpty()) return;
    QString error;
    if (!exportPerfetto(to, &error)) QMessageBox::warning(this, tr("Export failed"), error);
    else statusBar()->showMessage(tr("Wrote %1 (open it in ui.perfetto.dev or chrome://tracing)").arg(to));
  });
  QAction* csv = menu->addAction(tr("&CSV files..."));
  connect(csv, &QAction::triggered, this, [this, need_session] {
    if (!need_session()) return;
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Export CSV files into"));
    if (dir.isEmpty()) return;
    QString error;
    if (!exportCsv(dir, &error)) QMessageBox::warning(this, tr("Export failed"), error);
    else statusBar()->showMessage(tr("Wrote kernels, memcpy, rounds, selections and nvtx CSV files to %1").arg(dir));
  });
  menu->addSeparator();
  const std::pair<QString, SessionViewKind> views[] = {{tr("Draft tree"), SessionViewKind::kTree},
                                                       {tr("Overlap heatmap"), SessionViewKind::kHeatmapDistance},
                                                       {tr("Refresh/reuse schedule"), SessionViewKind::kSchedule},
                                                       {tr("Experts and FFN"), SessionViewKind::kExperts},
                                                       {tr("Kernel timeline"), SessionViewKind::kTimeline},
                                                       {tr("Teaching"), SessionViewKind::kTeach}};
  for (const auto& [label, kind] : views) {
    QAction* a = menu->addAction(tr("%1 as image...").arg(label));
    connect(a, &QAction::triggered, this, [this, need_session, kind = kind] {
      if (!need_session()) return;
      QString filter;
      QString to = QFileDialog::getSaveFileName(this, tr("Export the view"), QString(),
                                                tr("PNG image (*.png);;SVG drawing (*.svg);;PDF document (*.pdf)"), &filter);
      if (to.isEmpty()) return;
      if (!image_format_for(to)) to += filter.contains("svg") ? ".svg" : filter.contains("pdf") ? ".pdf" : ".png";
      QString error;
      if (!exportView(kind, to, &error)) QMessageBox::warning(this, tr("Export failed"), error);
      else statusBar()->showMessage(tr("Wrote %1").arg(to));
    });
  }
}

bool MainWindow::exportPerfetto(const QString& to, QString* error) {
  if (!document_->isOpen()) {
    if (error != nullptr) *error = tr("no session is open");
    return false;
  }
  const Status s = export_session_perfetto(document_->path().toStdString(), to.toStdString());
  if (!s && error != nullptr) *error = QString::fromStdString(s.error().message);
  return s.ok();
}

bool MainWindow::exportCsv(const QString& to_dir, QString* error) {
  if (!document_->isOpen()) {
    if (error != nullptr) *error = tr("no session is open");
    return false;
  }
  const Status s = export_session_csv(document_->path().toStdString(), to_dir.toStdString());
  if (!s && error != nullptr) *error = QString::fromStdString(s.error().message);
  return s.ok();
}

bool MainWindow::exportView(SessionViewKind kind, const QString& path, QString* error) {
  QDockWidget* d = dock(dock_name(kind));
  if (d == nullptr || d->widget() == nullptr) {
    if (error != nullptr) *error = tr("no such view");
    return false;
  }
  if (!d->isVisible()) showView(kind);
  const QString message = export_view_image(d->widget(), path);
  if (!message.isEmpty() && error != nullptr) *error = message;
  return message.isEmpty();
}

bool MainWindow::exportSession(const QString& to, QString* error) {
  if (!document_->isOpen()) {
    if (error != nullptr) *error = tr("no session is open");
    return false;
  }
  const Status s = export_session_copy(document_->path().toStdString(), to.toStdString());
  if (!s && error != nullptr) *error = QString::fromStdString(s.error().message);
  return s.ok();
}

void MainWindow::showView(SessionViewKind kind) {
  if (kind == SessionViewKind::kHeatmapDistance || kind == SessionViewKind::kHeatmapLayers ||
      kind == SessionViewKind::kHeatmapBlocks) {
    if (auto* heatmap = findChild<HeatmapView*>()) {
      heatmap->setMode(kind == SessionViewKind::kHeatmapDistance ? HeatmapView::Mode::kDistance
                       : kind == SessionViewKind::kHeatmapLayers ? HeatmapView::Mode::kLayers
                                                                 : HeatmapView::Mode::kBlocks);
    }
  }
  if (QDockWidget* d = dock(dock_name(kind))) {
    d->show();
    d->raise();
  }
}

QStringList MainWindow::recentSessions() const {
  return QSettings().value(QStringLiteral("recentSessions")).toStringList();
}

void MainWindow::rememberRecent(const QString& path) {
  QStringList recent = recentSessions();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kRecentMax) recent.removeLast();
  QSettings().setValue(QStringLiteral("recentSessions"), recent);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recent_menu_->clear();
  const QStringList recent = recentSessions();
  for (int i = 0; i < recent.size(); ++i) {
    QAction* a = recent_menu_->addAction(QStringLiteral("&%1 %2").arg(i + 1).arg(recent[i]));
    connect(a, &QAction::triggered, this, [this, path = recent[i]] { openSession(path); });
  }
  recent_menu_->setEnabled(!recent.isEmpty());
}

void MainWindow::setTheme(Theme theme) {
  theme_ = theme;
  switch (theme) {
    case Theme::kSystem:
      if (QApplication::style()->name() != system_style()) QApplication::setStyle(system_style());
      QApplication::setPalette(system_palette());
      break;
    case Theme::kLight:
      QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
      QApplication::setPalette(QApplication::style()->standardPalette());
      break;
    case Theme::kDark:
      QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
      QApplication::setPalette(dark_palette());
      break;
  }
  QSettings().setValue(QStringLiteral("theme"), static_cast<int>(theme));
}

void MainWindow::saveLayout() const {
  QSettings settings;
  settings.setValue(QStringLiteral("mainWindow/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("mainWindow/state"), saveState());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  saveLayout();
  QMainWindow::closeEvent(event);
}

void MainWindow::setModelSpec(const QString& spec) { run_panel_->setModelSpec(spec); }
void MainWindow::setPrompt(const QString& prompt) { run_panel_->setPrompt(prompt); }
QString MainWindow::outputText() const { return run_panel_->outputText(); }
bool MainWindow::isRunning() const { return run_panel_->isRunning(); }
void MainWindow::startRun() { run_panel_->startRun(); }
void MainWindow::stopRun() { run_panel_->stopRun(); }

}  // namespace specula::ui
