#include "ui/views/compare_window.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include "ui/models/session_document.h"

namespace specula::ui {

CompareWindow::CompareWindow(SessionDocument* left, SessionDocument* right, QWidget* parent)
    : QWidget(parent), left_(left), right_(right), kind_(new QComboBox(this)), linked_(new QCheckBox(tr("same round"), this)) {
  setObjectName(QStringLiteral("compareWindow"));
  setWindowTitle(tr("Compare %1 and %2").arg(QFileInfo(left->path()).fileName(), QFileInfo(right->path()).fileName()));
  kind_->addItems(session_view_names());
  linked_->setChecked(true);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("View"), this));
  top->addWidget(kind_);
  top->addWidget(linked_);
  top->addStretch(1);
  top->addWidget(new QLabel(QFileInfo(left->path()).fileName() + "  |  " + QFileInfo(right->path()).fileName(), this));
  views_ = new QHBoxLayout;
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addLayout(views_, 1);
  connect(kind_, &QComboBox::currentTextChanged, this, [this](const QString& name) {
    if (auto kind = parse_session_view(name)) setView(*kind);
  });
  // Linked rounds follow by position, so sessions with different round ids still line up.
  connect(left_, &SessionDocument::roundChanged, this, [this] {
    if (linked_->isChecked() && right_->roundIndex() != left_->roundIndex()) right_->setRoundIndex(left_->roundIndex());
  });
  connect(right_, &SessionDocument::roundChanged, this, [this] {
    if (linked_->isChecked() && left_->roundIndex() != right_->roundIndex()) left_->setRoundIndex(right_->roundIndex());
  });
  resize(1500, 700);
  setView(SessionViewKind::kTree);
}

void CompareWindow::setRoundsLinked(bool linked) { linked_->setChecked(linked); }

void CompareWindow::setView(SessionViewKind kind) {
  const QString name = session_view_names().at(static_cast<int>(kind));
  if (kind_->currentText() != name) {
    const QSignalBlocker block(kind_);
    kind_->setCurrentText(name);
  }
  delete left_view_;
  delete right_view_;
  left_view_ = create_session_view(kind, left_, this);
  right_view_ = create_session_view(kind, right_, this);
  views_->addWidget(left_view_, 1);
  views_->addWidget(right_view_, 1);
}

}  // namespace specula::ui
