#pragma once
// The refresh/reuse schedule: one strip per layer over the rounds, refresh and reuse in two
// colours, anchor layers (those that refresh, or that others reuse) marked on the axis. A click
// opens that round and layer.
#include <QWidget>

#include "ui/models/layer_stats.h"

class QCustomPlot;
class QCPColorMap;

namespace specula::ui {

class SessionDocument;

class ScheduleView : public QWidget {
  Q_OBJECT
 public:
  explicit ScheduleView(SessionDocument* document, QWidget* parent = nullptr);
  const Schedule& schedule() const { return schedule_; }
  QCustomPlot* plot() const { return plot_; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void rebuild();

  SessionDocument* document_;
  QCustomPlot* plot_;
  QCPColorMap* map_;
  Schedule schedule_;
};

}  // namespace specula::ui
