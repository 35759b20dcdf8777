#include "ui/views/main_window.h"

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QShortcut>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTextCursor>
#include <QVBoxLayout>

#include "ui/live/generation_worker.h"

namespace specula::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  qRegisterMetaType<specula::ui::RunRequest>();
  setWindowTitle(tr("Specula"));
  resize(960, 680);

  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);

  auto* form = new QFormLayout;
  auto* model_row = new QHBoxLayout;
  model_edit_ = new QLineEdit(QStringLiteral("default"), central);
  model_edit_->setObjectName(QStringLiteral("modelEdit"));
  model_edit_->setToolTip(tr("A GGUF file, a Hugging Face directory, or 'default' (SmolLM2-135M-Instruct Q4_1)"));
  auto* browse = new QPushButton(tr("Open GGUF..."), central);
  connect(browse, &QPushButton::clicked, this, &MainWindow::browseModel);
  model_row->addWidget(model_edit_);
  model_row->addWidget(browse);
  form->addRow(tr("Model"), model_row);

  auto* options_row = new QHBoxLayout;
  chat_box_ = new QCheckBox(tr("Chat template"), central);
  chat_box_->setChecked(true);
  max_tokens_ = new QSpinBox(central);
  max_tokens_->setRange(1, 8192);
  max_tokens_->setValue(128);
  max_tokens_->setObjectName(QStringLiteral("maxTokens"));
  temperature_ = new QDoubleSpinBox(central);
  temperature_->setRange(0.0, 5.0);
  temperature_->setSingleStep(0.1);
  temperature_->setValue(0.0);
  temperature_->setToolTip(tr("0 = greedy"));
  options_row->addWidget(chat_box_);
  options_row->addWidget(new QLabel(tr("Max tokens"), central));
  options_row->addWidget(max_tokens_);
  options_row->addWidget(new QLabel(tr("Temperature"), central));
  options_row->addWidget(temperature_);
  options_row->addStretch();
  form->addRow(tr("Options"), options_row);
  layout->addLayout(form);

  auto* splitter = new QSplitter(Qt::Vertical, central);
  prompt_edit_ = new QPlainTextEdit(splitter);
  prompt_edit_->setObjectName(QStringLiteral("promptEdit"));
  prompt_edit_->setPlaceholderText(tr("Type a prompt, then press Run (Ctrl+Return)"));
  output_ = new QPlainTextEdit(splitter);
  output_->setObjectName(QStringLiteral("output"));
  output_->setReadOnly(true);
  splitter->setStretchFactor(1, 3);
  layout->addWidget(splitter, 1);

  auto* buttons = new QHBoxLayout;
  run_button_ = new QPushButton(tr("Run"), central);
  run_button_->setObjectName(QStringLiteral("runButton"));
  stop_button_ = new QPushButton(tr("Stop"), central);
  stop_button_->setEnabled(false);
  buttons->addStretch();
  buttons->addWidget(run_button_);
  buttons->addWidget(stop_button_);
  layout->addLayout(buttons);
  setCentralWidget(central);

  speed_label_ = new QLabel(this);
  statusBar()->addPermanentWidget(speed_label_);
  statusBar()->showMessage(tr("Ready"));

  connect(run_button_, &QPushButton::clicked, this, &MainWindow::startRun);
  connect(stop_button_, &QPushButton::clicked, this, &MainWindow::stopRun);
  auto* run_shortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), this);
  connect(run_shortcut, &QShortcut::activated, this, &MainWindow::startRun);

  worker_ = new GenerationWorker;
  worker_->moveToThread(&worker_thread_);
  connect(&worker_thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &GenerationWorker::status, this, [this](const QString& m) { statusBar()->showMessage(m); });
  connect(worker_, &GenerationWorker::textReady, this, [this](const QString& text) {
    output_->moveCursor(QTextCursor::End);
    output_->insertPlainText(text);
  });
  connect(worker_, &GenerationWorker::finished, this, [this](double prefill, double decode, int tokens) {
    setRunning(false);
    statusBar()->showMessage(tr("Done: %1 tokens").arg(tokens));
    speed_label_->setText(tr("prefill %1 tok/s  decode %2 tok/s").arg(prefill, 0, 'f', 1).arg(decode, 0, 'f', 1));
    emit runFinished(true);
  });
  connect(worker_, &GenerationWorker::failed, this, [this](const QString& message) {
    setRunning(false);
    statusBar()->showMessage(tr("Error: %1").arg(message));
    output_->appendPlainText(tr("[error] %1").arg(message));
    emit runFinished(false);
  });
  worker_thread_.start();
}

MainWindow::~MainWindow() {
  worker_->requestStop();
  worker_thread_.quit();
  worker_thread_.wait();
}

void MainWindow::setModelSpec(const QString& spec) { model_edit_->setText(spec); }
void MainWindow::setPrompt(const QString& prompt) { prompt_edit_->setPlainText(prompt); }
QString MainWindow::outputText() const { return output_->toPlainText(); }

void MainWindow::browseModel() {
  const QString file = QFileDialog::getOpenFileName(this, tr("Open a GGUF model"), QString(),
                                                    tr("GGUF models (*.gguf);;All files (*)"));
  if (!file.isEmpty()) model_edit_->setText(file);
}

void MainWindow::setRunning(bool running) {
  running_ = running;
  run_button_->setEnabled(!running);
  stop_button_->setEnabled(running);
}

void MainWindow::startRun() {
  if (running_) return;
  RunRequest request;
  request.model_spec = model_edit_->text().trimmed();
  request.prompt = prompt_edit_->toPlainText();
  request.chat = chat_box_->isChecked();
  request.options.max_tokens = max_tokens_->value();
  request.options.sampling.temperature = static_cast<float>(temperature_->value());
  output_->clear();
  setRunning(true);
  QMetaObject::invokeMethod(worker_, [worker = worker_, request] { worker->run(request); }, Qt::QueuedConnection);
}

void MainWindow::stopRun() { worker_->requestStop(); }

}  // namespace specula::ui
