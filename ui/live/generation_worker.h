#pragma once
// Runs engine generation on a worker thread and streams tokens to the UI by queued signals.
// The UI never blocks on the engine: it only starts a run and asks it to stop.
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

#include "engine/generate.h"

namespace specula::ui {

struct RunRequest {
  QString model_spec = "default";  // path, HF directory or "default"
  QString prompt;
  bool chat = true;
  GenerateOptions options;
};

class GenerationWorker : public QObject {
  Q_OBJECT
 public:
  explicit GenerationWorker(QObject* parent = nullptr);
  // Stop is honoured at the next token; safe to call from the UI thread.
  void requestStop() { stop_requested_ = true; }

 public slots:
  void run(const specula::ui::RunRequest& request);

 signals:
  void status(const QString& message);
  void textReady(const QString& text);  // complete UTF-8 characters only
  void finished(double prefill_tokens_per_s, double decode_tokens_per_s, int tokens);
  void failed(const QString& message);

 private:
  std::atomic<bool> stop_requested_{false};
  // The last model stays loaded so repeated runs skip the load.
  QString loaded_spec_;
  std::unique_ptr<Model> model_;
};

}  // namespace specula::ui

Q_DECLARE_METATYPE(specula::ui::RunRequest)
