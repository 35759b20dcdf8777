#include "ui/live/model_load.h"

#include <cmath>

namespace specula::ui {

WorkerLoad load_model_for_worker(const QString& spec, const std::atomic<bool>& cancel,
                                 const std::function<void(int permille)>& report) {
  WorkerLoad out;
  if (cancel) {
    out.cancelled = true;
    return out;
  }
  int last = -1;
  auto loaded = load_model(resolve_model_path(spec.toStdString()), [&](double fraction) {
    const int permille = static_cast<int>(std::floor(fraction * 1000.0));
    if (permille != last && report) report(permille);
    last = permille;
    return !cancel.load();
  });
  if (!loaded) {
    // A cancel that lands after the last chunk still counts: the caller asked for nothing loaded.
    out.cancelled = cancel.load();
    if (!out.cancelled) out.error = QString::fromStdString(loaded.error().message);
    return out;
  }
  if (cancel) {
    out.cancelled = true;
    return out;
  }
  out.model = std::make_unique<Model>(std::move(loaded).value());
  return out;
}

}  // namespace specula::ui
