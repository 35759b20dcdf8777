#include "ui/views/session_browser.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QHBoxLayout>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "ui/models/session_files.h"

namespace specula::ui {

SessionBrowser::SessionBrowser(QWidget* parent) : QWidget(parent), header_(new QLabel(this)), list_(new QTreeWidget(this)) {
  setObjectName(QStringLiteral("sessionBrowser"));
  list_->setHeaderLabels({tr("Session"), tr("Modified"), tr("Model"), tr("Drafter"), tr("Sparse"), tr("Rounds"),
                          tr("Kernels")});
  list_->setRootIsDecorated(false);
  list_->setSortingEnabled(true);
  list_->sortByColumn(1, Qt::DescendingOrder);
  list_->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  auto* reload = new QPushButton(tr("Refresh"), this);
  auto* top = new QHBoxLayout;
  top->addWidget(header_, 1);
  top->addWidget(reload);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(top);
  layout->addWidget(list_, 1);
  connect(reload, &QPushButton::clicked, this, &SessionBrowser::refresh);
  connect(list_, &QTreeWidget::itemActivated, this,
          [this](QTreeWidgetItem* item) { emit openRequested(item->data(0, Qt::UserRole).toString()); });
}

void SessionBrowser::setDirectory(const QString& dir) {
  dir_ = dir;
  refresh();
}

int SessionBrowser::sessionCount() const { return list_->topLevelItemCount(); }

QString SessionBrowser::pathAt(int row) const {
  QTreeWidgetItem* item = list_->topLevelItem(row);
  return item ? item->data(0, Qt::UserRole).toString() : QString();
}

void SessionBrowser::refresh() {
  list_->clear();
  header_->setText(dir_.isEmpty() ? tr("No sessions folder") : dir_);
  if (dir_.isEmpty()) return;
  const QFileInfoList files = QDir(dir_).entryInfoList({QStringLiteral("*.sqlite")}, QDir::Files, QDir::Time);
  for (const QFileInfo& file : files) {
    auto* item = new QTreeWidgetItem(list_);
    item->setText(0, file.fileName());
    item->setData(0, Qt::UserRole, file.absoluteFilePath());
    item->setText(1, file.lastModified().toString(Qt::ISODate));
    auto summary = summarize_session(file.absoluteFilePath().toStdString());
    if (!summary) {
      item->setText(2, tr("unreadable"));
      item->setToolTip(0, QString::fromStdString(summary.error().message));
      item->setDisabled(true);
      continue;
    }
    item->setText(2, QString::fromStdString(summary->model_name));
    item->setText(3, QString::fromStdString(summary->drafter));
    item->setText(4, QString::fromStdString(summary->sparse));
    item->setData(5, Qt::DisplayRole, static_cast<qlonglong>(summary->rounds));
    item->setData(6, Qt::DisplayRole, static_cast<qlonglong>(summary->kernels));
    if (summary->status != "finished") item->setToolTip(0, tr("still recording, or the run was killed"));
  }
}

}  // namespace specula::ui
