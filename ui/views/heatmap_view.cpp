#include "ui/views/heatmap_view.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include "ui/models/session_document.h"
#include "ui/views/plot_theme.h"

namespace specula::ui {

HeatmapView::HeatmapView(SessionDocument* document, QWidget* parent)
    : QWidget(parent),
      document_(document),
      plot_(new QCustomPlot(this)),
      mode_box_(new QComboBox(this)),
      all_rounds_(new QCheckBox(tr("all rounds"), this)),
      hover_(new QLabel(this)) {
  setObjectName(QStringLiteral("heatmapView"));
  mode_box_->addItem(tr("Layers × tree distance (overlap)"));
  mode_box_->addItem(tr("Layers × layers (Jaccard)"));
  mode_box_->addItem(tr("Layers × blocks (queries per block)"));
  all_rounds_->setChecked(true);
  all_rounds_->setToolTip(tr("Average over every round, or show the current round only"));
  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  scale_ = new QCPColorScale(plot_);
  plot_->plotLayout()->addElement(0, 1, scale_);
  map_->setColorScale(scale_);
  // Viridis-like stops: dark to yellow, so neither end looks like the empty (NaN) background.
  QCPColorGradient gradient;
  gradient.setColorStops({{0.0, QColor(68, 1, 84)},
                          {0.25, QColor(59, 82, 139)},
                          {0.5, QColor(33, 145, 140)},
                          {0.75, QColor(94, 201, 98)},
                          {1.0, QColor(253, 231, 37)}});
  gradient.setNanHandling(QCPColorGradient::nhTransparent);
  map_->setGradient(gradient);
  map_->setInterpolate(false);
  auto* margins = new QCPMarginGroup(plot_);
  plot_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  scale_->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  plot_->setMouseTracking(true);

  auto* controls = new QHBoxLayout;
  controls->addWidget(mode_box_);
  controls->addWidget(all_rounds_);
  controls->addStretch(1);
  controls->addWidget(hover_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(controls);
  layout->addWidget(plot_, 1);

  connect(mode_box_, &QComboBox::currentIndexChanged, this, &HeatmapView::rebuild);
  connect(all_rounds_, &QCheckBox::toggled, this, &HeatmapView::rebuild);
  connect(document_, &SessionDocument::sessionChanged, this, &HeatmapView::rebuild);
  connect(document_, &SessionDocument::roundChanged, this, [this] {
    if (mode() == Mode::kBlocks || !all_rounds_->isChecked()) rebuild();
  });
  connect(document_, &SessionDocument::layerFocused, this, [this] {
    if (mode() == Mode::kBlocks) rebuild();
  });
  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    int row = 0, col = 0;
    const QString text = cellAt(event->position().toPoint(), &row, &col) ? cellText(row, col) : QString();
    hover_->setText(text);
    if (!text.isEmpty()) QToolTip::showText(event->globalPosition().toPoint(), text, plot_);
  });
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* event) {
    int row = 0, col = 0;
    if (event->button() == Qt::LeftButton && cellAt(event->position().toPoint(), &row, &col)) activateCell(row, col);
  });
  rebuild();
}

void HeatmapView::setMode(Mode mode) { mode_box_->setCurrentIndex(static_cast<int>(mode)); }
HeatmapView::Mode HeatmapView::mode() const { return static_cast<Mode>(mode_box_->currentIndex()); }
void HeatmapView::setAllRounds(bool all) { all_rounds_->setChecked(all); }

void HeatmapView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {
    apply_plot_theme(plot_, palette());
    scale_->axis()->setTickLabelColor(palette().color(QPalette::WindowText));
    scale_->axis()->setLabelColor(palette().color(QPalette::WindowText));
    plot_->replot();
  }
}

bool HeatmapView::cellAt(const QPoint& pos, int* row, int* col) const {
  if (grid_.rows == 0 || grid_.cols == 0) return false;
  const double key = plot_->xAxis->pixelToCoord(pos.x());
  const double value = plot_->yAxis->pixelToCoord(pos.y());
  const int c = static_cast<int>(std::floor(key + 0.5));
  const int r = static_cast<int>(std::floor(value + 0.5));
  if (c < 0 || c >= grid_.cols || r < 0 || r >= grid_.rows) return false;
  *row = r;
  *col = c;
  return true;
}

QString HeatmapView::cellText(int row, int col) const {
  if (row < 0 || row >= grid_.rows || col < 0 || col >= grid_.cols) return {};
  const double v = grid_.at(row, col);
  const int64_t n = grid_.samples_at(row, col);
  switch (mode()) {
    case Mode::kDistance:
      return std::isnan(v) ? tr("layer %1, distance %2: no query pairs").arg(row).arg(col)
                           : tr("layer %1, distance %2: overlap %3 (%4 pairs)").arg(row).arg(col).arg(v, 0, 'f', 3).arg(n);
    case Mode::kLayers:
      return std::isnan(v) ? tr("layers %1 and %2: no common queries").arg(row).arg(col)
                           : tr("layers %1 and %2: Jaccard %3 (%4 selections)").arg(row).arg(col).arg(v, 0, 'f', 3).arg(n);
    case Mode::kBlocks: {
      QString where;
      if (col < blocks_.sink_blocks) where = tr(" (sink)");
      else if (col >= blocks_.blocks_per_head - blocks_.local_blocks) where = tr(" (local)");
      return tr("layer %1, block %2%3: read by %4 of %5 queries").arg(row).arg(col).arg(where).arg(v, 0, 'f', 0).arg(n);
    }
  }
  return {};
}

void HeatmapView::activateCell(int row, int col) {
  (void)col;
  document_->focusLayer(row);
  if (mode() != Mode::kBlocks) setMode(Mode::kBlocks);
}

void HeatmapView::rebuild() {
  plot_->clearItems();
  apply_plot_theme(plot_, palette());
  const QColor fg = palette().color(QPalette::WindowText);
  scale_->axis()->setTickLabelColor(fg);
  scale_->axis()->setLabelColor(fg);
  all_rounds_->setEnabled(mode() != Mode::kBlocks);
  grid_ = Grid{};
  blocks_ = BlockCounts{};
  if (document_->isOpen()) {
    const SessionData& data = *document_->data();
    const std::optional<int64_t> scope = all_rounds_->isChecked() ? std::nullopt : std::optional<int64_t>(document_->round());
    switch (mode()) {
      case Mode::kDistance: grid_ = distance_overlap(data, scope); break;
      case Mode::kLayers: grid_ = layer_jaccard(data, scope); break;
      case Mode::kBlocks:
        blocks_ = block_counts(data, document_->round());
        grid_ = blocks_.grid;
        break;
    }
  }
  const QString round_text = document_->isOpen() ? tr("round %1").arg(document_->round()) : QString();
  switch (mode()) {
    case Mode::kDistance:
      plot_->xAxis->setLabel(tr("tree distance |depth i − depth j|"));
      scale_->axis()->setLabel(tr("mean block overlap"));
      break;
    case Mode::kLayers:
      plot_->xAxis->setLabel(tr("layer"));
      scale_->axis()->setLabel(tr("Jaccard"));
      break;
    case Mode::kBlocks:
      plot_->xAxis->setLabel(tr("KV block (within a head), %1").arg(round_text));
      scale_->axis()->setLabel(tr("queries reading the block"));
      break;
  }
  plot_->yAxis->setLabel(tr("layer"));
  map_->data()->setSize(std::max(1, grid_.cols), std::max(1, grid_.rows));
  map_->data()->setRange(QCPRange(0, std::max(0, grid_.cols - 1)), QCPRange(0, std::max(0, grid_.rows - 1)));
  map_->data()->fill(std::nan(""));
  bool any = false;
  for (int r = 0; r < grid_.rows; ++r) {
    for (int c = 0; c < grid_.cols; ++c) {
      map_->data()->setCell(c, r, grid_.at(r, c));
      any = any || !std::isnan(grid_.at(r, c));
    }
  }
  if (mode() == Mode::kBlocks) {
    map_->setDataRange(QCPRange(0, std::max<double>(1.0, static_cast<double>(blocks_.queries))));
  } else {
    map_->setDataRange(QCPRange(0, 1));
  }
  plot_->xAxis->setRange(-0.5, std::max(1, grid_.cols) - 0.5);
  plot_->yAxis->setRange(-0.5, std::max(1, grid_.rows) - 0.5);
  if (!any) {
    auto* text = new QCPItemText(plot_);
    text->position->setType(QCPItemPosition::ptAxisRectRatio);
    text->position->setCoords(0.5, 0.5);
    text->setColor(fg);
    text->setText(mode() == Mode::kDistance
                      ? tr("No per-query selections in this session\n(record with --sparse and --record-level full)")
                      : tr("No layer selections in this session\n(record with a --sparse preset)"));
  }
  if (mode() == Mode::kBlocks && grid_.cols > 0) {
    const auto mark = [&](double x, const QString& label) {
      auto* line = new QCPItemStraightLine(plot_);
      line->point1->setCoords(x, 0);
      line->point2->setCoords(x, 1);
      line->setPen(QPen(fg, 1.5, Qt::DashLine));
      auto* text = new QCPItemText(plot_);
      text->position->setType(QCPItemPosition::ptPlotCoords);
      text->position->setCoords(x, grid_.rows - 0.5);
      text->setPositionAlignment(Qt::AlignBottom | Qt::AlignHCenter);
      text->setColor(fg);
      text->setText(label);
      text->setClipToAxisRect(false);
    };
    if (blocks_.sink_blocks > 0) mark(blocks_.sink_blocks - 0.5, tr("sink │"));
    if (blocks_.local_blocks > 0 && blocks_.local_blocks < blocks_.blocks_per_head) {
      mark(static_cast<double>(blocks_.blocks_per_head - blocks_.local_blocks) - 0.5, tr("│ local"));
    }
    const int focus = document_->layer();
    if (focus >= 0 && focus < grid_.rows) {
      auto* rect = new QCPItemRect(plot_);
      rect->topLeft->setCoords(-0.5, focus + 0.5);
      rect->bottomRight->setCoords(grid_.cols - 0.5, focus - 0.5);
      rect->setPen(QPen(reuse_colour(palette()), 2));
    }
  }
  plot_->replot();
}

}  // namespace specula::ui
