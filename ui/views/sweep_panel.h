#pragma once
// A profiling sweep as long work (Tools > Profile sweep...): one prompt run once through each
// ticked configuration (sparse presets crossed with draft-tree shapes) with the run panel's
// model, drafter and acceptance rule, each run recorded as a session, on a worker thread
// (ui/live/sweep_worker.h) with a progress bar and Cancel. The results table gives decode
// tokens/s, mean accepted length and KV read against dense per configuration; a double-click
// opens that run's session, and two selected rows can be compared side by side.
#include <QList>
#include <QStringList>
#include <QThread>
#include <QWidget>

#include "ui/live/sweep_worker.h"

class QCheckBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace specula::ui {

class RunPanel;

class SweepPanel : public QWidget {
  Q_OBJECT
 public:
  explicit SweepPanel(RunPanel* run_panel, QWidget* parent = nullptr);
  ~SweepPanel() override;

  void setPrompt(const QString& prompt);
  QString prompt() const;
  void takeRunPanelPrompt();
  void setChat(bool chat);
  void setMaxTokens(int tokens);
  // Ticks exactly these presets / tree shapes (a shape not listed yet is added).
  void setPresets(const QStringList& presets);
  void setTreeShapes(const QStringList& shapes);
  // The ticked presets crossed with the ticked shapes, preset-major.
  QList<SweepConfig> configurations() const;

  bool isRunning() const { return running_; }
  QString statusText() const;
  int progressValue() const;
  int progressMaximum() const;
  QList<SweepRow> rows() const { return rows_; }
  QTableWidget* table() const { return table_; }
  // Asks to open a row's session (what a double-click does).
  void openRow(int row);
  // Compares the two selected rows' sessions; false when not exactly two are selected.
  bool compareSelected();

 public slots:
  void start();
  void cancel();

 signals:
  void sweepFinished(bool ok);  // false: failed or cancelled
  void openRequested(const QString& session_path);
  void compareRequested(const QString& left_path, const QString& right_path);

 private:
  void setRunning(bool running);
  void onStopped(const QString& status);
  void addRow(const SweepRow& row);
  void refreshCount();

  RunPanel* run_panel_;
  QThread thread_;
  SweepWorker* worker_ = nullptr;
  QPlainTextEdit* prompt_ = nullptr;
  QCheckBox* chat_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QListWidget* presets_ = nullptr;
  QListWidget* trees_ = nullptr;
  QLineEdit* new_tree_ = nullptr;
  QLabel* count_ = nullptr;
  QPushButton* start_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QProgressBar* bar_ = nullptr;
  QLabel* status_ = nullptr;
  QTableWidget* table_ = nullptr;
  QPushButton* compare_ = nullptr;
  bool running_ = false;
  int total_ = 0;
  QList<SweepRow> rows_;
};

}  // namespace specula::ui
