#pragma once
// Runs anchor calibration (engine/sparse/calibration.h's run_calibration) on a worker thread:
// load the model (with progress), run the prompts (progress per prompt), write the calibration
// file. Cancel stops the load within a chunk and a prompt at its next token; nothing is written
// then. The UI only starts it and asks it to stop.
#include <QList>
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

#include "engine/sparse/calibration.h"

namespace specula {
struct Model;
}

namespace specula::ui {

struct CalibrationRequest {
  QString model_spec = "default";
  QString data;     // Spec-Bench JSONL with the calibration prompts
  int prompts = 8;  // how many, round-robin over the file's categories
  CalibrationOptions options;
  QString out;  // the calibration JSON to write
};

class CalibrationWorker : public QObject {
  Q_OBJECT
 public:
  explicit CalibrationWorker(QObject* parent = nullptr);
  ~CalibrationWorker() override;
  // Both safe from the UI thread. The panel clears the flag before it queues a run, so a Cancel
  // pressed before the worker picks the run up still counts.
  void requestCancel() { cancel_ = true; }
  void clearCancel() { cancel_ = false; }

 public slots:
  void run(const specula::ui::CalibrationRequest& request);

 signals:
  void stage(const QString& message);
  void loadProgress(int permille);
  void progress(int prompts_done, int prompts_total);
  void finished(const QString& path, const QList<int>& anchors, int n_layers);
  void cancelled();
  void failed(const QString& message);

 private:
  std::atomic<bool> cancel_{false};
  QString loaded_spec_;
  std::unique_ptr<Model> model_;
  std::string model_sha256_;
};

}  // namespace specula::ui

Q_DECLARE_METATYPE(specula::ui::CalibrationRequest)
