#pragma once
// The kernel timeline (Tracy's interaction model): CUPTI kernels per stream and engine phases
// (NVTX) per thread in one custom plottable. Wheel zooms around the cursor, left drag pans,
// right drag (or Shift + left drag) marks a range that the statistics table below follows
// (kernel, count, total, mean, share of the range); without a marked range the table follows the
// visible range. A click on a span shows its details; a double click zooms to it. Esc clears.
#include <QWidget>
#include <memory>

#include "ui/models/timeline_model.h"

class QCustomPlot;
class QCPItemRect;
class QCPItemText;
class QLabel;
class QSortFilterProxyModel;
class QTableView;
class QTimer;

namespace specula::ui {

class RangeStatsModel;
class SessionDocument;
class TimelinePlottable;

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(SessionDocument* document, QWidget* parent = nullptr);
  ~TimelineView() override;

  const TimelineModel& model() const { return *model_; }
  RangeStatsModel* statsModel() const { return stats_; }
  QCustomPlot* plot() const { return plot_; }
  TimelinePlottable* plottable() const { return plottable_; }
  QString details() const;
  // Why GPU lanes (or all lanes) are missing, shown above the plot; empty when kernels exist.
  QString note() const { return note_text_; }

  // Visible range in ns relative to the model's origin.
  TimeRange visibleRange() const;
  void setVisibleRange(TimeRange range);
  void zoomAt(double anchor_ns, double factor);
  void selectRange(double t0_ns, double t1_ns);  // what a range drag does
  void clearRange();
  bool selectAt(double t_ns, int32_t track);      // what a click does; false if nothing there

 protected:
  void changeEvent(QEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void rebuild();
  void refreshStats();
  void showDetails(int32_t track, int32_t span);

  SessionDocument* document_;
  std::unique_ptr<TimelineModel> model_;
  QCustomPlot* plot_;
  TimelinePlottable* plottable_;
  QCPItemRect* range_item_;
  QCPItemText* empty_text_;  // the note in the plot's middle when no lane is drawn
  QLabel* note_;
  QString note_text_;
  RangeStatsModel* stats_;
  QSortFilterProxyModel* sorted_;
  QTableView* table_;
  QLabel* details_;
  QLabel* range_label_;
  QTimer* stats_timer_;
  bool has_range_ = false;
  double range_t0_ = 0, range_t1_ = 0;
  // Mouse gesture state.
  enum class Drag { kNone, kPan, kRange } drag_ = Drag::kNone;
  QPointF press_pos_;
  TimeRange press_range_;
  bool moved_ = false;
};

}  // namespace specula::ui
