#pragma once
// Anchor calibration as long work (Tools > Calibrate anchors...): run calibration prompts through
// the run panel's model with sparse attention refreshing at every layer, pick the anchor layers
// (engine/sparse/calibration.h) and write the calibration file, on a worker thread
// (ui/live/calibration_worker.h) with a progress bar and Cancel. A finished calibration can be
// handed to the run panel as a sparse config (SA with reuse, or hybrid) that names it.
#include <QList>
#include <QThread>
#include <QWidget>

#include "ui/live/calibration_worker.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace specula::ui {

class RunPanel;

class CalibrationPanel : public QWidget {
  Q_OBJECT
 public:
  explicit CalibrationPanel(RunPanel* run_panel, QWidget* parent = nullptr);
  ~CalibrationPanel() override;

  void setDataFile(const QString& path);
  void setPromptCount(int prompts);
  void setAnchors(int anchors);
  void setMaxTokens(int tokens);
  void setOutputFile(const QString& path);
  QString outputFile() const;

  bool isRunning() const { return running_; }
  QString statusText() const;
  int progressValue() const;
  int progressMaximum() const;
  // The last finished calibration (empty until one finishes).
  QString calibrationFile() const { return calibration_file_; }
  QList<int> anchors() const { return anchors_; }
  // Writes a sparse config naming the last calibration (preset sa-reuse or hybrid) beside it
  // and sets it in the run panel; false + a message in the error dialog when that fails.
  bool useInRunPanel();

 public slots:
  void start();
  void cancel();

 signals:
  void calibrationFinished(bool ok);  // false: failed or cancelled

 private:
  void setRunning(bool running);
  void onStopped(const QString& status);

  RunPanel* run_panel_;
  QThread thread_;
  CalibrationWorker* worker_ = nullptr;
  QLineEdit* data_ = nullptr;
  QSpinBox* prompts_ = nullptr;
  QSpinBox* anchor_count_ = nullptr;
  QDoubleSpinBox* eta_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QLineEdit* out_ = nullptr;
  QPushButton* start_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QProgressBar* bar_ = nullptr;
  QLabel* status_ = nullptr;
  QComboBox* use_preset_ = nullptr;
  QPushButton* use_ = nullptr;
  bool running_ = false;
  QString calibration_file_;
  QList<int> anchors_;
};

}  // namespace specula::ui
