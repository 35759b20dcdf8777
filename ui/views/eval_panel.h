#pragma once
// Evaluation as long work with a progress bar and Cancel: a task (GSM8K, Spec-Bench, passkey)
// runs each item with strict verification and with the run panel's sparse settings (model,
// drafter and tree come from the run panel too), on a worker thread (ui/live/eval_worker.h).
// The summary compares them: agreement, accepted length, KV bytes read, task score.
#include <QThread>
#include <QWidget>

#include "ui/live/eval_worker.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace specula::ui {

class RunPanel;

class EvalPanel : public QWidget {
  Q_OBJECT
 public:
  explicit EvalPanel(const RunPanel* run_panel, QWidget* parent = nullptr);
  ~EvalPanel() override;

  void setTask(const QString& task);  // gsm8k | specbench | passkey (the data file follows)
  void setDataFile(const QString& path);
  void setLimit(int items);
  void setMaxTokens(int tokens);      // 0 = the task's own
  void setContextTokens(int tokens);  // passkey

  bool isRunning() const { return running_; }
  QString statusText() const;
  QString summaryText() const;
  int progressValue() const;
  int progressMaximum() const;
  const EvalOutcome& lastOutcome() const { return outcome_; }

 public slots:
  void start();
  void cancel();

 signals:
  void evalFinished(bool ok);  // false: failed or cancelled

 private:
  void setRunning(bool running);
  void onFinished(const EvalOutcome& outcome);
  void onStopped(const QString& status);

  const RunPanel* run_panel_;
  QThread thread_;
  EvalWorker* worker_ = nullptr;
  QComboBox* task_ = nullptr;
  QLineEdit* data_ = nullptr;
  QSpinBox* limit_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QSpinBox* context_ = nullptr;
  QPushButton* start_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QProgressBar* bar_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* summary_ = nullptr;
  bool running_ = false;
  EvalOutcome outcome_;
};

}  // namespace specula::ui
