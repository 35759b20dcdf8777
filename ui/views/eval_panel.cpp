#include "ui/views/eval_panel.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "ui/views/run_panel.h"
#include "ui/views/progress_bar.h"

namespace specula::ui {
namespace {

// The development sets beside the repository (shared/data), when they are there.
QString default_data(const QString& task) {
  const QString name = task == "gsm8k" ? QStringLiteral("gsm8k-dev.jsonl")
                       : task == "specbench" ? QStringLiteral("specbench-dev.jsonl")
                                             : QString();
  if (name.isEmpty()) return {};
  const QString path = QDir::cleanPath(QStringLiteral(SPECULA_SOURCE_DIR "/../shared/data/") + name);
  return QFileInfo::exists(path) ? path : QString();
}

QString mebibytes(qint64 bytes) { return QString::number(static_cast<double>(bytes) / (1024.0 * 1024.0), 'f', 2); }

}  // namespace

EvalPanel::EvalPanel(const RunPanel* run_panel, QWidget* parent) : QWidget(parent), run_panel_(run_panel) {
  qRegisterMetaType<specula::ui::EvalRequest>();
  qRegisterMetaType<specula::ui::EvalOutcome>();
  task_ = new QComboBox;
  task_->addItems({"gsm8k", "specbench", "passkey"});
  data_ = new QLineEdit(default_data("gsm8k"));
  auto* browse = new QPushButton(tr("..."));
  auto* data_row = new QHBoxLayout;
  data_row->addWidget(data_, 1);
  data_row->addWidget(browse);
  limit_ = new QSpinBox;
  limit_->setRange(1, 100000);
  limit_->setValue(5);
  max_tokens_ = new QSpinBox;
  max_tokens_->setRange(0, 8192);
  max_tokens_->setSpecialValueText(tr("task's own"));
  context_ = new QSpinBox;
  context_->setRange(64, 1 << 20);
  context_->setSingleStep(512);
  context_->setValue(2048);
  context_->setEnabled(false);

  auto* form = new QFormLayout;
  form->addRow(tr("Task"), task_);
  form->addRow(tr("Data"), data_row);
  form->addRow(tr("Items"), limit_);
  form->addRow(tr("Max tokens"), max_tokens_);
  form->addRow(tr("Passkey context"), context_);
  auto* note = new QLabel(tr("Model, drafter, tree and sparse settings come from the run panel; each item runs "
                             "strict and with those settings."));
  note->setWordWrap(true);

  start_ = new QPushButton(tr("Evaluate"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  bar_ = new QProgressBar;
  bar_->setRange(0, 1);
  bar_->setValue(0);
  bar_->setFormat(tr("%v / %m runs"));
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(start_);
  buttons->addWidget(cancel_);
  buttons->addWidget(bar_, 1);
  status_ = new QLabel;
  status_->setWordWrap(true);
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(note);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addWidget(summary_, 1);

  worker_ = new EvalWorker;
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &EvalWorker::stage, status_, &QLabel::setText);
  connect_progress_bar(bar_, worker_, tr("%v / %m runs"));
  connect(worker_, &EvalWorker::finished, this, &EvalPanel::onFinished);
  connect(worker_, &EvalWorker::cancelled, this, [this] { onStopped(tr("Cancelled.")); });
  connect(worker_, &EvalWorker::failed, this, [this](const QString& message) { onStopped(tr("Failed: %1").arg(message)); });
  thread_.start();

  connect(start_, &QPushButton::clicked, this, &EvalPanel::start);
  connect(cancel_, &QPushButton::clicked, this, &EvalPanel::cancel);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Evaluation data"), QString(), tr("JSONL (*.jsonl)"));
    if (!path.isEmpty()) data_->setText(path);
  });
  connect(task_, &QComboBox::currentTextChanged, this, [this](const QString& task) {
    data_->setText(default_data(task));
    data_->setEnabled(task != "passkey");
    context_->setEnabled(task == "passkey");
  });
}

EvalPanel::~EvalPanel() {
  if (worker_) worker_->requestCancel();
  thread_.quit();
  thread_.wait();
}

void EvalPanel::setTask(const QString& task) { task_->setCurrentText(task); }
void EvalPanel::setDataFile(const QString& path) { data_->setText(path); }
void EvalPanel::setLimit(int items) { limit_->setValue(items); }
void EvalPanel::setMaxTokens(int tokens) { max_tokens_->setValue(tokens); }
void EvalPanel::setContextTokens(int tokens) { context_->setValue(tokens); }
QString EvalPanel::statusText() const { return status_->text(); }
QString EvalPanel::summaryText() const { return summary_->text(); }
int EvalPanel::progressValue() const { return bar_->value(); }
int EvalPanel::progressMaximum() const { return bar_->maximum(); }

void EvalPanel::start() {
  if (running_) return;
  EvalRequest request;
  request.model_spec = run_panel_->modelSpec();
  request.drafter = run_panel_->drafter();
  request.tree = run_panel_->tree();
  request.sparse = run_panel_->sparsePreset();
  request.sparse_config = run_panel_->sparseConfigFile();
  request.task = task_->currentText();
  request.data = data_->text().trimmed();
  request.limit = limit_->value();
  request.max_tokens = max_tokens_->value();
  request.context_tokens = context_->value();
  summary_->clear();
  status_->setText(tr("Starting ..."));
  bar_->setFormat(tr("%v / %m runs"));
  bar_->setRange(0, 1);
  bar_->setValue(0);
  setRunning(true);
  worker_->clearCancel();
  QMetaObject::invokeMethod(worker_, [worker = worker_, request] { worker->run(request); }, Qt::QueuedConnection);
}

void EvalPanel::cancel() {
  if (!running_) return;
  worker_->requestCancel();
  status_->setText(tr("Cancelling ..."));
}

void EvalPanel::setRunning(bool running) {
  running_ = running;
  start_->setEnabled(!running);
  cancel_->setEnabled(running);
}

void EvalPanel::onFinished(const EvalOutcome& o) {
  outcome_ = o;
  setRunning(false);
  status_->setText(tr("Done: %1 items.").arg(o.items));
  QString text = tr("Agreement with strict: %1% of tokens, ROUGE-L %2, %3 of %4 outputs identical\n"
                    "Mean accepted length: strict %5, configured %6\n"
                    "KV read after prefill: strict %7 MiB, configured %8 MiB (%9%)")
                     .arg(100.0 * o.token_agreement, 0, 'f', 1)
                     .arg(o.rouge_l, 0, 'f', 3)
                     .arg(o.identical_outputs)
                     .arg(o.items)
                     .arg(o.strict_accepted_length, 0, 'f', 2)
                     .arg(o.configured_accepted_length, 0, 'f', 2)
                     .arg(mebibytes(o.strict_kv_bytes), mebibytes(o.configured_kv_bytes))
                     .arg(o.strict_kv_bytes > 0 ? 100.0 * static_cast<double>(o.configured_kv_bytes) /
                                                      static_cast<double>(o.strict_kv_bytes)
                                                : 100.0,
                          0, 'f', 1);
  if (o.strict_score >= 0) {
    text += tr("\nTask score: strict %1, configured %2 points").arg(o.strict_score, 0, 'f', 1).arg(o.configured_score, 0, 'f', 1);
  }
  summary_->setText(text);
  emit evalFinished(true);
}

void EvalPanel::onStopped(const QString& status) {
  setRunning(false);
  status_->setText(status);
  emit evalFinished(false);
}

}  // namespace specula::ui
