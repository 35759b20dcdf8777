#include "ui/views/timeline_view.h"

#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <cmath>

#include "ui/models/range_stats_model.h"
#include "ui/models/session_document.h"
#include "ui/views/plot_theme.h"
#include "ui/views/timeline_plottable.h"

namespace specula::ui {
namespace {

// Key axis ticks are microseconds; labels say "250 µs", "1.500 ms" as the zoom asks.
class DurationTicker : public QCPAxisTicker {
 protected:
  QString getTickLabel(double tick, const QLocale&, QChar, int) override { return format_duration(tick * 1000.0); }
};

}  // namespace

TimelineView::TimelineView(SessionDocument* document, QWidget* parent)
    : QWidget(parent),
      document_(document),
      model_(std::make_unique<TimelineModel>()),
      plot_(new QCustomPlot(this)),
      stats_(new RangeStatsModel(this)),
      sorted_(new QSortFilterProxyModel(this)),
      table_(new QTableView(this)),
      details_(new QLabel(this)),
      range_label_(new QLabel(this)),
      stats_timer_(new QTimer(this)) {
  setObjectName(QStringLiteral("timelineView"));
  setFocusPolicy(Qt::StrongFocus);
  plottable_ = new TimelinePlottable(plot_->xAxis, plot_->yAxis, model_.get());
  plot_->yAxis->setRangeReversed(true);
  plot_->yAxis->grid()->setVisible(false);
  plot_->xAxis->setTicker(QSharedPointer<DurationTicker>::create());
  plot_->xAxis->setLabel(tr("time since the first span"));
  plot_->setNoAntialiasingOnDrag(true);
  range_item_ = new QCPItemRect(plot_);
  range_item_->setVisible(false);
  range_item_->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
  range_item_->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
  empty_text_ = new QCPItemText(plot_);
  empty_text_->position->setType(QCPItemPosition::ptAxisRectRatio);
  empty_text_->position->setCoords(0.5, 0.5);
  empty_text_->setVisible(false);
  note_ = new QLabel(this);
  note_->setObjectName(QStringLiteral("timelineNote"));
  note_->setWordWrap(true);
  note_->setVisible(false);

  sorted_->setSourceModel(stats_);
  sorted_->setSortRole(Qt::UserRole);
  table_->setModel(sorted_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(RangeStatsModel::kTotal, Qt::DescendingOrder);
  table_->horizontalHeader()->setSectionResizeMode(RangeStatsModel::kName, QHeaderView::Stretch);
  table_->verticalHeader()->setVisible(false);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  details_->setWordWrap(true);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  details_->setText(tr("Wheel zooms, drag pans, right drag (or Shift + drag) marks a range, a click shows a span."));

  auto* bottom = new QWidget(this);
  auto* bottom_layout = new QVBoxLayout(bottom);
  bottom_layout->setContentsMargins(0, 0, 0, 0);
  bottom_layout->addWidget(range_label_);
  bottom_layout->addWidget(table_, 1);
  bottom_layout->addWidget(details_);
  auto* splitter = new QSplitter(Qt::Vertical, this);
  splitter->addWidget(plot_);
  splitter->addWidget(bottom);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(note_);
  layout->addWidget(splitter);

  stats_timer_->setSingleShot(true);
  stats_timer_->setInterval(80);
  connect(stats_timer_, &QTimer::timeout, this, &TimelineView::refreshStats);
  connect(plot_->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
    if (!has_range_) stats_timer_->start();
  });

  connect(plot_, &QCustomPlot::mouseWheel, this, [this](QWheelEvent* event) {
    const double anchor = plot_->xAxis->pixelToCoord(event->position().x()) * 1000.0;
    zoomAt(anchor, std::pow(1.0015, event->angleDelta().y()));
  });
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* event) {
    press_pos_ = event->position();
    press_range_ = visibleRange();
    moved_ = false;
    const bool range = event->button() == Qt::RightButton ||
                       (event->button() == Qt::LeftButton && (event->modifiers() & Qt::ShiftModifier));
    drag_ = range ? Drag::kRange : event->button() == Qt::LeftButton ? Drag::kPan : Drag::kNone;
  });
  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    if (drag_ == Drag::kNone) return;
    if (std::abs(event->position().x() - press_pos_.x()) > 3) moved_ = true;
    if (!moved_) return;
    if (drag_ == Drag::kPan) {
      const double ns_per_px = press_range_.width() / std::max(1, plot_->axisRect()->width());
      setVisibleRange(pan_range(press_range_, -(event->position().x() - press_pos_.x()) * ns_per_px));
    } else {
      const double a = plot_->xAxis->pixelToCoord(press_pos_.x()) * 1000.0;
      const double b = plot_->xAxis->pixelToCoord(event->position().x()) * 1000.0;
      range_item_->setVisible(true);
      range_item_->topLeft->setCoords(std::min(a, b) / 1000.0, 0);
      range_item_->bottomRight->setCoords(std::max(a, b) / 1000.0, 1);
      plot_->replot(QCustomPlot::rpQueuedReplot);
    }
  });
  connect(plot_, &QCustomPlot::mouseRelease, this, [this](QMouseEvent* event) {
    const Drag drag = drag_;
    drag_ = Drag::kNone;
    if (drag == Drag::kRange && moved_) {
      const double a = plot_->xAxis->pixelToCoord(press_pos_.x()) * 1000.0;
      const double b = plot_->xAxis->pixelToCoord(event->position().x()) * 1000.0;
      selectRange(std::min(a, b), std::max(a, b));
    } else if (!moved_ && event->button() == Qt::LeftButton) {
      const double t = plot_->xAxis->pixelToCoord(event->position().x()) * 1000.0;
      const int32_t track = plottable_->trackAtValue(plot_->yAxis->pixelToCoord(event->position().y()));
      selectAt(t, track);
    }
  });
  connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent* event) {
    const double t = plot_->xAxis->pixelToCoord(event->position().x()) * 1000.0;
    const int32_t track = plottable_->trackAtValue(plot_->yAxis->pixelToCoord(event->position().y()));
    const double tolerance = 3 * visibleRange().width() / std::max(1, plot_->axisRect()->width());
    const int32_t span = model_->span_at(track, t, tolerance);
    if (span < 0) return;
    const auto& s = model_->tracks()[static_cast<size_t>(track)].spans[static_cast<size_t>(span)];
    const double pad = 0.1 * static_cast<double>(std::max<int64_t>(1, s.end - s.start));
    setVisibleRange({static_cast<double>(s.start) - pad, static_cast<double>(s.end) + pad});
  });
  connect(document_, &SessionDocument::sessionChanged, this, &TimelineView::rebuild);
  rebuild();
}

TimelineView::~TimelineView() = default;

TimeRange TimelineView::visibleRange() const {
  const QCPRange r = plot_->xAxis->range();
  return {r.lower * 1000.0, r.upper * 1000.0};
}

void TimelineView::setVisibleRange(TimeRange range) {
  plot_->xAxis->setRange(range.t0 / 1000.0, range.t1 / 1000.0);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void TimelineView::zoomAt(double anchor_ns, double factor) { setVisibleRange(zoom_range(visibleRange(), anchor_ns, factor)); }

void TimelineView::selectRange(double t0_ns, double t1_ns) {
  if (t1_ns <= t0_ns) return clearRange();
  has_range_ = true;
  range_t0_ = t0_ns;
  range_t1_ = t1_ns;
  QColor shade = reuse_colour(palette());
  shade.setAlpha(50);
  range_item_->setBrush(shade);
  range_item_->setPen(QPen(reuse_colour(palette())));
  range_item_->topLeft->setCoords(t0_ns / 1000.0, 0);
  range_item_->bottomRight->setCoords(t1_ns / 1000.0, 1);
  range_item_->setVisible(true);
  refreshStats();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void TimelineView::clearRange() {
  has_range_ = false;
  range_item_->setVisible(false);
  refreshStats();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void TimelineView::refreshStats() {
  const TimeRange r = has_range_ ? TimeRange{range_t0_, range_t1_} : visibleRange();
  stats_->setStats(model_->kernel_stats(r.t0, r.t1), r.t0, r.t1);
  range_label_->setText((has_range_ ? tr("Marked range %1 – %2 (%3)") : tr("Visible range %1 – %2 (%3)"))
                            .arg(format_duration(r.t0), format_duration(r.t1), format_duration(r.width())));
}

bool TimelineView::selectAt(double t_ns, int32_t track) {
  const double tolerance = 3 * visibleRange().width() / std::max(1, plot_->axisRect()->width());
  const int32_t span = model_->span_at(track, t_ns, tolerance);
  plottable_->setHighlight(track, span);
  plot_->replot(QCustomPlot::rpQueuedReplot);
  if (span < 0) {
    details_->clear();
    return false;
  }
  showDetails(track, span);
  return true;
}

QString TimelineView::details() const { return details_->text(); }

void TimelineView::showDetails(int32_t track, int32_t span_index) {
  const auto& track_ref = model_->tracks()[static_cast<size_t>(track)];
  const auto& lane = model_->lanes()[static_cast<size_t>(track_ref.lane)];
  const TimelineSpan& span = track_ref.spans[static_cast<size_t>(span_index)];
  const SessionData* data = document_->data();
  const QString when = tr("start %1, duration %2")
                           .arg(format_duration(static_cast<double>(span.start)),
                                format_duration(static_cast<double>(span.end - span.start)));
  if (lane.kind == SpanKind::kKernel && data != nullptr && static_cast<size_t>(span.source) < data->kernels.size()) {
    const auto& k = data->kernels[static_cast<size_t>(span.source)];
    details_->setText(tr("<b>%1</b><br>%2 on %3<br>grid (%4, %5, %6), block (%7, %8, %9), %10 registers/thread, "
                         "shared memory %11 B static + %12 B dynamic, correlation %13")
                          .arg(QString::fromStdString(k.demangled_name).toHtmlEscaped(), when,
                               QString::fromStdString(lane.label))
                          .arg(k.grid[0]).arg(k.grid[1]).arg(k.grid[2])
                          .arg(k.block[0]).arg(k.block[1]).arg(k.block[2])
                          .arg(k.registers_per_thread)
                          .arg(k.static_shared_memory)
                          .arg(k.dynamic_shared_memory)
                          .arg(k.correlation_id));
  } else if (data != nullptr && static_cast<size_t>(span.source) < data->nvtx.size()) {
    const auto& r = data->nvtx[static_cast<size_t>(span.source)];
    QString payload = r.payload ? tr(", payload %1 (the round, or tokens for prefill)").arg(*r.payload) : QString();
    details_->setText(tr("<b>%1</b><br>%2 on %3%4")
                          .arg(QString::fromStdString(r.text).toHtmlEscaped(), when, QString::fromStdString(lane.label),
                               payload));
    if (r.payload && r.text != "prefill") document_->setRound(*r.payload);
  }
}

void TimelineView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {
    apply_plot_theme(plot_, palette());
    plottable_->setModel(model_.get());
    plot_->replot();
  }
}

void TimelineView::keyPressEvent(QKeyEvent* event) {
  if (event->key() == Qt::Key_Escape) return clearRange();
  if (event->key() == Qt::Key_0 || event->key() == Qt::Key_Home) {
    plot_->xAxis->setRange(0, model_->extent().t1 / 1000.0);
    return plot_->replot();
  }
  QWidget::keyPressEvent(event);
}

void TimelineView::rebuild() {
  *model_ = document_->isOpen() ? TimelineModel::from_session(*document_->data()) : TimelineModel{};
  plottable_->setModel(model_.get());
  has_range_ = false;
  range_item_->setVisible(false);
  apply_plot_theme(plot_, palette());
  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  for (const auto& lane : model_->lanes()) {
    ticker->addTick(plottable_->rowOf(lane.first_track), QString::fromStdString(lane.label));
  }
  plot_->yAxis->setTicker(ticker);
  plot_->yAxis->setRange(-0.6, std::max(1.0, plottable_->rowCount() - 0.4));
  plot_->xAxis->setRange(0, std::max(1.0, model_->extent().t1 / 1000.0));
  note_text_ = document_->isOpen() ? QString::fromStdString(timeline_note(*document_->data())) : QString();
  note_->setText(note_text_);
  note_->setVisible(!note_text_.isEmpty());
  empty_text_->setVisible(document_->isOpen() && model_->lanes().empty());
  empty_text_->setText(note_text_.isEmpty() ? tr("Nothing to draw in this session") : note_text_);
  empty_text_->setColor(palette().color(QPalette::WindowText));
  refreshStats();
  plot_->replot();
}

}  // namespace specula::ui
