#pragma once
// Runs a profiling sweep on a worker thread: one prompt through several configurations (a sparse
// preset crossed with a draft-tree shape), each run once and recorded as a session, the way the
// run panel records a run (profiler/recorder.h at summary level). Load the model (with
// progress), check every configuration against it before the first run, then run them in order
// (progress per run). Cancel stops the load within a chunk and a run at its next token; the
// interrupted run's session is deleted, the finished runs' sessions stay.
#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

namespace specula {
struct Model;
class SpeculativeEngine;
}  // namespace specula

namespace specula::ui {

struct SweepConfig {
  QString sparse = "strict";  // a preset of engine/sparse/sparse_config.h
  QString tree = "chain:4";   // chain:K | static:B1,B2,... | dynamic:DEPTH,TOPK,TOTAL
  QString label() const { return sparse + " / " + tree; }
};

struct SweepRequest {
  QString model_spec = "default";
  QString prompt;
  bool chat = true;
  int max_tokens = 64;
  QString drafter = "ngram";  // none | ngram | layerskip (none: the tree is not used)
  QString accept = "greedy";
  QList<SweepConfig> configs;
  QString session_dir;  // where the sessions are written (made if missing)
};

// One finished run of the sweep.
struct SweepRow {
  QString config;
  double tokens_per_s = 0;          // decode tokens/s (after the first token; engine/spec/metrics.h)
  double mean_accepted_length = 1;  // over speculative rounds; 1 when none speculated
  qint64 kv_bytes_read = 0;         // committed KV that attention read, and what dense attention would have
  qint64 kv_bytes_dense = 0;
  int tokens = 0;
  QString session_path;
};

class SweepWorker : public QObject {
  Q_OBJECT
 public:
  explicit SweepWorker(QObject* parent = nullptr);
  ~SweepWorker() override;
  // Both safe from the UI thread; the panel clears the flag before it queues a sweep, so a
  // Cancel pressed before the worker picks it up still counts.
  void requestCancel() { cancel_ = true; }
  void clearCancel() { cancel_ = false; }

 public slots:
  void run(const specula::ui::SweepRequest& request);

 signals:
  void stage(const QString& message);
  void loadProgress(int permille);
  void progress(int runs_done, int runs_total);
  void rowReady(const specula::ui::SweepRow& row);
  void finished(int runs);
  // interrupted: a run was under way (its session deleted), not the load or the gap between runs.
  void cancelled(int runs_done, bool interrupted);
  void failed(const QString& message);

 private:
  std::atomic<bool> cancel_{false};
  QString loaded_spec_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SpeculativeEngine> engine_;
  std::string model_sha256_;
};

}  // namespace specula::ui

Q_DECLARE_METATYPE(specula::ui::SweepRequest)
Q_DECLARE_METATYPE(specula::ui::SweepRow)
