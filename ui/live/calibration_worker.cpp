#include "ui/live/calibration_worker.h"

#include <QDir>
#include <QFileInfo>

#include "engine/eval/tasks.h"
#include "engine/model/model_identity.h"
#include "ui/live/model_load.h"

namespace specula::ui {

CalibrationWorker::CalibrationWorker(QObject* parent) : QObject(parent) {}
CalibrationWorker::~CalibrationWorker() = default;

void CalibrationWorker::run(const CalibrationRequest& request) {
  if (request.out.isEmpty()) return emit failed(tr("Calibration: choose where to write the calibration file"));
  if (request.data.isEmpty()) return emit failed(tr("Calibration: choose a Spec-Bench JSONL file of prompts"));
  auto items = eval::load_specbench(request.data.toStdString(), request.prompts);
  if (!items) return emit failed(QString::fromStdString(items.error().message));
  std::vector<std::string> prompts;
  for (const auto& item : *items) prompts.push_back(item.prompt);

  if (!model_ || loaded_spec_ != request.model_spec) {
    emit stage(tr("Loading %1 ...").arg(request.model_spec));
    model_.reset();
    loaded_spec_.clear();
    WorkerLoad load =
        load_model_for_worker(request.model_spec, cancel_, [this](int permille) { emit loadProgress(permille); });
    if (load.cancelled) return emit cancelled();
    if (!load.model) return emit failed(load.error);
    emit stage(tr("Hashing the model file ..."));
    auto sha = model_sha256(load.model->path);
    if (!sha) return emit failed(QString::fromStdString(sha.error().message));
    model_ = std::move(load.model);
    model_sha256_ = *sha;
    loaded_spec_ = request.model_spec;
  }
  if (cancel_) return emit cancelled();

  emit stage(tr("Calibrating on %1 prompts ...").arg(prompts.size()));
  emit progress(0, static_cast<int>(prompts.size()));
  auto calibrated = run_calibration(
      *model_, model_sha256_, prompts, request.options, [this](int done, int total) { emit progress(done, total); },
      [this] { return !cancel_.load(); });
  if (cancel_) return emit cancelled();
  if (!calibrated) return emit failed(QString::fromStdString(calibrated.error().message));
  calibrated->settings["data"] = request.data.toStdString();
  if (!QDir().mkpath(QFileInfo(request.out).absolutePath())) {
    return emit failed(tr("Cannot create the folder of %1").arg(request.out));
  }
  if (Status s = save_calibration(*calibrated, request.out.toStdString()); !s) {
    return emit failed(QString::fromStdString(s.error().message));
  }
  QList<int> anchors(calibrated->anchors.begin(), calibrated->anchors.end());
  emit finished(request.out, anchors, calibrated->n_layers);
}

}  // namespace specula::ui
