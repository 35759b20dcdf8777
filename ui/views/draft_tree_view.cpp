#include "ui/views/draft_tree_view.h"

#include <QEvent>
#include <functional>
#include <QGraphicsEllipseItem>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsView>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/models/session_document.h"
#include "ui/views/plot_theme.h"

namespace specula::ui {
namespace {

constexpr double kColumn = 110;  // px between depths
constexpr double kRow = 34;      // px between leaf rows
constexpr double kNodeW = 78, kNodeH = 24;

QString node_tooltip(const TreeNodeLayout& n, const QString& text) {
  if (n.node < 0) return QObject::tr("committed context (the round starts here)");
  QString status = n.accepted ? QObject::tr("accepted") : n.visited ? QObject::tr("rejected") : QObject::tr("not visited");
  QString tip = QObject::tr("node %1, token %2 (%3), depth %4\ndraft p = %5")
                     .arg(n.node)
                     .arg(n.token)
                     .arg(text)
                     .arg(n.depth)
                     .arg(static_cast<double>(n.draft_prob), 0, 'f', 4);
  tip += n.target_prob >= 0 ? QObject::tr("\ntarget p = %1").arg(static_cast<double>(n.target_prob), 0, 'f', 4)
                            : QObject::tr("\ntarget p = (not computed)");
  return tip + "\n" + status;
}

// Refits the tree whenever the view itself changes size (the panel's resize comes before its
// layout has sized this child).
class FittingView : public QGraphicsView {
 public:
  FittingView(QGraphicsScene* scene, QWidget* parent, std::function<void()> fit)
      : QGraphicsView(scene, parent), fit_(std::move(fit)) {}

 protected:
  void resizeEvent(QResizeEvent* event) override {
    QGraphicsView::resizeEvent(event);
    fit_();
  }

 private:
  std::function<void()> fit_;
};

}  // namespace

DraftTreeView::DraftTreeView(SessionDocument* document, QWidget* parent)
    : QWidget(parent),
      document_(document),
      scene_(new QGraphicsScene(this)),
      view_(new FittingView(scene_, this, [this] { fit(); })),
      slider_(new QSlider(Qt::Horizontal, this)),
      play_(new QToolButton(this)),
      caption_(new QLabel(this)),
      timer_(new QTimer(this)) {
  setObjectName(QStringLiteral("draftTreeView"));
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setDragMode(QGraphicsView::ScrollHandDrag);
  play_->setText(tr("Play"));
  play_->setCheckable(true);
  play_->setToolTip(tr("Step through the rounds (Space)"));
  slider_->setToolTip(tr("Round"));
  timer_->setInterval(600);
  auto* controls = new QHBoxLayout;
  controls->addWidget(play_);
  controls->addWidget(slider_, 1);
  controls->addWidget(caption_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(view_, 1);
  layout->addLayout(controls);

  connect(slider_, &QSlider::valueChanged, document_, &SessionDocument::setRoundIndex);
  connect(play_, &QToolButton::toggled, this, &DraftTreeView::setPlaying);
  connect(timer_, &QTimer::timeout, this, &DraftTreeView::stepPlayback);
  connect(document_, &SessionDocument::sessionChanged, this, [this] {
    const int n = document_->isOpen() ? static_cast<int>(document_->data()->rounds.size()) : 0;
    slider_->setRange(0, std::max(0, n - 1));
  });
  connect(document_, &SessionDocument::roundChanged, this, &DraftTreeView::rebuild);
  if (document_->isOpen()) {
    slider_->setRange(0, std::max(0, static_cast<int>(document_->data()->rounds.size()) - 1));
  }
  rebuild();
}

bool DraftTreeView::isPlaying() const { return timer_->isActive(); }
QString DraftTreeView::caption() const { return caption_->text(); }

void DraftTreeView::setPlaying(bool playing) {
  if (playing) timer_->start(); else timer_->stop();
  if (play_->isChecked() != playing) play_->setChecked(playing);
  play_->setText(playing ? tr("Pause") : tr("Play"));
}

void DraftTreeView::stepPlayback() {
  if (!document_->isOpen()) return setPlaying(false);
  const int next = document_->roundIndex() + 1;
  if (next >= static_cast<int>(document_->data()->rounds.size())) return setPlaying(false);
  document_->setRoundIndex(next);
}

void DraftTreeView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) rebuild();
}

void DraftTreeView::fit() {
  if (scene_->items().isEmpty()) return;
  const QRectF bounds = scene_->itemsBoundingRect().adjusted(-10, -10, 10, 10);
  view_->fitInView(bounds, Qt::KeepAspectRatio);
  // Small trees would blow up to fill the view; cap the magnification.
  constexpr double kMaxScale = 1.5;
  if (view_->transform().m11() > kMaxScale) {
    view_->setTransform(QTransform::fromScale(kMaxScale, kMaxScale));
    view_->centerOn(bounds.center());
  }
}

void DraftTreeView::rebuild() {
  scene_->clear();
  layout_ = TreeLayout{};
  const QPalette& p = palette();
  view_->setBackgroundBrush(p.color(QPalette::Base));
  if (!document_->isOpen()) {
    caption_->setText(tr("no session"));
    return;
  }
  const SessionData& data = *document_->data();
  const int index = document_->roundIndex();
  if (index >= 0 && slider_->value() != index) {
    const QSignalBlocker block(slider_);
    slider_->setValue(index);
  }
  const profiler::RoundRow* round = data.round(document_->round());
  auto nodes = data.draft_nodes.find(document_->round());
  if (round == nullptr || nodes == data.draft_nodes.end()) {
    caption_->setText(round ? tr("round %1: no draft (plain decode step)").arg(round->round) : tr("no rounds"));
    auto* text = scene_->addSimpleText(caption_->text());
    text->setBrush(p.color(QPalette::WindowText));
    return;
  }
  layout_ = layout_draft_tree(nodes->second);
  QString next;
  if (round->next_token >= 0) {
    next = tr(", then %1 (%2)")
               .arg(document_->tokenText(round->next_token), round->bonus ? tr("bonus") : tr("target's token"));
  }
  caption_->setText(tr("round %1 of %2: %3 nodes, %4 accepted%5, context %6")
                        .arg(round->round)
                        .arg(data.rounds.back().round)
                        .arg(nodes->second.size())
                        .arg(round->accepted_length - 1)
                        .arg(next)
                        .arg(round->context_len));
  const QColor fg = p.color(QPalette::WindowText);
  const QColor good = accepted_colour(p), bad = rejected_colour(p), dim = dim_colour(p);
  const auto centre = [](const TreeNodeLayout& n) { return QPointF(n.depth * kColumn, n.row * kRow); };
  for (const auto& n : layout_.nodes) {  // edges under the nodes
    if (n.parent < 0) continue;
    const auto& parent = layout_.nodes[static_cast<size_t>(n.parent)];
    QPen pen(n.on_accepted_path ? good : dim, n.on_accepted_path ? 3.0 : 1.2);
    scene_->addLine(QLineF(centre(parent) + QPointF(kNodeW / 2, 0), centre(n) - QPointF(kNodeW / 2, 0)), pen);
  }
  for (const auto& n : layout_.nodes) {
    const QPointF c = centre(n);
    const QRectF box(c.x() - kNodeW / 2, c.y() - kNodeH / 2, kNodeW, kNodeH);
    QColor edge = n.on_accepted_path ? good : n.visited ? bad : dim;
    QColor fill = edge;
    fill.setAlpha(n.on_accepted_path ? 90 : 35);
    auto* item = scene_->addRect(box, QPen(edge, n.on_accepted_path ? 2.5 : 1.0), fill);
    const QString token = n.node < 0 ? QString() : document_->tokenText(n.token);
    item->setToolTip(node_tooltip(n, token));
    QString shown = n.node < 0 ? tr("context") : token;
    if (shown.size() > 10) shown = shown.left(9) + QChar(0x2026);
    auto* label = scene_->addSimpleText(shown);
    QColor text_colour = fg;
    if (!n.on_accepted_path && !n.visited) text_colour.setAlpha(120);
    label->setBrush(text_colour);
    label->setPos(c - QPointF(label->boundingRect().width() / 2, label->boundingRect().height() / 2));
    label->setToolTip(item->toolTip());
    if (n.node >= 0) {
      auto* prob = scene_->addSimpleText(QStringLiteral("%1").arg(static_cast<double>(n.draft_prob), 0, 'f', 2));
      QFont small = prob->font();
      small.setPointSizeF(small.pointSizeF() * 0.75);
      prob->setFont(small);
      prob->setBrush(dim.darker(100));
      prob->setPos(box.bottomLeft() + QPointF(2, 0));
    }
  }
  fit();
}

}  // namespace specula::ui
