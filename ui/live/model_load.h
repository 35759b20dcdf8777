#pragma once
// Model loading for the UI's workers (generation, evaluation, calibration): the engine's load
// progress (engine/model/loader.h) in per-mille steps, and Cancel through the worker's flag.
#include <QString>
#include <atomic>
#include <functional>
#include <memory>

#include "engine/model/loader.h"

namespace specula::ui {

struct WorkerLoad {
  std::unique_ptr<Model> model;  // null unless the load succeeded
  bool cancelled = false;        // the flag turned true before the load finished
  QString error;                 // why it failed (empty when it succeeded or was cancelled)
};

// Loads `spec` ("default", a GGUF file or an HF directory) on the calling (worker) thread.
// `report(permille)` is called only when the per-mille value changes, so a large model sends at
// most 1000 queued signals; the load stops within one chunk of `cancel` turning true.
WorkerLoad load_model_for_worker(const QString& spec, const std::atomic<bool>& cancel,
                                 const std::function<void(int permille)>& report);

}  // namespace specula::ui
