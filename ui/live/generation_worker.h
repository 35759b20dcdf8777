#pragma once
// Runs engine generation on a worker thread and streams tokens to the UI by queued signals.
// The UI never blocks on the engine: it only starts a run and asks it to stop.
//
// Every run goes through the speculative loop (no drafter = plain decoding), so the UI sees the
// same observer events a recorded session holds: each streamed piece of text says which round
// made it and whether it was an accepted draft, a correction, a bonus token or a plain step.
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

#include "engine/generate.h"
#include "engine/spec/speculative.h"

namespace specula::ui {

struct RunRequest {
  QString model_spec = "default";  // path, HF directory or "default"
  QString prompt;
  bool chat = true;
  GenerateOptions options;
  QString drafter = "none";          // none | ngram | layerskip | head | ngram+head
  QString draft_head;                // head drafters: the head file (engine/spec/head_drafter.h)
  double head_min_confidence = 0.5;  // DraftHeadOptions::min_confidence, as specula-cli's default
  QString tree = "chain:4";          // chain:K | static:B1,B2,... | dynamic:DEPTH,TOPK,TOTAL
  QString accept = "greedy";         // greedy | sample | cascade:TAU
  QString layers = "every-other";    // layerskip subset
  QString backend = "auto";          // where the target runs: auto (the GPU when present and the run
                                     // needs nothing CPU-only) | cpu | cuda; layerskip drafts beside it
  QString sparse = "strict";         // a preset of engine/sparse/sparse_config.h
  QString sparse_config;             // a sparse config JSON file; when set it replaces `sparse`
  QString session_path;              // record the run here (SQLite); empty = don't record
};

// What made a streamed piece of text (the run panel colours by it).
enum class TokenKind : int {
  kPlain = 0,        // a plain decode step (or the token the prefill produced)
  kAcceptedDraft = 1,
  kCorrection = 2,   // the target's token after a rejected draft
  kBonus = 3,        // the target's token after a fully accepted path
};

class GenerationWorker : public QObject {
  Q_OBJECT
 public:
  explicit GenerationWorker(QObject* parent = nullptr);
  ~GenerationWorker() override;
  // Stop is honoured at the next token, or within one chunk of a model load (which then leaves
  // no model loaded); safe to call from any thread. The panel clears it before it queues a run,
  // so a Stop pressed before the worker picks the run up still counts.
  void requestStop() { stop_requested_ = true; }
  void clearStop() { stop_requested_ = false; }

 public slots:
  void run(const specula::ui::RunRequest& request);

 signals:
  void status(const QString& message);
  void textReady(const QString& text);  // complete UTF-8 characters only
  // The same text, with the round that emitted it (-1: the prefill's token) and its TokenKind.
  void segmentReady(const QString& text, int round, int kind);
  void roundFinished(int round, int accepted_length, bool speculative, int emitted);
  void sessionRecorded(const QString& path, qint64 rounds);
  // Committed KV the target's attention has read so far in the run, and what dense attention
  // would have read (bytes; engine/spec/metrics.h): sent after every round, and once more with
  // the run's totals just before finished.
  void kvTraffic(qint64 read_bytes, qint64 dense_bytes);
  void finished(double prefill_tokens_per_s, double decode_tokens_per_s, int tokens);
  void failed(const QString& message);
  // Model load: per-mille of the tensor bytes read, sent only when it changes.
  void loadProgress(int permille);
  // The loaded model's spec after a load, or empty when a failed or cancelled load left none.
  void modelChanged(const QString& spec);
  void loadCancelled();  // the run ended during its model load; nothing is loaded

 private:
  bool ensure_model(const QString& spec);
  // The engine for `backend` (and the sparse settings, which decide auto); false after emitting
  // failed() when the backend cannot run (no GPU, a model family the CUDA backend lacks).
  bool ensure_engine(const QString& backend, const SparseConfig& sparse);

  std::atomic<bool> stop_requested_{false};
  // The last model stays loaded (weights packed once) so repeated runs skip the load.
  QString loaded_spec_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SpeculativeEngine> engine_;
  QString engine_backend_;  // the backend engine_ runs on ("cpu" | "cuda")
};

}  // namespace specula::ui

Q_DECLARE_METATYPE(specula::ui::RunRequest)
