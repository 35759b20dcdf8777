#include "ui/views/sweep_panel.h"

#include <QCheckBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSet>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <utility>

#include "ui/views/run_panel.h"
#include "ui/views/progress_bar.h"

namespace specula::ui {
namespace {

// A few tree shapes of different kinds (engine/spec/draft_tree.h): a chain, a static tree and a
// dynamic top-k tree.
const QStringList kTreeShapes = {QStringLiteral("chain:4"), QStringLiteral("static:2,2,1,1"),
                                 QStringLiteral("dynamic:4,2,16")};

enum Column { kConfig = 0, kTokensPerS, kAccepted, kKv, kSession, kColumns };

QString mebibytes(qint64 bytes) { return QString::number(static_cast<double>(bytes) / (1024.0 * 1024.0), 'f', 2); }

void add_checkable(QListWidget* list, const QString& text, bool checked) {
  auto* item = new QListWidgetItem(text, list);
  item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
  item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
}

QStringList checked(const QListWidget* list) {
  QStringList out;
  for (int i = 0; i < list->count(); ++i) {
    if (list->item(i)->checkState() == Qt::Checked) out << list->item(i)->text();
  }
  return out;
}

void check_exactly(QListWidget* list, const QStringList& names) {
  for (const QString& name : names) {
    if (list->findItems(name, Qt::MatchExactly).isEmpty()) add_checkable(list, name, true);
  }
  for (int i = 0; i < list->count(); ++i) {
    list->item(i)->setCheckState(names.contains(list->item(i)->text()) ? Qt::Checked : Qt::Unchecked);
  }
}

}  // namespace

SweepPanel::SweepPanel(RunPanel* run_panel, QWidget* parent) : QWidget(parent), run_panel_(run_panel) {
  qRegisterMetaType<specula::ui::SweepRequest>();
  qRegisterMetaType<specula::ui::SweepRow>();
  prompt_ = new QPlainTextEdit;
  prompt_->setPlaceholderText(tr("The prompt every configuration runs"));
  prompt_->setMaximumHeight(80);
  auto* take = new QPushButton(tr("Take the run panel's prompt"));
  chat_ = new QCheckBox(tr("Chat template"));
  chat_->setChecked(true);
  max_tokens_ = new QSpinBox;
  max_tokens_->setRange(1, 8192);
  max_tokens_->setValue(64);
  auto* gen_row = new QHBoxLayout;
  gen_row->addWidget(take);
  gen_row->addWidget(chat_);
  gen_row->addWidget(new QLabel(tr("Max tokens")));
  gen_row->addWidget(max_tokens_);
  gen_row->addStretch(1);

  presets_ = new QListWidget;
  for (const QString& preset : RunPanel::sparsePresets()) add_checkable(presets_, preset, preset == "strict");
  presets_->setToolTip(tr("Sparse presets to run (the engine refuses those the model cannot run)"));
  trees_ = new QListWidget;
  for (const QString& shape : kTreeShapes) add_checkable(trees_, shape, shape == kTreeShapes.front());
  trees_->setToolTip(tr("Draft-tree shapes to run; with the drafter 'none' the tree is not used"));
  new_tree_ = new QLineEdit;
  new_tree_->setPlaceholderText(tr("Add a shape: chain:K | static:B1,B2,... | dynamic:DEPTH,TOPK,TOTAL"));
  auto* lists = new QHBoxLayout;
  auto* preset_col = new QVBoxLayout;
  preset_col->addWidget(new QLabel(tr("Sparse presets")));
  preset_col->addWidget(presets_);
  auto* tree_col = new QVBoxLayout;
  tree_col->addWidget(new QLabel(tr("Tree shapes")));
  tree_col->addWidget(trees_);
  tree_col->addWidget(new_tree_);
  lists->addLayout(preset_col);
  lists->addLayout(tree_col);
  count_ = new QLabel;
  auto* note =
      new QLabel(tr("The model, drafter and acceptance rule come from the run panel. Each run is recorded "
                    "as a session in the run panel's sessions folder; Cancel deletes the interrupted "
                    "run's session and keeps the finished ones."));
  note->setWordWrap(true);

  start_ = new QPushButton(tr("Run sweep"));
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

  table_ = new QTableWidget(0, kColumns);
  table_->setHorizontalHeaderLabels(
      {tr("Configuration"), tr("Tokens/s"), tr("Mean accepted length"), tr("KV read vs dense"), tr("Session file")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->setVisible(false);
  table_->setToolTip(tr("Double-click a row to open its session; select two rows to compare them"));
  compare_ = new QPushButton(tr("Compare"));
  compare_->setEnabled(false);
  compare_->setToolTip(tr("Opens the two selected runs side by side"));

  auto* form = new QFormLayout;
  form->addRow(tr("Prompt"), prompt_);
  form->addRow(QString(), gen_row);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addLayout(lists);
  layout->addWidget(count_);
  layout->addWidget(note);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addWidget(table_, 1);
  layout->addWidget(compare_);

  worker_ = new SweepWorker;
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &SweepWorker::stage, status_, &QLabel::setText);
  connect_progress_bar(bar_, worker_, tr("%v / %m runs"));
  connect(worker_, &SweepWorker::rowReady, this, &SweepPanel::addRow);
  connect(worker_, &SweepWorker::finished, this, [this](int runs) {
    setRunning(false);
    status_->setText(tr("Done: %1 runs recorded.").arg(runs));
    emit sweepFinished(true);
  });
  connect(worker_, &SweepWorker::cancelled, this, [this](int done, bool interrupted) {
    QString text = tr("Cancelled after %1 of %2 runs").arg(done).arg(total_);
    if (interrupted) text += tr("; the interrupted run's session was deleted");
    onStopped(text + ".");
  });
  connect(worker_, &SweepWorker::failed, this, [this](const QString& message) {
    onStopped(tr("Failed: %1").arg(message));
    run_panel_->showError(message, tr("Sweep failed"));
  });
  thread_.start();

  connect(take, &QPushButton::clicked, this, &SweepPanel::takeRunPanelPrompt);
  connect(start_, &QPushButton::clicked, this, &SweepPanel::start);
  connect(cancel_, &QPushButton::clicked, this, &SweepPanel::cancel);
  connect(presets_, &QListWidget::itemChanged, this, &SweepPanel::refreshCount);
  connect(trees_, &QListWidget::itemChanged, this, &SweepPanel::refreshCount);
  connect(new_tree_, &QLineEdit::returnPressed, this, [this] {
    const QString shape = new_tree_->text().trimmed();
    if (shape.isEmpty()) return;
    if (trees_->findItems(shape, Qt::MatchExactly).isEmpty()) add_checkable(trees_, shape, true);
    new_tree_->clear();
  });
  connect(table_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) { openRow(row); });
  connect(table_, &QTableWidget::itemSelectionChanged, this,
          [this] { compare_->setEnabled(table_->selectionModel()->selectedRows().size() == 2); });
  connect(compare_, &QPushButton::clicked, this, &SweepPanel::compareSelected);
  refreshCount();
}

SweepPanel::~SweepPanel() {
  if (worker_) worker_->requestCancel();
  thread_.quit();
  thread_.wait();
}

void SweepPanel::setPrompt(const QString& prompt) { prompt_->setPlainText(prompt); }
QString SweepPanel::prompt() const { return prompt_->toPlainText(); }
void SweepPanel::takeRunPanelPrompt() { prompt_->setPlainText(run_panel_->prompt()); }
void SweepPanel::setChat(bool chat) { chat_->setChecked(chat); }
void SweepPanel::setMaxTokens(int tokens) { max_tokens_->setValue(tokens); }
void SweepPanel::setPresets(const QStringList& presets) { check_exactly(presets_, presets); }
void SweepPanel::setTreeShapes(const QStringList& shapes) { check_exactly(trees_, shapes); }
QString SweepPanel::statusText() const { return status_->text(); }
int SweepPanel::progressValue() const { return bar_->value(); }
int SweepPanel::progressMaximum() const { return bar_->maximum(); }

QList<SweepConfig> SweepPanel::configurations() const {
  QStringList shapes = checked(trees_);
  // Without a drafter every shape runs the same plain decoding: one run per preset.
  if (run_panel_->drafter() == "none" && !shapes.isEmpty()) shapes = {shapes.front()};
  QList<SweepConfig> configs;
  for (const QString& preset : checked(presets_)) {
    for (const QString& shape : shapes) configs.push_back({preset, shape});
  }
  return configs;
}

void SweepPanel::refreshCount() {
  const qsizetype n = configurations().size();
  count_->setText(n == 1 ? tr("1 configuration") : tr("%1 configurations").arg(n));
}

void SweepPanel::start() {
  if (running_) return;
  SweepRequest request;
  request.model_spec = run_panel_->modelSpec();
  request.prompt = prompt();
  if (request.prompt.trimmed().isEmpty()) request.prompt = run_panel_->prompt();
  request.chat = chat_->isChecked();
  request.max_tokens = max_tokens_->value();
  request.drafter = run_panel_->drafter();
  request.accept = run_panel_->acceptRule();
  request.configs = configurations();
  request.session_dir = run_panel_->sessionDirectory();
  total_ = static_cast<int>(request.configs.size());
  rows_.clear();
  table_->setRowCount(0);
  compare_->setEnabled(false);
  status_->setText(tr("Starting ..."));
  bar_->setRange(0, 1);
  bar_->setValue(0);
  setRunning(true);
  worker_->clearCancel();
  QMetaObject::invokeMethod(
      worker_, [worker = worker_, request] { worker->run(request); }, Qt::QueuedConnection);
}

void SweepPanel::cancel() {
  if (!running_) return;
  worker_->requestCancel();
  status_->setText(tr("Cancelling ..."));
}

void SweepPanel::setRunning(bool running) {
  running_ = running;
  start_->setEnabled(!running);
  cancel_->setEnabled(running);
}

void SweepPanel::onStopped(const QString& status) {
  setRunning(false);
  status_->setText(status);
  emit sweepFinished(false);
}

void SweepPanel::addRow(const SweepRow& row) {
  rows_.push_back(row);
  const int r = table_->rowCount();
  table_->insertRow(r);
  const double share = row.kv_bytes_dense > 0
                           ? 100.0 * static_cast<double>(row.kv_bytes_read) / static_cast<double>(row.kv_bytes_dense)
                           : 0.0;
  const QString cells[kColumns] = {
      row.config, QString::number(row.tokens_per_s, 'f', 1), QString::number(row.mean_accepted_length, 'f', 2),
      tr("%1 of %2 MiB (%3%)").arg(mebibytes(row.kv_bytes_read), mebibytes(row.kv_bytes_dense)).arg(share, 0, 'f', 1),
      QFileInfo(row.session_path).fileName()};
  for (int c = 0; c < kColumns; ++c) {
    auto* item = new QTableWidgetItem(cells[c]);
    if (c == kSession) item->setToolTip(row.session_path);
    table_->setItem(r, c, item);
  }
}

void SweepPanel::openRow(int row) {
  if (row < 0 || row >= rows_.size()) return;
  emit openRequested(rows_[row].session_path);
}

bool SweepPanel::compareSelected() {
  const QModelIndexList selected = table_->selectionModel()->selectedRows();
  if (selected.size() != 2) return false;
  int a = selected[0].row(), b = selected[1].row();
  if (a > b) std::swap(a, b);
  emit compareRequested(rows_[a].session_path, rows_[b].session_path);
  return true;
}

}  // namespace specula::ui
