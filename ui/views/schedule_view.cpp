#include "ui/views/schedule_view.h"

#include <qcustomplot.h>

#include <QVBoxLayout>

#include "ui/models/session_document.h"
#include "ui/views/plot_theme.h"

namespace specula::ui {

ScheduleView::ScheduleView(SessionDocument* document, QWidget* parent)
    : QWidget(parent), document_(document), plot_(new QCustomPlot(this)) {
  setObjectName(QStringLiteral("scheduleView"));
  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  map_->setInterpolate(false);
  plot_->legend->setVisible(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(plot_);
  connect(document_, &SessionDocument::sessionChanged, this, &ScheduleView::rebuild);
  connect(document_, &SessionDocument::roundChanged, this, &ScheduleView::rebuild);
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* event) {
    if (schedule_.rounds.empty()) return;
    const int c = static_cast<int>(std::floor(plot_->xAxis->pixelToCoord(event->position().x()) + 0.5));
    const int l = static_cast<int>(std::floor(plot_->yAxis->pixelToCoord(event->position().y()) + 0.5));
    if (c < 0 || c >= static_cast<int>(schedule_.rounds.size()) || l < 0 || l >= schedule_.layers) return;
    document_->setRound(schedule_.rounds[static_cast<size_t>(c)]);
    document_->focusLayer(l);
  });
  rebuild();
}

void ScheduleView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) rebuild();
}

void ScheduleView::rebuild() {
  plot_->clearItems();
  plot_->clearGraphs();
  apply_plot_theme(plot_, palette());
  const QPalette& p = palette();
  schedule_ = document_->isOpen() ? layer_schedule(*document_->data()) : Schedule{};
  const int cols = static_cast<int>(schedule_.rounds.size());
  // Three levels: none (0), refresh (1), reuse (2).
  QCPColorGradient gradient;
  gradient.setLevelCount(3);
  gradient.setColorStopAt(0.0, p.color(QPalette::Base));
  gradient.setColorStopAt(0.5, accepted_colour(p));
  gradient.setColorStopAt(1.0, reuse_colour(p));
  gradient.setColorInterpolation(QCPColorGradient::ciRGB);
  map_->setGradient(gradient);
  map_->setDataRange(QCPRange(0, 2));
  map_->data()->setSize(std::max(1, cols), std::max(1, schedule_.layers));
  map_->data()->setRange(QCPRange(0, std::max(0, cols - 1)), QCPRange(0, std::max(0, schedule_.layers - 1)));
  map_->data()->fill(0);
  for (int l = 0; l < schedule_.layers; ++l) {
    for (int c = 0; c < cols; ++c) map_->data()->setCell(c, l, static_cast<double>(schedule_.at(l, c)));
  }
  // Legend entries as empty graphs carrying the colours.
  const auto legend_entry = [&](const QString& name, const QColor& colour) {
    QCPGraph* g = plot_->addGraph();
    g->setName(name);
    g->setPen(QPen(colour, 8));
  };
  legend_entry(tr("refresh (computes its selection)"), accepted_colour(p));
  legend_entry(tr("reuse (takes its anchor's)"), reuse_colour(p));
  map_->removeFromLegend();

  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  const int step = std::max(1, schedule_.layers / 16);
  for (int l = 0; l < schedule_.layers; ++l) {
    if (schedule_.anchor[static_cast<size_t>(l)]) ticker->addTick(l, tr("L%1 ◆").arg(l));
    else if (l % step == 0) ticker->addTick(l, tr("L%1").arg(l));
  }
  plot_->yAxis->setTicker(ticker);
  plot_->yAxis->setLabel(tr("layer (◆ anchor)"));
  plot_->xAxis->setLabel(tr("round"));
  // Round ids on the x axis (columns are positions in the round list).
  auto round_ticker = QSharedPointer<QCPAxisTickerText>::create();
  const int round_step = std::max(1, cols / 12);
  for (int c = 0; c < cols; c += round_step) round_ticker->addTick(c, QString::number(schedule_.rounds[static_cast<size_t>(c)]));
  plot_->xAxis->setTicker(round_ticker);
  plot_->xAxis->setRange(-0.5, std::max(1, cols) - 0.5);
  plot_->yAxis->setRange(-0.5, std::max(1, schedule_.layers) - 0.5);
  if (schedule_.layers == 0) {
    auto* text = new QCPItemText(plot_);
    text->position->setType(QCPItemPosition::ptAxisRectRatio);
    text->position->setCoords(0.5, 0.5);
    text->setColor(p.color(QPalette::WindowText));
    text->setText(tr("No layer selections in this session\n(record with a --sparse preset)"));
  } else if (document_->roundIndex() >= 0) {
    auto* cursor = new QCPItemRect(plot_);
    const double c = document_->roundIndex();
    cursor->topLeft->setCoords(c - 0.5, schedule_.layers - 0.5);
    cursor->bottomRight->setCoords(c + 0.5, -0.5);
    cursor->setPen(QPen(p.color(QPalette::WindowText), 1.5));
  }
  plot_->replot();
}

}  // namespace specula::ui
