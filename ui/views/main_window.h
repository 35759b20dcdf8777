#pragma once
// The main window: the run panel (model, drafter, tree, acceptance, prompt library, coloured
// streamed output, live counters; every run recorded as a session) in the centre, and the
// session views as dockable panels around it (draft tree, overlap heatmap, refresh/reuse
// schedule, experts and FFN, kernel timeline, teaching, session browser, evaluation,
// calibration, profiling sweep), all
// following one SessionDocument. File > Export writes Perfetto JSON, CSV and view images. The dock layout, window geometry, theme and recent sessions persist in
// QSettings. Generation runs on a worker thread (ui/live/generation_worker.h); the window never
// blocks.
#include <QMainWindow>

#include "ui/views/session_views.h"

class QDockWidget;
class QMenu;

namespace specula::ui {

class CalibrationPanel;
class CompareWindow;
class EvalPanel;
class RunPanel;
class SessionBrowser;
class SessionDocument;
class SweepPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum class Theme { kSystem, kLight, kDark };

  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void setModelSpec(const QString& spec);
  void setPrompt(const QString& prompt);
  QString outputText() const;
  bool isRunning() const;
  RunPanel* runPanel() const { return run_panel_; }
  EvalPanel* evalPanel() const { return eval_panel_; }
  CalibrationPanel* calibrationPanel() const { return calibration_panel_; }
  SweepPanel* sweepPanel() const { return sweep_panel_; }
  SessionDocument* document() const { return document_; }
  SessionBrowser* sessionBrowser() const { return browser_; }
  QDockWidget* dock(const QString& object_name) const;

  // Opens a session into every view; on failure shows a dialog (unless quiet) and returns the
  // reason in *error.
  bool openSession(const QString& path, QString* error = nullptr, bool quiet = false);
  bool exportSession(const QString& to, QString* error = nullptr);
  bool exportPerfetto(const QString& to, QString* error = nullptr);
  bool exportCsv(const QString& to_dir, QString* error = nullptr);
  // Writes the view's dock as it is on screen (zoom, round, heatmap mode) to a PNG, SVG or PDF
  // file, by suffix; a hidden dock is shown first.
  bool exportView(SessionViewKind kind, const QString& path, QString* error = nullptr);
  // Opens path beside the current session in a new window (deleted on close), or nullptr.
  CompareWindow* compareWith(const QString& path, QString* error = nullptr, bool quiet = false);
  QStringList recentSessions() const;
  void showView(SessionViewKind kind);  // shows and raises the view's dock (heatmaps: the mode too)
  void setTheme(Theme theme);
  Theme theme() const { return theme_; }

 public slots:
  void startRun();
  void stopRun();

 signals:
  void runFinished(bool ok);  // emitted after every run, for tests and scripting

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  QDockWidget* addViewDock(const QString& title, const QString& name, QWidget* view, Qt::DockWidgetArea area);
  void buildMenus();
  void buildExportMenu(QMenu* file);
  void rememberRecent(const QString& path);
  void rebuildRecentMenu();
  void saveLayout() const;

  RunPanel* run_panel_ = nullptr;
  EvalPanel* eval_panel_ = nullptr;
  CalibrationPanel* calibration_panel_ = nullptr;
  SweepPanel* sweep_panel_ = nullptr;
  SessionDocument* document_ = nullptr;
  SessionBrowser* browser_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  QMenu* view_menu_ = nullptr;
  Theme theme_ = Theme::kSystem;
};

}  // namespace specula::ui
