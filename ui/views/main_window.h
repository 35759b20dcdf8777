#pragma once
// The main window: the run panel (model, drafter, tree, acceptance, prompt library, coloured
// streamed output, live counters; every run recorded as a session) and a File menu. Generation
// runs on a worker thread (ui/live/generation_worker.h); the window never blocks.
#include <QMainWindow>

namespace specula::ui {

class RunPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void setModelSpec(const QString& spec);
  void setPrompt(const QString& prompt);
  QString outputText() const;
  bool isRunning() const;
  RunPanel* runPanel() const { return run_panel_; }

 public slots:
  void startRun();
  void stopRun();

 signals:
  void runFinished(bool ok);  // emitted after every run, for tests and scripting

 private:
  RunPanel* run_panel_ = nullptr;
};

}  // namespace specula::ui
