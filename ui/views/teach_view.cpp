#include "ui/views/teach_view.h"

#include <QGraphicsRectItem>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsView>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>
#include <algorithm>
#include <set>

#include "ui/models/session_document.h"
#include "ui/views/plot_theme.h"

namespace specula::ui {
namespace {

constexpr double kColumn = 130, kRow = 44, kNodeW = 96, kNodeH = 30;  // scene units (scaled by fitInView)
constexpr double kBlockW = 14, kBlockH = 22;

QColor with_alpha(QColor c, int alpha) {
  c.setAlpha(alpha);
  return c;
}

// Keeps the whole scene in view whenever the view itself changes size (its parent's resize
// comes before the layout has sized it).
class FittingView : public QGraphicsView {
 public:
  using QGraphicsView::QGraphicsView;
  void fit() {
    if (scene() != nullptr && !scene()->items().isEmpty()) {
      fitInView(scene()->itemsBoundingRect().adjusted(-20, -20, 20, 20), Qt::KeepAspectRatio);
    }
  }

 protected:
  void resizeEvent(QResizeEvent* event) override {
    QGraphicsView::resizeEvent(event);
    fit();
  }
};

}  // namespace

TeachView::TeachView(SessionDocument* document, QWidget* parent)
    : QWidget(parent), document_(document), scene_(new QGraphicsScene(this)), view_(new FittingView(scene_, this)) {
  setObjectName(QStringLiteral("teachView"));
  setFocusPolicy(Qt::StrongFocus);
  auto* strip = new QHBoxLayout;
  for (int i = 0; i < kTeachStageCount; ++i) {
    if (i > 0) strip->addWidget(new QLabel(QStringLiteral("→")));
    auto* label = new QLabel(QString::fromLatin1(teach_stage_title(static_cast<TeachStage>(i)).data()));
    label->setObjectName(QStringLiteral("teachStage%1").arg(i));
    label->setAlignment(Qt::AlignCenter);
    label->setMargin(6);
    stage_labels_ << label;
    strip->addWidget(label, 1);
  }
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  view_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  view_->setFocusPolicy(Qt::NoFocus);
  explanation_ = new QLabel;
  explanation_->setObjectName(QStringLiteral("teachExplanation"));
  explanation_->setWordWrap(true);
  explanation_->setMinimumHeight(80);
  round_label_ = new QLabel;
  prev_ = new QPushButton(tr("◀ Back"));
  next_ = new QPushButton(tr("Next ▶"));
  for (QPushButton* b : {prev_, next_}) b->setFocusPolicy(Qt::NoFocus);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(prev_);
  buttons->addWidget(round_label_, 1, Qt::AlignCenter);
  buttons->addWidget(next_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(strip);
  layout->addWidget(view_, 3);
  layout->addWidget(explanation_, 1);
  layout->addLayout(buttons);

  connect(prev_, &QPushButton::clicked, this, &TeachView::previous);
  connect(next_, &QPushButton::clicked, this, &TeachView::next);
  connect(document_, &SessionDocument::sessionChanged, this, [this] {
    stage_ = TeachStage::kDraft;
    rebuild();
  });
  connect(document_, &SessionDocument::roundChanged, this, [this] { rebuild(); });
  applyFonts();
  rebuild();
}

QString TeachView::explanation() const { return explanation_->text(); }

QString TeachView::highlightedStageTitle() const {
  return stage_labels_[static_cast<int>(stage_)]->text();
}

void TeachView::setStage(TeachStage stage) {
  if (stage == stage_) return;
  stage_ = stage;
  draw();
  emit stageChanged(stage_);
}

void TeachView::next() {
  const int s = static_cast<int>(stage_);
  if (s + 1 < kTeachStageCount) return setStage(static_cast<TeachStage>(s + 1));
  const int index = document_->roundIndex();
  if (!document_->isOpen() || index + 1 >= static_cast<int>(document_->data()->rounds.size())) return;
  stage_ = TeachStage::kDraft;
  document_->setRoundIndex(index + 1);  // roundChanged redraws
  emit stageChanged(stage_);
}

void TeachView::previous() {
  const int s = static_cast<int>(stage_);
  if (s > 0) return setStage(static_cast<TeachStage>(s - 1));
  const int index = document_->roundIndex();
  if (index <= 0) return;
  stage_ = TeachStage::kCommit;
  document_->setRoundIndex(index - 1);
  emit stageChanged(stage_);
}

void TeachView::setPresentationScale(double scale) {
  scale_ = std::clamp(scale, 0.75, 4.0);
  applyFonts();
  draw();
}

void TeachView::applyFonts() {
  QFont base = QWidget::font();
  base.setPointSizeF(QFont().pointSizeF() * scale_);
  for (QLabel* l : stage_labels_) l->setFont(base);
  round_label_->setFont(base);
  prev_->setFont(base);
  next_->setFont(base);
  QFont text = base;
  text.setPointSizeF(base.pointSizeF() * 1.1);
  explanation_->setFont(text);
}

void TeachView::keyPressEvent(QKeyEvent* event) {
  switch (event->key()) {
    case Qt::Key_Right:
    case Qt::Key_PageDown:
    case Qt::Key_Space: next(); return;
    case Qt::Key_Left:
    case Qt::Key_PageUp: previous(); return;
    case Qt::Key_Plus:
    case Qt::Key_Equal: setPresentationScale(scale_ + 0.25); return;
    case Qt::Key_Minus: setPresentationScale(scale_ - 0.25); return;
    default: QWidget::keyPressEvent(event);
  }
}

void TeachView::rebuild() {
  facts_ = TeachFacts{};
  tree_ = TreeLayout{};
  if (document_->isOpen()) {
    facts_ = teach_facts(*document_->data(), document_->round());
    if (auto nodes = document_->data()->draft_nodes.find(document_->round()); nodes != document_->data()->draft_nodes.end()) {
      tree_ = layout_draft_tree(nodes->second);
    }
  }
  draw();
}

void TeachView::draw() {
  const QPalette& p = palette();
  const QColor fg = p.color(QPalette::WindowText), good = accepted_colour(p), bad = rejected_colour(p),
               dim = dim_colour(p), accent = p.color(QPalette::Highlight);
  for (int i = 0; i < stage_labels_.size(); ++i) {
    const bool on = i == static_cast<int>(stage_);
    stage_labels_[i]->setStyleSheet(on ? QStringLiteral("font-weight: bold; border-radius: 6px; background: %1; color: %2")
                                             .arg(accent.name(), p.color(QPalette::HighlightedText).name())
                                       : QStringLiteral("color: %1").arg(with_alpha(fg, 150).name(QColor::HexArgb)));
  }
  const TokenNamer namer = [this](int32_t id) { return QStringLiteral("“%1”").arg(document_->tokenText(id)).toStdString(); };
  explanation_->setText(QString::fromStdString(teach_explanation(facts_, stage_, namer)));
  round_label_->setText(facts_.found ? tr("round %1 · %2 of %3")
                                           .arg(facts_.round)
                                           .arg(static_cast<int>(stage_) + 1)
                                           .arg(kTeachStageCount)
                                     : tr("open a session to teach from"));
  prev_->setEnabled(facts_.found);
  next_->setEnabled(facts_.found);

  scene_->clear();
  view_->setBackgroundBrush(p.color(QPalette::Base));
  if (!facts_.found) return;
  QFont font = QWidget::font();
  font.setPointSizeF(QFont().pointSizeF() * 1.2);
  const auto text_at = [&](const QString& s, QPointF centre, const QColor& colour) {
    auto* t = scene_->addSimpleText(s, font);
    t->setBrush(colour);
    t->setPos(centre - QPointF(t->boundingRect().width() / 2, t->boundingRect().height() / 2));
    return t;
  };
  // The draft tree: what each stage decides about the nodes.
  const bool decided = stage_ >= TeachStage::kAccept;
  const auto centre = [](const TreeNodeLayout& n) { return QPointF(n.depth * kColumn, n.row * kRow); };
  for (const auto& n : tree_.nodes) {
    if (n.parent < 0) continue;
    const auto& parent = tree_.nodes[static_cast<size_t>(n.parent)];
    const bool path = decided && n.on_accepted_path;
    scene_->addLine(QLineF(centre(parent) + QPointF(kNodeW / 2, 0), centre(n) - QPointF(kNodeW / 2, 0)),
                    QPen(path ? good : dim, path ? 4.0 : 1.5));
  }
  for (const auto& n : tree_.nodes) {
    QColor edge = n.node < 0 ? fg : accent;
    if (stage_ == TeachStage::kSelect) edge = dim;
    if (decided) edge = n.on_accepted_path ? good : n.visited ? bad : dim;
    if (stage_ == TeachStage::kCommit && n.node >= 0 && !n.on_accepted_path) edge = with_alpha(dim, 90);
    const QPointF c = centre(n);
    scene_->addRect(QRectF(c.x() - kNodeW / 2, c.y() - kNodeH / 2, kNodeW, kNodeH), QPen(edge, 2.5), with_alpha(edge, 60));
    QString label = n.node < 0 ? tr("context") : document_->tokenText(n.token);
    if (label.size() > 9) label = label.left(8) + QChar(0x2026);
    text_at(label, c, stage_ == TeachStage::kCommit && !n.on_accepted_path && n.node >= 0 ? with_alpha(fg, 90) : fg);
    if (n.node >= 0 && (stage_ == TeachStage::kDraft || stage_ == TeachStage::kVerify)) {
      const double prob = stage_ == TeachStage::kDraft ? n.draft_prob : n.target_prob;
      if (prob >= 0) {
        auto* t = text_at(QStringLiteral("%1 %2").arg(stage_ == TeachStage::kDraft ? "q" : "p").arg(prob, 0, 'f', 2),
                          c + QPointF(0, kNodeH * 0.85), with_alpha(fg, 170));
        t->setScale(0.8);
      }
    }
  }
  if (decided && facts_.next_token >= 0) {  // the target's own token after the accepted path
    const TreeNodeLayout* last = tree_.nodes.empty() ? nullptr : &tree_.nodes[0];
    for (const auto& n : tree_.nodes) {
      if (n.on_accepted_path && (last == nullptr || n.depth > last->depth)) last = &n;
    }
    if (last != nullptr) {
      const QPointF c = centre(*last) + QPointF(kColumn, -kRow * 0.9);
      const QColor colour = facts_.bonus ? reuse_colour(p) : bad;
      scene_->addLine(QLineF(centre(*last) + QPointF(kNodeW / 2, 0), c - QPointF(kNodeW / 2, 0)), QPen(colour, 3, Qt::DashLine));
      scene_->addRect(QRectF(c.x() - kNodeW / 2, c.y() - kNodeH / 2, kNodeW, kNodeH), QPen(colour, 3), with_alpha(colour, 70));
      text_at(document_->tokenText(facts_.next_token), c, fg);
      text_at(facts_.bonus ? tr("bonus") : tr("correction"), c + QPointF(0, -kNodeH * 0.9), colour);
    }
  }
  // The KV block strip under the tree: stands out in select and verify, where attention reads it.
  const double strip_y = (std::max(1, tree_.rows) + 0.6) * kRow;
  const int64_t blocks = std::min<int64_t>(facts_.blocks_per_head, 96);
  const bool reading = stage_ == TeachStage::kSelect || stage_ == TeachStage::kVerify;
  const std::set<int32_t> kept(facts_.strip_blocks.begin(), facts_.strip_blocks.end());
  const double x0 = -kNodeW / 2;
  for (int64_t b = 0; b < blocks; ++b) {
    const bool read = facts_.strip_layer < 0 || kept.count(static_cast<int32_t>(b)) > 0;
    QColor c = read ? (reading ? accent : dim) : with_alpha(dim, 50);
    if (reading && read && (b < facts_.sink_blocks || b >= facts_.blocks_per_head - facts_.local_blocks) && facts_.strip_layer >= 0) {
      c = good;  // sink and local blocks are always kept
    }
    scene_->addRect(QRectF(x0 + static_cast<double>(b) * (kBlockW + 2), strip_y, kBlockW, kBlockH), QPen(Qt::NoPen), c);
  }
  const QString strip_text = facts_.strip_layer >= 0
                                 ? tr("KV blocks of the context, layer %1 head 0: coloured = read (green: sink and local)")
                                       .arg(facts_.strip_layer)
                                 : tr("KV blocks of the context: every block is read");
  auto* caption = scene_->addSimpleText(strip_text + (facts_.blocks_per_head > blocks ? tr(" (first %1 shown)").arg(blocks) : QString()), font);
  caption->setBrush(with_alpha(fg, reading ? 255 : 140));
  caption->setPos(x0, strip_y + kBlockH + 6);
  static_cast<FittingView*>(view_)->fit();
}

}  // namespace specula::ui
