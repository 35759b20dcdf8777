#include "ui/views/timeline_plottable.h"

#include <cmath>
#include <functional>

#include "ui/views/plot_theme.h"

namespace specula::ui {
namespace {

constexpr double kLaneGap = 0.6;     // rows between lanes
constexpr double kBarHalf = 0.42;    // half a bar's height, in rows
constexpr double kMergePx = 2.0;     // spans narrower than this merge into a run
constexpr double kLabelPx = 36.0;    // spans wider than this get their name written in

}  // namespace

TimelinePlottable::TimelinePlottable(QCPAxis* key_axis, QCPAxis* value_axis, const TimelineModel* model)
    : QCPAbstractPlottable(key_axis, value_axis) {
  setSelectable(QCP::stNone);
  setAntialiased(false);  // bars are pixel-aligned rectangles; antialiasing only costs time
  setModel(model);
}

void TimelinePlottable::setModel(const TimelineModel* model) {
  model_ = model;
  rows_.clear();
  name_colours_.clear();
  row_count_ = 0;
  highlight_track_ = highlight_span_ = -1;
  if (model_ == nullptr) return;
  double row = 0;
  for (const auto& lane : model_->lanes()) {
    for (int32_t t = 0; t < lane.track_count; ++t) rows_.push_back(row++);
    row += kLaneGap;
  }
  row_count_ = row;
}

void TimelinePlottable::updateColours(const QPalette& palette) {
  const bool dark = is_dark(palette);
  if (model_ == nullptr || (name_colours_.size() == model_->short_names().size() && dark == colours_dark_)) return;
  colours_dark_ = dark;
  name_colours_.clear();
  for (const auto& name : model_->short_names()) {
    name_colours_.push_back(name_colour(std::hash<std::string>{}(name), palette));
  }
}

int32_t TimelinePlottable::trackAtValue(double value) const {
  for (size_t t = 0; t < rows_.size(); ++t) {
    if (std::abs(value - rows_[t]) <= kBarHalf + 0.08) return static_cast<int32_t>(t);
  }
  return -1;
}

void TimelinePlottable::setHighlight(int32_t track, int32_t span) {
  highlight_track_ = track;
  highlight_span_ = span;
}

double TimelinePlottable::selectTest(const QPointF&, bool, QVariant*) const { return -1; }

QCPRange TimelinePlottable::getKeyRange(bool& found, QCP::SignDomain) const {
  found = model_ != nullptr && model_->span_count() > 0;
  if (!found) return {};
  return QCPRange(0, model_->extent().t1 / 1000.0);
}

QCPRange TimelinePlottable::getValueRange(bool& found, QCP::SignDomain, const QCPRange&) const {
  found = model_ != nullptr;
  return QCPRange(-0.5, std::max(0.5, row_count_ - kLaneGap - 0.5));
}

void TimelinePlottable::draw(QCPPainter* painter) {
  last_rects_ = 0;
  if (model_ == nullptr) return;
  QCPAxis* key = keyAxis();
  QCPAxis* value = valueAxis();
  const QCPRange range = key->range();
  TimeMapping map{range.lower * 1000.0, range.upper * 1000.0, key->coordToPixel(range.lower),
                  key->coordToPixel(range.upper)};
  const QRect clip = clipRect();
  const QPalette& p = parentPlot()->palette();
  updateColours(p);
  const QColor merged = dim_colour(p);
  const QColor text = p.color(QPalette::WindowText);
  painter->setPen(Qt::NoPen);
  const QFontMetrics metrics(painter->font());
  const auto& tracks = model_->tracks();
  for (size_t t = 0; t < tracks.size(); ++t) {
    const double y0 = value->coordToPixel(rows_[t] - kBarHalf);
    const double y1 = value->coordToPixel(rows_[t] + kBarHalf);
    const double top = std::min(y0, y1), height = std::abs(y1 - y0);
    if (top > clip.bottom() || top + height < clip.top()) continue;
    scratch_.clear();
    model_->visible_rects(static_cast<int32_t>(t), map, kMergePx, scratch_);
    last_rects_ += static_cast<int64_t>(scratch_.size());
    const auto& spans = tracks[t].spans;
    for (const TimelineRect& r : scratch_) {
      const QRectF box(std::floor(r.x0), std::floor(top), std::max(1.0, std::ceil(r.x1) - std::floor(r.x0)),
                       std::ceil(height));
      if (r.span < 0) {  // a merged run: a flat grey (pattern brushes cost several ms per replot)
        painter->fillRect(box, merged);
        continue;
      }
      const int32_t name = spans[static_cast<size_t>(r.span)].name;
      painter->fillRect(box, name_colours_[static_cast<size_t>(name)]);
      if (box.width() > kLabelPx) {
        painter->setPen(is_dark(p) ? QColor(20, 20, 20) : text);
        const QString label = metrics.elidedText(QString::fromStdString(model_->short_names()[static_cast<size_t>(name)]),
                                                 Qt::ElideRight, static_cast<int>(box.width()) - 4);
        painter->drawText(box.adjusted(2, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft, label);
        painter->setPen(Qt::NoPen);
      }
    }
    if (static_cast<int32_t>(t) == highlight_track_ && highlight_span_ >= 0 &&
        static_cast<size_t>(highlight_span_) < spans.size()) {
      const auto& s = spans[static_cast<size_t>(highlight_span_)];
      const double x0 = map.to_px(static_cast<double>(s.start)), x1 = map.to_px(static_cast<double>(s.end));
      painter->setPen(QPen(text, 2));
      painter->setBrush(Qt::NoBrush);
      painter->drawRect(QRectF(x0, top, std::max(2.0, x1 - x0), height));
      painter->setPen(Qt::NoPen);
    }
  }
}

void TimelinePlottable::drawLegendIcon(QCPPainter* painter, const QRectF& rect) const {
  painter->fillRect(rect, QColor(120, 160, 220));
}

}  // namespace specula::ui
