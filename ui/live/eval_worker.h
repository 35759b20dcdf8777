#pragma once
// Runs the evaluation harness (engine/eval/runner.h) on a worker thread: each item twice, with
// strict verification and with the chosen sparse settings, reporting progress per run and
// honouring Cancel at the next generated token. The UI only starts it and asks it to stop.
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

namespace specula {
struct Model;
}

namespace specula::ui {

struct EvalRequest {
  QString model_spec = "default";
  QString task = "gsm8k";      // gsm8k | specbench | passkey
  QString data;                // gsm8k / specbench: the JSONL file
  int limit = 5;               // items (passkey: how many keys)
  int max_tokens = 0;          // per item; 0 = the task's own
  int context_tokens = 2048;   // passkey: prompt size
  QString drafter = "ngram";   // none | ngram
  QString tree = "chain:4";
  QString sparse = "strict";   // preset, or
  QString sparse_config;       // a sparse config JSON file (replaces the preset)
};

// The numbers the panel shows from a finished evaluation (engine/eval/runner.h's EvalSummary).
struct EvalOutcome {
  int items = 0;
  double token_agreement = 1;   // configured vs strict, matched / compared
  double rouge_l = 1;
  int identical_outputs = 0;
  double strict_accepted_length = 1;
  double configured_accepted_length = 1;
  qint64 strict_kv_bytes = 0;
  qint64 configured_kv_bytes = 0;
  double strict_score = -1;     // points; -1 when the task has no metric
  double configured_score = -1;
};

class EvalWorker : public QObject {
  Q_OBJECT
 public:
  explicit EvalWorker(QObject* parent = nullptr);
  ~EvalWorker() override;
  // Safe from any thread: the current run stops at its next token, a model load within one
  // chunk (leaving no model loaded). The panel clears the flag before it queues a run, so a
  // Cancel pressed before the worker picks the run up still counts.
  void requestCancel() { cancel_ = true; }
  void clearCancel() { cancel_ = false; }

 public slots:
  void run(const specula::ui::EvalRequest& request);

 signals:
  void stage(const QString& message);            // "Loading the model ...", "Running 2 items ..."
  void progress(int runs_done, int runs_total);  // two runs per item
  void loadProgress(int permille);               // model load: per mille of the tensor bytes read
  void finished(const specula::ui::EvalOutcome& outcome);
  void cancelled();
  void failed(const QString& message);

 private:
  std::atomic<bool> cancel_{false};
  QString loaded_spec_;
  std::unique_ptr<Model> model_;
};

}  // namespace specula::ui

Q_DECLARE_METATYPE(specula::ui::EvalRequest)
Q_DECLARE_METATYPE(specula::ui::EvalOutcome)
