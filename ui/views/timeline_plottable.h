#pragma once
// The kernel timeline as ONE QCustomPlot plottable: it draws every visible span of every track
// itself from a TimelineModel (culled to the key axis' range, sub-pixel spans merged), so the
// cost of a replot follows the pixels, not the 100k+ spans. Key axis: microseconds since the
// model's origin. Value axis: row positions (rowOf), reversed so the first lane is on top.
#include <qcustomplot.h>

#include <vector>

#include "ui/models/timeline_model.h"

namespace specula::ui {

class TimelinePlottable : public QCPAbstractPlottable {
  Q_OBJECT
 public:
  TimelinePlottable(QCPAxis* key_axis, QCPAxis* value_axis, const TimelineModel* model);

  void setModel(const TimelineModel* model);
  double rowOf(int32_t track) const { return rows_[static_cast<size_t>(track)]; }
  double rowCount() const { return row_count_; }
  int32_t trackAtValue(double value) const;  // -1 between tracks
  void setHighlight(int32_t track, int32_t span);
  int64_t lastRectCount() const { return last_rects_; }  // rects drawn by the last draw()

  double selectTest(const QPointF& pos, bool only_selectable, QVariant* details = nullptr) const override;
  QCPRange getKeyRange(bool& found, QCP::SignDomain domain = QCP::sdBoth) const override;
  QCPRange getValueRange(bool& found, QCP::SignDomain domain = QCP::sdBoth,
                         const QCPRange& key_range = QCPRange()) const override;

 protected:
  void draw(QCPPainter* painter) override;
  void drawLegendIcon(QCPPainter* painter, const QRectF& rect) const override;

 private:
  const TimelineModel* model_ = nullptr;
  std::vector<double> rows_;  // track -> row position (lanes separated by a gap)
  double row_count_ = 0;
  void updateColours(const QPalette& palette);  // per name, redone when the theme flips
  std::vector<QColor> name_colours_;
  bool colours_dark_ = false;
  std::vector<TimelineRect> scratch_;
  int32_t highlight_track_ = -1, highlight_span_ = -1;
  int64_t last_rects_ = 0;
};

}  // namespace specula::ui
