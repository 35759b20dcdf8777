#pragma once
// The kernel statistics table of the timeline's selected range (count, total, mean, share),
// sortable through a QSortFilterProxyModel: Qt::UserRole gives the raw number of each cell.
#include <QAbstractTableModel>
#include <vector>

#include "ui/models/timeline_model.h"

namespace specula::ui {

class RangeStatsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kName, kCount, kTotal, kMean, kShare, kColumns };
  explicit RangeStatsModel(QObject* parent = nullptr);

  void setStats(std::vector<KernelRangeStat> stats, double t0_ns, double t1_ns);
  const std::vector<KernelRangeStat>& stats() const { return stats_; }
  double rangeStart() const { return t0_; }
  double rangeEnd() const { return t1_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<KernelRangeStat> stats_;
  double t0_ = 0, t1_ = 0;
};

// "1.25 ms", "830 ns": a duration in the unit that keeps 3 significant digits readable.
QString format_duration(double ns);

}  // namespace specula::ui
