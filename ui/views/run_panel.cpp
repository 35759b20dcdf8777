#include "ui/views/run_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTextCursor>
#include <QTextEdit>
#include <QVBoxLayout>

#include "engine/spec/head_drafter.h"

namespace specula::ui {
namespace {

// Background colours per TokenKind: readable on light and dark palettes because the text keeps
// the palette's colour and only the background is tinted (at low alpha).
QColor kind_colour(int kind) {
  switch (static_cast<TokenKind>(kind)) {
    case TokenKind::kAcceptedDraft:
      return QColor(46, 160, 67, 70);  // green: the draft saved a pass
    case TokenKind::kCorrection:
      return QColor(218, 54, 51, 60);  // red: the target overruled it
    case TokenKind::kBonus:
      return QColor(56, 132, 255, 70);  // blue: free token after a full path
    case TokenKind::kPlain:
      break;
  }
  return QColor(0, 0, 0, 0);
}

struct SparseChoice {
  const char* preset;  // engine/sparse/sparse_config.h's name
  const char* label;
};
constexpr SparseChoice kSparseChoices[] = {
    {"strict", "strict (dense verification)"},      {"sa", "SA: sparse attention"},
    {"sa-reuse", "SA with inter-layer reuse"},      {"sffn", "SFFN: sparse FFN"},
    {"smoe", "SMoE: expert skipping (MoE models)"}, {"hybrid", "hybrid: SA with reuse + SFFN"},
    {"ssv-exact", "SSV exact (group union)"},       {"ssv-approx", "SSV approximate (group shared)"},
};

QString mebibytes(qint64 bytes) { return QString::number(static_cast<double>(bytes) / (1024.0 * 1024.0), 'f', 2); }

}  // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  qRegisterMetaType<specula::ui::RunRequest>();
  session_dir_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/sessions";

  model_edit_ = new QLineEdit("default");
  model_edit_->setToolTip(tr("A .gguf file, a Hugging Face directory, or 'default' (SmolLM2-135M-Instruct)"));
  auto* open_file = new QPushButton(tr("GGUF..."));
  auto* open_dir = new QPushButton(tr("HF folder..."));
  backend_ = new QComboBox;
  backend_->addItems({"auto", "cpu", "cuda"});
  backend_->setToolTip(
      tr("Where the model runs: auto takes the GPU when one is present and the run needs nothing "
         "only the CPU has; layerskip drafts run beside it"));
  auto* model_row = new QHBoxLayout;
  model_row->addWidget(model_edit_, 1);
  model_row->addWidget(open_file);
  model_row->addWidget(open_dir);
  model_row->addWidget(new QLabel(tr("Backend")));
  model_row->addWidget(backend_);

  drafter_ = new QComboBox;
  drafter_->addItems({"none", "ngram", "layerskip", "head", "ngram+head"});
  drafter_->setToolTip(
      tr("head: a trained draft head (CPU only); ngram+head: ngram's drafts when the text repeats, "
         "else the head's"));
  head_button_ = new QPushButton;
  head_button_->setToolTip(tr("The draft head file (specula-draft-head safetensors) for the head drafters"));
  drafter_->setCurrentText("ngram");
  tree_edit_ = new QLineEdit("chain:4");
  tree_edit_->setToolTip(tr("chain:K | static:B1,B2,... | dynamic:DEPTH,TOPK,TOTAL"));
  accept_ = new QComboBox;
  accept_->addItems({"greedy", "sample", "cascade:0.5"});
  accept_->setEditable(true);
  accept_->setToolTip(tr("greedy and sample are lossless; cascade:TAU is lossy"));
  sparse_ = new QComboBox;
  for (const SparseChoice& c : kSparseChoices) sparse_->addItem(tr(c.label), QString::fromLatin1(c.preset));
  sparse_->setToolTip(tr("What verification may drop; the engine refuses combinations the model cannot run"));
  auto* open_sparse = new QPushButton(tr("Config JSON..."));
  open_sparse->setToolTip(tr("A sparse config JSON file (a preset with fields overridden); it replaces the preset"));
  sparse_file_label_ = new QLabel;
  sparse_clear_ = new QPushButton(tr("Clear"));
  sparse_clear_->setVisible(false);
  auto* sparse_row = new QHBoxLayout;
  sparse_row->addWidget(sparse_);
  sparse_row->addWidget(open_sparse);
  sparse_row->addWidget(sparse_file_label_, 1);
  sparse_row->addWidget(sparse_clear_);

  chat_box_ = new QCheckBox(tr("Chat template"));
  chat_box_->setChecked(true);
  max_tokens_ = new QSpinBox;
  max_tokens_->setRange(1, 8192);
  max_tokens_->setValue(128);
  temperature_ = new QDoubleSpinBox;
  temperature_->setRange(0.0, 2.0);
  temperature_->setSingleStep(0.1);
  temperature_->setToolTip(tr("0 = greedy"));

  library_ = new QComboBox;
  library_->addItem(tr("(type a prompt or pick one)"));
  auto* open_prompts = new QPushButton(tr("Open prompts..."));
  open_prompts->setToolTip(tr("A JSONL file in the Spec-Bench format (question_id, category, turns)"));
  auto* library_row = new QHBoxLayout;
  library_row->addWidget(library_, 1);
  library_row->addWidget(open_prompts);
  prompt_edit_ = new QPlainTextEdit;
  prompt_edit_->setPlaceholderText(tr("Prompt"));
  prompt_edit_->setMaximumHeight(110);

  auto* form = new QFormLayout;
  form->addRow(tr("Model"), model_row);
  auto* spec_row = new QHBoxLayout;
  spec_row->addWidget(new QLabel(tr("Drafter")));
  spec_row->addWidget(drafter_);
  spec_row->addWidget(head_button_);
  spec_row->addWidget(new QLabel(tr("Tree")));
  spec_row->addWidget(tree_edit_);
  spec_row->addWidget(new QLabel(tr("Accept")));
  spec_row->addWidget(accept_);
  form->addRow(tr("Speculation"), spec_row);
  form->addRow(tr("Sparse"), sparse_row);
  auto* gen_row = new QHBoxLayout;
  gen_row->addWidget(chat_box_);
  gen_row->addWidget(new QLabel(tr("Max tokens")));
  gen_row->addWidget(max_tokens_);
  gen_row->addWidget(new QLabel(tr("Temperature")));
  gen_row->addWidget(temperature_);
  gen_row->addStretch(1);
  form->addRow(tr("Generation"), gen_row);
  form->addRow(tr("Library"), library_row);
  form->addRow(tr("Prompt"), prompt_edit_);

  run_button_ = new QPushButton(tr("Run"));
  run_button_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  run_button_->setToolTip(tr("Run (Ctrl+Enter)"));
  stop_button_ = new QPushButton(tr("Stop"));
  stop_button_->setShortcut(QKeySequence(Qt::Key_Escape));
  stop_button_->setEnabled(false);
  counters_ = new QLabel;
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_button_);
  buttons->addWidget(stop_button_);
  buttons->addWidget(counters_, 1);
  // Shown only while a model loads: the fraction of its tensor bytes read, and Cancel (which
  // leaves no model loaded; Stop does the same).
  load_bar_ = new QProgressBar;
  load_bar_->setRange(0, 1000);
  load_bar_->setFormat(tr("Loading the model %p%"));
  load_cancel_ = new QPushButton(tr("Cancel"));
  load_cancel_->setToolTip(tr("Stop loading; no model stays loaded"));
  auto* load_row = new QHBoxLayout;
  load_row->addWidget(load_bar_, 1);
  load_row->addWidget(load_cancel_);
  hideLoadBar();

  output_ = new QTextEdit;
  output_->setReadOnly(true);
  auto* legend =
      new QLabel(tr("<span style='background:rgba(46,160,67,0.3)'>&nbsp;accepted draft&nbsp;</span> "
                    "<span style='background:rgba(218,54,51,0.25)'>&nbsp;correction&nbsp;</span> "
                    "<span style='background:rgba(56,132,255,0.3)'>&nbsp;bonus&nbsp;</span> "
                    "&nbsp;plain step"));
  session_label_ = new QLabel;
  session_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addLayout(buttons);
  layout->addLayout(load_row);
  layout->addWidget(output_, 1);
  layout->addWidget(legend);
  layout->addWidget(session_label_);

  const PromptLoad builtin = builtin_prompts();
  addPrompts(builtin.prompts);  // a failure here is a build problem; the library just stays empty

  worker_ = new GenerationWorker;
  worker_->moveToThread(&worker_thread_);
  connect(&worker_thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &GenerationWorker::segmentReady, this, &RunPanel::appendSegment);
  connect(worker_, &GenerationWorker::roundFinished, this, &RunPanel::onRoundFinished);
  connect(worker_, &GenerationWorker::status, this, [this](const QString& message) { counters_->setText(message); });
  connect(worker_, &GenerationWorker::sessionRecorded, this, [this](const QString& path, qint64 rounds) {
    last_session_ = path;
    session_label_->setText(tr("Recorded %1 rounds to %2").arg(rounds).arg(path));
    emit sessionRecorded(path);
  });
  connect(worker_, &GenerationWorker::loadProgress, this, [this](int permille) {
    load_bar_->setVisible(true);
    load_cancel_->setVisible(true);
    load_bar_->setValue(permille);
    emit modelLoadProgress(permille);
  });
  connect(worker_, &GenerationWorker::modelChanged, this, [this](const QString& spec) {
    loaded_model_ = spec;
    hideLoadBar();
  });
  connect(worker_, &GenerationWorker::loadCancelled, this, [this] {
    hideLoadBar();
    setRunning(false);
    counters_->setText(tr("Model load cancelled; no model is loaded."));
    emit runFinished(false);
  });
  connect(worker_, &GenerationWorker::kvTraffic, this, [this](qint64 read, qint64 dense) {
    kv_read_ = read;
    kv_dense_ = dense;
    refreshCounters();
    emit kvTrafficChanged(read, dense);
  });
  connect(worker_, &GenerationWorker::finished, this, [this](double prefill, double decode, int tokens) {
    tokens_ = tokens;
    setRunning(false);
    refreshCounters();
    counters_->setText(counters_->text() +
                       tr(" | prefill %1 tok/s, decode %2 tok/s").arg(prefill, 0, 'f', 1).arg(decode, 0, 'f', 1));
    emit runFinished(true);
  });
  connect(worker_, &GenerationWorker::failed, this, [this](const QString& message) {
    hideLoadBar();
    setRunning(false);
    counters_->setText(tr("Failed: %1").arg(message));
    showError(message);
    // The error also goes where the user is looking: the output pane, in the palette's link-visited red.
    QTextCursor cursor(output_->document());
    cursor.movePosition(QTextCursor::End);
    QTextCharFormat format;
    format.setForeground(QColor(200, 40, 40));
    cursor.insertText(
        (output_->document()->isEmpty() ? QString() : QStringLiteral("\n")) + tr("Error: %1").arg(message), format);
    emit runFinished(false);
  });
  worker_thread_.start();

  connect(run_button_, &QPushButton::clicked, this, &RunPanel::startRun);
  connect(stop_button_, &QPushButton::clicked, this, &RunPanel::stopRun);
  connect(load_cancel_, &QPushButton::clicked, this, &RunPanel::stopRun);
  connect(open_file, &QPushButton::clicked, this, &RunPanel::browseModelFile);
  connect(open_dir, &QPushButton::clicked, this, &RunPanel::browseModelDirectory);
  connect(open_prompts, &QPushButton::clicked, this, &RunPanel::choosePromptFile);
  connect(open_sparse, &QPushButton::clicked, this, &RunPanel::chooseSparseConfig);
  connect(sparse_clear_, &QPushButton::clicked, this, [this] { setSparseConfigFile(QString()); });
  connect(library_, &QComboBox::currentIndexChanged, this, [this](int index) {
    if (index >= 1 && index <= prompts_.size()) prompt_edit_->setPlainText(prompts_[index - 1].text);
  });
  connect(head_button_, &QPushButton::clicked, this, &RunPanel::chooseDraftHead);
  connect(drafter_, &QComboBox::currentTextChanged, this, [this](const QString& d) {
    tree_edit_->setEnabled(d != "none");
    head_button_->setEnabled(drafter_uses_head(d.toStdString()));
  });
  head_button_->setEnabled(false);
  const QString shipped = QStringLiteral(SPECULA_DRAFT_HEADS_DIR "/smollm2-135m-instruct.head.safetensors");
  setDraftHeadFile(QFileInfo::exists(shipped) ? shipped : QString());
}

RunPanel::~RunPanel() {
  if (worker_) worker_->requestStop();
  worker_thread_.quit();
  worker_thread_.wait();
}

void RunPanel::setModelSpec(const QString& spec) { model_edit_->setText(spec); }
void RunPanel::setPrompt(const QString& prompt) { prompt_edit_->setPlainText(prompt); }
void RunPanel::setDrafter(const QString& drafter) { drafter_->setCurrentText(drafter); }
void RunPanel::setBackend(const QString& backend) { backend_->setCurrentText(backend); }
QString RunPanel::backend() const { return backend_->currentText(); }
void RunPanel::setTree(const QString& tree) { tree_edit_->setText(tree); }
void RunPanel::setMaxTokens(int tokens) { max_tokens_->setValue(tokens); }
void RunPanel::setChat(bool chat) { chat_box_->setChecked(chat); }
void RunPanel::setSparsePreset(const QString& preset) {
  const int index = sparse_->findData(preset);
  if (index >= 0) {
    sparse_->setCurrentIndex(index);
  } else {  // an unknown name goes to the engine, which says what it accepts
    sparse_->addItem(preset, preset);
    sparse_->setCurrentIndex(sparse_->count() - 1);
  }
}

QString RunPanel::modelSpec() const { return model_edit_->text().trimmed(); }
QString RunPanel::drafter() const { return drafter_->currentText(); }
QString RunPanel::tree() const { return tree_edit_->text().trimmed(); }
QString RunPanel::prompt() const { return prompt_edit_->toPlainText(); }
QString RunPanel::acceptRule() const { return accept_->currentText().trimmed(); }

QString RunPanel::sparsePreset() const { return sparse_->currentData().toString(); }

QStringList RunPanel::sparsePresets() {
  QStringList names;
  for (const SparseChoice& c : kSparseChoices) names << QString::fromLatin1(c.preset);
  return names;
}

void RunPanel::setSparseConfigFile(const QString& path) {
  sparse_file_ = path;
  sparse_file_label_->setText(path.isEmpty() ? QString() : tr("config: %1").arg(QFileInfo(path).fileName()));
  sparse_file_label_->setToolTip(path);
  sparse_clear_->setVisible(!path.isEmpty());
  sparse_->setEnabled(path.isEmpty());
}

void RunPanel::setDraftHeadFile(const QString& path) {
  head_file_ = path;
  head_button_->setText(path.isEmpty() ? tr("Head...") : tr("Head: %1").arg(QFileInfo(path).fileName()));
}

void RunPanel::chooseDraftHead() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a draft head"), QFileInfo(head_file_).path(),
                                                    tr("Draft heads (*.safetensors)"));
  if (!path.isEmpty()) setDraftHeadFile(path);
}

void RunPanel::chooseSparseConfig() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a sparse config"), QString(), tr("JSON (*.json)"));
  if (!path.isEmpty()) setSparseConfigFile(path);
}

QString RunPanel::countersText() const { return counters_->text(); }
int RunPanel::loadProgressValue() const { return load_bar_->value(); }
bool RunPanel::isLoadBarVisible() const { return !load_bar_->isHidden(); }

void RunPanel::hideLoadBar() {
  load_bar_->setVisible(false);
  load_cancel_->setVisible(false);
}

void RunPanel::showError(const QString& message, const QString& title) {
  last_error_ = message;
  // Non-modal, one at a time: the window stays usable and a second failure updates the dialog.
  if (!error_box_) {
    error_box_ = new QMessageBox(QMessageBox::Critical, tr("The run failed"), QString(), QMessageBox::Close, this);
    error_box_->setObjectName(QStringLiteral("runErrorDialog"));
    error_box_->setModal(false);
    error_box_->setAttribute(Qt::WA_DeleteOnClose);
  }
  error_box_->setWindowTitle(title.isEmpty() ? tr("The run failed") : title);
  error_box_->setText(message);
  error_box_->show();
}

void RunPanel::setSessionDirectory(const QString& dir) { session_dir_ = dir; }
QString RunPanel::outputText() const { return output_->toPlainText(); }
int RunPanel::promptCount() const { return static_cast<int>(prompts_.size()); }

double RunPanel::meanAcceptedLength() const {
  return spec_rounds_ > 0 ? static_cast<double>(accepted_sum_) / spec_rounds_ : 1.0;
}

bool RunPanel::openPromptFile(const QString& path) {
  const PromptLoad load = load_prompt_library(path);
  if (!load.error.isEmpty()) {
    counters_->setText(load.error);
    return false;
  }
  addPrompts(load.prompts);
  return true;
}

void RunPanel::addPrompts(const QVector<LibraryPrompt>& prompts) {
  for (const LibraryPrompt& p : prompts) {
    prompts_.push_back(p);
    library_->addItem(p.label());
  }
}

void RunPanel::startRun() {
  if (running_) return;
  if (prompt_edit_->toPlainText().trimmed().isEmpty()) {
    counters_->setText(tr("Type a prompt or pick one from the library first."));
    emit runFinished(false);
    return;
  }
  if (!QDir().mkpath(session_dir_)) {
    counters_->setText(tr("Cannot create the sessions folder %1").arg(session_dir_));
    emit runFinished(false);
    return;
  }
  const bool head_drafter = drafter_uses_head(drafter_->currentText().toStdString());
  if (head_drafter && head_file_.isEmpty()) {
    counters_->setText(
        tr("Choose a draft head file first (Head...): the %1 drafter needs one.").arg(drafter_->currentText()));
    emit runFinished(false);
    return;
  }
  RunRequest request;
  request.model_spec = model_edit_->text().trimmed();
  request.prompt = prompt_edit_->toPlainText();
  request.chat = chat_box_->isChecked();
  request.options.max_tokens = max_tokens_->value();
  request.options.sampling.temperature = static_cast<float>(temperature_->value());
  request.drafter = drafter_->currentText();
  if (head_drafter) request.draft_head = head_file_;
  request.backend = backend_->currentText();
  request.tree = tree_edit_->text().trimmed();
  request.accept = accept_->currentText().trimmed();
  request.sparse = sparsePreset();
  request.sparse_config = sparse_file_;
  request.session_path =
      QDir(session_dir_)
          .filePath(QStringLiteral("run-%1.sqlite").arg(QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss-zzz")));
  output_->clear();
  chars_by_kind_ = QVector<int>(4, 0);
  tokens_ = rounds_ = spec_rounds_ = accepted_sum_ = 0;
  run_start_ms_ = QDateTime::currentMSecsSinceEpoch();
  session_label_->clear();
  kv_read_ = kv_dense_ = 0;
  last_error_.clear();
  setRunning(true);
  load_bar_->setValue(0);
  worker_->clearStop();
  QMetaObject::invokeMethod(
      worker_, [worker = worker_, request] { worker->run(request); }, Qt::QueuedConnection);
}

void RunPanel::stopRun() {
  if (running_) worker_->requestStop();
}

void RunPanel::appendSegment(const QString& text, int /*round*/, int kind) {
  QTextCursor cursor(output_->document());
  cursor.movePosition(QTextCursor::End);
  QTextCharFormat format;
  format.setBackground(kind_colour(kind));
  cursor.insertText(text, format);
  if (kind >= 0 && kind < chars_by_kind_.size()) chars_by_kind_[kind] += static_cast<int>(text.size());
  output_->ensureCursorVisible();
}

void RunPanel::onRoundFinished(int /*round*/, int accepted_length, bool speculative, int emitted) {
  ++rounds_;
  tokens_ += emitted;
  if (speculative) {
    ++spec_rounds_;
    accepted_sum_ += accepted_length;
  }
  refreshCounters();
}

void RunPanel::refreshCounters() {
  const double seconds = (QDateTime::currentMSecsSinceEpoch() - run_start_ms_) / 1000.0;
  QString text = tr("%1 tokens, %2 tok/s | mean accepted length %3 over %4 speculative of %5 rounds")
                     .arg(tokens_)
                     .arg(seconds > 0 ? tokens_ / seconds : 0.0, 0, 'f', 1)
                     .arg(meanAcceptedLength(), 0, 'f', 2)
                     .arg(spec_rounds_)
                     .arg(rounds_);
  if (kv_dense_ > 0) {
    text += tr(" | KV read %1 of %2 MiB dense (%3%)")
                .arg(mebibytes(kv_read_), mebibytes(kv_dense_))
                .arg(100.0 * static_cast<double>(kv_read_) / static_cast<double>(kv_dense_), 0, 'f', 1);
  }
  counters_->setText(text);
}

void RunPanel::setRunning(bool running) {
  running_ = running;
  run_button_->setEnabled(!running);
  stop_button_->setEnabled(running);
}

void RunPanel::browseModelFile() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a GGUF model"), QString(), tr("GGUF (*.gguf)"));
  if (!path.isEmpty()) model_edit_->setText(path);
}

void RunPanel::browseModelDirectory() {
  const QString path = QFileDialog::getExistingDirectory(this, tr("Open a Hugging Face model folder"));
  if (!path.isEmpty()) model_edit_->setText(path);
}

void RunPanel::choosePromptFile() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open prompts"), QString(), tr("JSONL (*.jsonl)"));
  if (path.isEmpty()) return;
  if (!openPromptFile(path)) QMessageBox::warning(this, tr("Prompts"), counters_->text());
}

}  // namespace specula::ui
