#pragma once
// The run panel: choose the model, the drafter, the tree and the acceptance rule, pick or type a
// prompt, press Run. The output streams in coloured by what produced each piece (accepted
// draft, correction, bonus, plain step), with live counters, and every run is recorded as a
// session (ui/live/generation_worker.h does the work on its own thread).
#include <QPointer>
#include <QThread>
#include <QVector>
#include <QWidget>

#include "ui/live/generation_worker.h"
#include "ui/live/prompt_library.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QMessageBox;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTextEdit;

namespace specula::ui {

class RunPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunPanel(QWidget* parent = nullptr);
  ~RunPanel() override;

  void setModelSpec(const QString& spec);
  void setPrompt(const QString& prompt);
  void setDrafter(const QString& drafter);  // none | ngram | layerskip | head | ngram+head
  void setBackend(const QString& backend);  // auto | cpu | cuda
  void setTree(const QString& tree);
  void setMaxTokens(int tokens);
  void setChat(bool chat);
  // Sparse verification: a preset name (strict, sa, sa-reuse, sffn, smoe, hybrid, ssv-exact,
  // ssv-approx), or a sparse config JSON file that replaces the preset (empty: use the preset).
  QString modelSpec() const;
  QString drafter() const;
  QString backend() const;
  QString tree() const;
  QString prompt() const;
  QString acceptRule() const;  // greedy | sample | cascade:TAU
  void setSparsePreset(const QString& preset);
  void setSparseConfigFile(const QString& path);
  // The draft head file for the head and ngram+head drafters (a specula-draft-head safetensors
  // trained for the model); starts as the one shipped for SmolLM2-135M-Instruct when found.
  void setDraftHeadFile(const QString& path);
  QString draftHeadFile() const { return head_file_; }
  QString sparsePreset() const;
  QString sparseConfigFile() const { return sparse_file_; }
  static QStringList sparsePresets();
  // Where runs are recorded (default: the app data folder's sessions/).
  void setSessionDirectory(const QString& dir);
  QString sessionDirectory() const { return session_dir_; }
  // Adds the prompts of a Spec-Bench style JSONL file to the library; false + a message on error.
  bool openPromptFile(const QString& path);

  QString outputText() const;
  QString lastSessionPath() const { return last_session_; }
  int promptCount() const;
  // Characters of output per TokenKind (index = kind), for tests and the legend.
  QVector<int> charactersByKind() const { return chars_by_kind_; }
  double meanAcceptedLength() const;
  bool isRunning() const { return running_; }
  // Committed-KV traffic of the current run so far, or of the last finished run (bytes): what
  // attention read, and what dense attention would have read. Updated after every round.
  qint64 kvBytesRead() const { return kv_read_; }
  qint64 kvBytesDense() const { return kv_dense_; }
  QString countersText() const;
  // The last failure's text ("" after a good run); it is also shown in a non-modal dialog.
  QString lastError() const { return last_error_; }
  // Shows a failure (the run's, or another long job's) in the panel's one non-modal dialog;
  // an empty title means "The run failed".
  void showError(const QString& message, const QString& title = QString());
  // The model the worker holds ("" when none: before the first run, or after a failed or
  // cancelled load), and the load bar (per mille of the tensor bytes read; hidden when idle).
  QString loadedModel() const { return loaded_model_; }
  int loadProgressValue() const;
  bool isLoadBarVisible() const;
  // The worker lives on its own thread; tests use it to act from inside a load.
  GenerationWorker* worker() const { return worker_; }

 public slots:
  void startRun();
  void stopRun();

 signals:
  void runFinished(bool ok);
  void sessionRecorded(const QString& path);                     // a finished run's session file
  void kvTrafficChanged(qint64 read_bytes, qint64 dense_bytes);  // after every round (running totals)
  void modelLoadProgress(int permille);

 private:
  void appendSegment(const QString& text, int round, int kind);
  void onRoundFinished(int round, int accepted_length, bool speculative, int emitted);
  void setRunning(bool running);
  void refreshCounters();
  void browseModelFile();
  void browseModelDirectory();
  void choosePromptFile();
  void chooseSparseConfig();
  void chooseDraftHead();
  void hideLoadBar();
  void addPrompts(const QVector<LibraryPrompt>& prompts);

  QThread worker_thread_;
  GenerationWorker* worker_ = nullptr;
  QLineEdit* model_edit_ = nullptr;
  QComboBox* drafter_ = nullptr;
  QComboBox* backend_ = nullptr;
  QLineEdit* tree_edit_ = nullptr;
  QComboBox* accept_ = nullptr;
  QComboBox* sparse_ = nullptr;
  QLabel* sparse_file_label_ = nullptr;
  QPushButton* sparse_clear_ = nullptr;
  QString sparse_file_;
  QPushButton* head_button_ = nullptr;  // shows the chosen head file; enabled for head drafters
  QString head_file_;
  QString last_error_;
  QPointer<QMessageBox> error_box_;
  qint64 kv_read_ = 0;
  qint64 kv_dense_ = 0;
  QCheckBox* chat_box_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QComboBox* library_ = nullptr;
  QPlainTextEdit* prompt_edit_ = nullptr;
  QTextEdit* output_ = nullptr;
  QPushButton* run_button_ = nullptr;
  QPushButton* stop_button_ = nullptr;
  QLabel* counters_ = nullptr;
  QProgressBar* load_bar_ = nullptr;
  QPushButton* load_cancel_ = nullptr;
  QString loaded_model_;
  QLabel* session_label_ = nullptr;
  QVector<LibraryPrompt> prompts_;
  QString session_dir_;
  QString last_session_;
  QString pending_session_;
  bool running_ = false;
  // Live counters of the current run.
  qint64 run_start_ms_ = 0;
  int tokens_ = 0;
  int spec_rounds_ = 0;
  int accepted_sum_ = 0;  // Σ accepted length over speculative rounds
  int rounds_ = 0;
  QVector<int> chars_by_kind_ = QVector<int>(4, 0);
};

}  // namespace specula::ui
