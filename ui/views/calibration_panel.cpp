#include "ui/views/calibration_panel.h"

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
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardPaths>
#include <QVBoxLayout>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ui/views/run_panel.h"
#include "ui/views/progress_bar.h"

namespace specula::ui {
namespace {

QString default_data() {
  const QString path = QDir::cleanPath(QStringLiteral(SPECULA_SOURCE_DIR "/../shared/data/specbench-dev.jsonl"));
  return QFileInfo::exists(path) ? path : QString();
}

QString default_output() {
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
         QStringLiteral("/calibrations/calibration-%1.json")
             .arg(QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")));
}

QString join(const QList<int>& values) {
  QStringList parts;
  for (int v : values) parts << QString::number(v);
  return parts.join(QStringLiteral(", "));
}

}  // namespace

CalibrationPanel::CalibrationPanel(RunPanel* run_panel, QWidget* parent) : QWidget(parent), run_panel_(run_panel) {
  qRegisterMetaType<specula::ui::CalibrationRequest>();
  data_ = new QLineEdit(default_data());
  auto* browse_data = new QPushButton(tr("..."));
  auto* data_row = new QHBoxLayout;
  data_row->addWidget(data_, 1);
  data_row->addWidget(browse_data);
  prompts_ = new QSpinBox;
  prompts_->setRange(1, 100000);
  prompts_->setValue(8);
  prompts_->setToolTip(tr("Prompts to run, taken round-robin over the file's categories"));
  anchor_count_ = new QSpinBox;
  anchor_count_->setRange(1, 1024);
  anchor_count_->setValue(15);
  anchor_count_->setToolTip(tr("Anchor layers to pick, layer 0 included; the others reuse the nearest earlier anchor"));
  eta_ = new QDoubleSpinBox;
  eta_->setRange(0.01, 1.0);
  eta_->setSingleStep(0.05);
  eta_->setValue(0.2);
  eta_->setToolTip(tr("Kept fraction of KV blocks while measuring"));
  max_tokens_ = new QSpinBox;
  max_tokens_->setRange(1, 4096);
  max_tokens_->setValue(32);
  out_ = new QLineEdit(default_output());
  auto* browse_out = new QPushButton(tr("..."));
  auto* out_row = new QHBoxLayout;
  out_row->addWidget(out_, 1);
  out_row->addWidget(browse_out);

  auto* form = new QFormLayout;
  form->addRow(tr("Prompts file"), data_row);
  form->addRow(tr("Prompts"), prompts_);
  form->addRow(tr("Anchors"), anchor_count_);
  form->addRow(tr("Kept fraction (eta)"), eta_);
  form->addRow(tr("Tokens per prompt"), max_tokens_);
  form->addRow(tr("Write to"), out_row);
  auto* note =
      new QLabel(tr("The model comes from the run panel. Prompts run with sparse attention refreshing at "
                    "every layer; the anchors are the layers least like the layer before them."));
  note->setWordWrap(true);

  start_ = new QPushButton(tr("Calibrate"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  bar_ = new QProgressBar;
  bar_->setRange(0, 1);
  bar_->setValue(0);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(start_);
  buttons->addWidget(cancel_);
  buttons->addWidget(bar_, 1);
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  use_preset_ = new QComboBox;
  use_preset_->addItem(tr("SA with reuse"), QStringLiteral("sa-reuse"));
  use_preset_->addItem(tr("hybrid (SA with reuse + SFFN)"), QStringLiteral("hybrid"));
  use_ = new QPushButton(tr("Use in the run panel"));
  use_->setEnabled(false);
  use_->setToolTip(tr("Writes a sparse config naming this calibration and selects it in the run panel"));
  auto* use_row = new QHBoxLayout;
  use_row->addWidget(use_preset_);
  use_row->addWidget(use_, 1);

  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(note);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addLayout(use_row);
  layout->addStretch(1);

  worker_ = new CalibrationWorker;
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &CalibrationWorker::stage, status_, &QLabel::setText);
  connect_progress_bar(bar_, worker_, tr("%v / %m prompts"));
  connect(worker_, &CalibrationWorker::finished, this,
          [this](const QString& path, const QList<int>& anchors, int n_layers) {
            calibration_file_ = path;
            anchors_ = anchors;
            setRunning(false);
            status_->setText(tr("Anchors (%1 of %2 layers): %3. Written to %4")
                                 .arg(anchors.size())
                                 .arg(n_layers)
                                 .arg(join(anchors), path));
            use_->setEnabled(true);
            emit calibrationFinished(true);
          });
  connect(worker_, &CalibrationWorker::cancelled, this, [this] { onStopped(tr("Cancelled; nothing was written.")); });
  connect(worker_, &CalibrationWorker::failed, this, [this](const QString& message) {
    onStopped(tr("Failed: %1").arg(message));
    run_panel_->showError(message, tr("Calibration failed"));
  });
  thread_.start();

  connect(start_, &QPushButton::clicked, this, &CalibrationPanel::start);
  connect(cancel_, &QPushButton::clicked, this, &CalibrationPanel::cancel);
  connect(use_, &QPushButton::clicked, this, &CalibrationPanel::useInRunPanel);
  connect(browse_data, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Calibration prompts"), QString(), tr("JSONL (*.jsonl)"));
    if (!path.isEmpty()) data_->setText(path);
  });
  connect(browse_out, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Write the calibration to"), out_->text(), tr("JSON (*.json)"));
    if (!path.isEmpty()) out_->setText(path);
  });
}

CalibrationPanel::~CalibrationPanel() {
  if (worker_) worker_->requestCancel();
  thread_.quit();
  thread_.wait();
}

void CalibrationPanel::setDataFile(const QString& path) { data_->setText(path); }
void CalibrationPanel::setPromptCount(int prompts) { prompts_->setValue(prompts); }
void CalibrationPanel::setAnchors(int anchors) { anchor_count_->setValue(anchors); }
void CalibrationPanel::setMaxTokens(int tokens) { max_tokens_->setValue(tokens); }
void CalibrationPanel::setOutputFile(const QString& path) { out_->setText(path); }
QString CalibrationPanel::outputFile() const { return out_->text().trimmed(); }
QString CalibrationPanel::statusText() const { return status_->text(); }
int CalibrationPanel::progressValue() const { return bar_->value(); }
int CalibrationPanel::progressMaximum() const { return bar_->maximum(); }

void CalibrationPanel::start() {
  if (running_) return;
  CalibrationRequest request;
  request.model_spec = run_panel_->modelSpec();
  request.data = data_->text().trimmed();
  request.prompts = prompts_->value();
  request.options.anchors = anchor_count_->value();
  request.options.eta = eta_->value();
  request.options.max_tokens = max_tokens_->value();
  request.out = outputFile();
  status_->setText(tr("Starting ..."));
  bar_->setRange(0, 1);
  bar_->setValue(0);
  use_->setEnabled(false);
  setRunning(true);
  worker_->clearCancel();
  QMetaObject::invokeMethod(
      worker_, [worker = worker_, request] { worker->run(request); }, Qt::QueuedConnection);
}

void CalibrationPanel::cancel() {
  if (!running_) return;
  worker_->requestCancel();
  status_->setText(tr("Cancelling ..."));
}

void CalibrationPanel::setRunning(bool running) {
  running_ = running;
  start_->setEnabled(!running);
  cancel_->setEnabled(running);
}

void CalibrationPanel::onStopped(const QString& status) {
  setRunning(false);
  status_->setText(status);
  emit calibrationFinished(false);
}

bool CalibrationPanel::useInRunPanel() {
  if (calibration_file_.isEmpty()) return false;
  const QString preset = use_preset_->currentData().toString();
  QFileInfo calibration(calibration_file_);
  const QString config = calibration.absoluteDir().filePath(calibration.completeBaseName() + "." + preset + ".json");
  const nlohmann::json j = {{"preset", preset.toStdString()},
                            {"calibration", calibration.absoluteFilePath().toStdString()}};
  std::ofstream out(config.toStdString(), std::ios::trunc);
  out << j.dump(2) << "\n";
  if (!out) {
    run_panel_->showError(tr("%1: cannot write the sparse config").arg(config), tr("Calibration"));
    return false;
  }
  run_panel_->setSparseConfigFile(config);
  status_->setText(tr("The run panel now uses %1 (%2 with these anchors).").arg(QFileInfo(config).fileName(), preset));
  return true;
}

}  // namespace specula::ui
